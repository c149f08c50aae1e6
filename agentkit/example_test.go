package agentkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// An agent with a tool and a tool that needs a human's approval, against
// a scripted model server. The run waits durably for the decision; an
// approver elsewhere finds it with Pending and answers with Decide.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_agentkit CASCADE")

	// The model: in production, any OpenAI-compatible endpoint.
	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}},
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "book_flight", Arguments: json.RawMessage(`{"to":"Paris"}`)}}},
		agentkittest.Reply{Text: "Booked: sunny in Paris, flight AF1234."},
	))
	defer srv.Close()
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "gpt-test", APIKey: "sk-..."})
	if err != nil {
		panic(err)
	}

	eng, err := durable.New(pool, &durable.Config{Schema: "example_agentkit", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	type City struct {
		City string `json:"city"`
	}
	type Flight struct {
		To string `json:"to"`
	}
	travel := agentkit.Define(eng, "travel", agentkit.AgentConfig{
		Model:  model,
		System: "You are a travel agent.",
		Tools: []*agentkit.Tool{
			agentkit.StepTool("weather", "Weather in a city.", json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
				func(ctx context.Context, a City) (string, error) { return "sunny in " + a.City, nil }, nil),
			agentkit.StepTool("book_flight", "Book a flight.", json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"}}}`),
				func(ctx context.Context, a Flight) (string, error) {
					// Hand agentkit.ToolIdempotencyKey(ctx) to the airline's API.
					return "AF1234 to " + a.To, nil
				}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{Timeout: 48 * time.Hour}}),
		},
		Limits: agentkit.Limits{MaxTurns: 10, MaxCostMicros: 2_000_000},
	})
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = eng.Shutdown(ctx) }()

	h, err := travel.Start(ctx, agentkit.Input{Prompt: "Fly me somewhere sunny."}, &durable.StartOpts{ID: "trip-7"})
	if err != nil {
		panic(err)
	}
	var pending []agentkit.PendingApproval
	for len(pending) == 0 {
		time.Sleep(10 * time.Millisecond)
		pending, _ = agentkit.Pending(ctx, eng, "trip-7")
	}
	p := pending[0]
	fmt.Println("approve?", p.Call.Name, string(p.Call.Arguments))
	if err := agentkit.Decide(ctx, eng, "trip-7", p.Call.ID, agentkit.Decision{Action: agentkit.ActionApprove, By: "ops@example.com"}); err != nil {
		panic(err)
	}
	res, err := h.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Outcome, res.Turns, res.Final)
	// Output:
	// approve? book_flight {"to":"Paris"}
	// completed 3 Booked: sunny in Paris, flight AF1234.
}
