package agentkit_test

// Child processes of the crash tests. The test binary re-executes itself
// with AGENTKIT_CHILD set; the child runs one engine with the crash agent
// and may SIGKILL itself at a chosen point, or be SIGKILLed by the parent,
// which is as abrupt as an OOM kill or a power cut. The scripted model
// server and the payment provider live in the parent, so their logs
// survive the kills.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/proctest"
)

func runChildIfAsked() bool {
	if os.Getenv("AGENTKIT_CHILD") == "" {
		return false
	}
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child error:", err)
		os.Exit(3)
	}
	os.Exit(0)
	return true
}

var killSelf = proctest.KillSelf

type amountArgs struct {
	Amount int `json:"amount"`
}

// crashTools are the tools of the crash agent: a pure lookup, a charge
// and a refund through the parent's payment provider (keyed by the call's
// idempotency key), and a ledger written in the step's transaction.
func crashTools(schema, providerURL, killKey string) []*agentkit.Tool {
	pay := func(ctx context.Context, what string, amount int) (string, error) {
		key := agentkit.ToolIdempotencyKey(ctx)
		body, _ := json.Marshal(map[string]int{"amount": amount})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, providerURL+"/"+what, bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			return "", fmt.Errorf("provider: %d %s %v", resp.StatusCode, b, err)
		}
		if key == killKey {
			killSelf() // the effect happened; its checkpoint did not
		}
		var ans struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(b, &ans)
		return fmt.Sprintf("%s %d: %s", what, amount, ans.ID), nil
	}
	ledger := pgx.Identifier{schema, "ledger"}.Sanitize()
	return []*agentkit.Tool{
		agentkit.StepTool("lookup", "Look a key up.", nil, func(_ context.Context, a keyArgs) (string, error) {
			return "info(" + a.Key + ")", nil
		}, nil),
		agentkit.StepTool("charge", "Charge the card.", nil, func(ctx context.Context, a amountArgs) (string, error) {
			return pay(ctx, "charge", a.Amount)
		}, nil),
		agentkit.StepTool("refund", "Refund the card.", nil, func(ctx context.Context, a amountArgs) (string, error) {
			return pay(ctx, "refund", a.Amount)
		}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{Timeout: time.Hour}}),
		agentkit.TxTool("ledger", "Write a ledger entry.", nil, func(ctx context.Context, tx pgx.Tx, a keyArgs) (string, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (idem_key, entry) VALUES ($1, $2)", agentkit.ToolIdempotencyKey(ctx), a.Key); err != nil {
				return "", err
			}
			return "recorded " + a.Key, nil
		}, nil),
	}
}

func runChild() error {
	ctx := context.Background()
	schema := os.Getenv("AGENTKIT_SCHEMA")
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	e, err := durable.New(pool, &durable.Config{
		Schema:        schema,
		AppVersion:    "crash",
		ExecutorID:    "agent-exec",
		LeaseTTL:      30 * time.Second,
		PollInterval:  100 * time.Millisecond,
		ParkThreshold: 2 * time.Hour, // the approval waits in memory, to be killed there
		StepRetry:     durable.RetryPolicy{BaseDelay: time.Millisecond},
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return err
	}
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: os.Getenv("AGENTKIT_MODEL_URL"), Model: "scripted", Timeout: time.Minute})
	if err != nil {
		return err
	}
	switch os.Getenv("AGENTKIT_CHILD") {
	case "mcp":
		return runMCPChild(ctx, e, model)
	case "output":
		return runOutputChild(ctx, e, model)
	case "budget":
		return runBudgetChild(ctx, e, pool, model)
	}
	maxTurns, _ := strconv.Atoi(os.Getenv("AGENTKIT_MAX_TURNS"))
	killAfterModel, _ := strconv.Atoi(os.Getenv("AGENTKIT_KILL_AFTER_MODEL"))
	hooks.SetAgent(e, "crash", hooks.AgentKnobs{AfterModel: func(_ string, turn int, live bool) {
		if live && turn == killAfterModel {
			killSelf() // the turn's answer is recorded; nothing after it ran
		}
	}})
	a := agentkit.Define(e, "crash", agentkit.AgentConfig{
		Model:  model,
		System: "You are the crash-test agent.",
		Tools:  crashTools(schema, os.Getenv("AGENTKIT_PROVIDER_URL"), os.Getenv("AGENTKIT_KILL_KEY")),
		Limits: agentkit.Limits{MaxTurns: maxTurns},
		Stream: true,
	})
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := a.Start(ctx, agentkit.Input{Prompt: "Settle the account."}, &durable.StartOpts{ID: "crash-run"})
	if err != nil {
		return err
	}
	fmt.Println("started")
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	fmt.Println("result", string(b))
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.Shutdown(sctx)
}

func startChild(t *testing.T, schema string, env ...string) *proctest.Child {
	t.Helper()
	return proctest.Start(t, append([]string{"AGENTKIT_CHILD=1", "AGENTKIT_SCHEMA=" + schema}, env...)...)
}

// result waits for the child's result line and its clean exit.
func childResult(t *testing.T, c *proctest.Child) agentkit.Result {
	t.Helper()
	line := c.WaitLine(t, "result ")
	var res agentkit.Result
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &res))
	require.NoError(t, c.Wait(t))
	return res
}

// runToResult launches e, starts run id of a with prompt, waits for its
// result and prints "result " and show(result) for the parent, then shuts
// e down.
func runToResult(ctx context.Context, e *durable.Engine, a *agentkit.Agent, id, prompt string, show func(agentkit.Result) string) error {
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := a.Start(ctx, agentkit.Input{Prompt: prompt}, &durable.StartOpts{ID: id})
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	fmt.Println("result", show(res))
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.Shutdown(sctx)
}
