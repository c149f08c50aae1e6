package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/durabletest"
)

// startAgent defines the example's agent on a durabletest engine, with
// its refunds table in a schema of the test's, and launches it.
func startAgent(t *testing.T, env *durabletest.Env) (*agentkit.Agent, string) {
	t.Helper()
	schema := durabletest.Schema(t)
	if err := createRefunds(context.Background(), env.Pool, schema); err != nil {
		t.Fatal(err)
	}
	srv := agentkittest.NewServer(script)
	t.Cleanup(srv.Close)
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	agent := defineAgent(env.Engine, env.Pool, schema, model)
	env.Launch()
	return agent, schema
}

func refunds(t *testing.T, env *durabletest.Env, schema string) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, "refunds"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestApprovalTimesOut: nobody decides, so after the approval's 48 hours
// the refund is denied and never issued. The test's clock skips the two
// days (durabletest's AutoSkip): the test takes milliseconds of waiting.
func TestApprovalTimesOut(t *testing.T) {
	env := durabletest.New(t, &durabletest.Options{AutoSkip: true})
	agent, schema := startAgent(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := env.Clock.Now()
	h, err := agent.Start(ctx, agentkit.Input{Prompt: "Order 42 arrived broken, I want my money back."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The deadline is 48h on the test's clock, to the nanosecond (not the
	// time left by the system clock, which has moved meanwhile).
	if waited := env.Clock.Now().Sub(start); waited < 48*time.Hour {
		t.Fatalf("the run ended after %v of the test's clock, before the approval's 48h deadline", waited)
	}
	if n := refunds(t, env, schema); n != 0 {
		t.Fatalf("%d refunds issued without an approval", n)
	}
	if !strings.Contains(res.Final, "Done.") {
		t.Fatalf("final answer %q", res.Final)
	}
}

// TestApprovalBeforeDeadline: approved a day into the wait, the refund is
// issued once. The clock moves only when the test says so.
func TestApprovalBeforeDeadline(t *testing.T) {
	env := durabletest.New(t, nil)
	agent, schema := startAgent(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ticket = "ticket-7"
	h, err := agent.Start(ctx, agentkit.Input{Prompt: "Order 42 arrived broken, I want my money back."}, &durable.StartOpts{ID: ticket})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Clock.BlockUntil(ctx, 1); err != nil { // the run waits for the decision
		t.Fatal(err)
	}
	env.Clock.Advance(24 * time.Hour)
	pend, err := agentkit.Pending(ctx, env.Engine, ticket)
	if err != nil || len(pend) != 1 {
		t.Fatalf("pending approvals: %v %v", pend, err)
	}
	if err := agentkit.Decide(ctx, env.Engine, ticket, pend[0].Call.ID, agentkit.Decision{Action: agentkit.ActionApprove, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if n := refunds(t, env, schema); n != 1 {
		t.Fatalf("%d refunds issued, want 1", n)
	}
}
