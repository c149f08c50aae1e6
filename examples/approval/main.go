// Command approval runs a support agent whose refund tool needs a human's
// approval. The run waits durably for the decision: the agent process can
// be stopped or killed while it waits and started again, and the decision
// can be sent from another terminal at any time.
//
// From the repository root, with DATABASE_URL set (for example inside
// `scripts/with-postgres bash`):
//
//	go run ./examples/approval agent                      # terminal 1: starts ticket-981, waits for approval
//	go run ./examples/approval approve ticket-981 call_1_0  # terminal 2
//	go run ./examples/approval deny ticket-981 call_1_0 "over the limit"
//	go run ./examples/approval pending ticket-981          # list the calls waiting for a decision
//	go run ./examples/approval reset                      # drop the example's schemas
//
// The model is an offline scripted server started by the agent process: it
// asks for a refund on the first turn and reports the tool's result on the
// second. The refund "provider" is the table approval.refunds, keyed by the
// tool call's idempotency key, counting the calls it gets.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	agentName  = "support-refunds"
	executorID = "approval-agent" // stable: a restarted agent process resumes its runs at once
	appVersion = "approval-1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Stdout, os.Args[1:])
	stop()
	os.Exit(code)
}

const usage = `usage: approval [-schema S] agent [-ticket ID]
       approval [-schema S] approve RUN CALL
       approval [-schema S] deny RUN CALL [REASON]
       approval [-schema S] pending RUN
       approval [-schema S] reset`

// cli runs one command and returns the exit code.
func cli(ctx context.Context, out io.Writer, args []string) int {
	fs := flag.NewFlagSet("approval", flag.ContinueOnError)
	schema := fs.String("schema", "approval", "schema of the example's table; the engine's is this plus _durable")
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, usage) }
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	var err error
	switch cmd {
	case "agent":
		afs := flag.NewFlagSet("agent", flag.ContinueOnError)
		ticket := afs.String("ticket", "ticket-981", "the run ID of the ticket")
		if err := afs.Parse(rest); err != nil {
			return 2
		}
		err = runAgent(ctx, out, *schema, *ticket)
	case "approve", "deny":
		if len(rest) < 2 || (cmd == "approve" && len(rest) != 2) || len(rest) > 3 {
			fs.Usage()
			return 2
		}
		d := agentkit.Decision{Action: agentkit.ActionApprove, By: os.Getenv("USER")}
		if cmd == "deny" {
			d.Action, d.Reason = agentkit.ActionDeny, "denied by the approver"
			if len(rest) == 3 {
				d.Reason = rest[2]
			}
		}
		err = decide(ctx, out, *schema, rest[0], rest[1], d)
	case "pending":
		if len(rest) != 1 {
			fs.Usage()
			return 2
		}
		err = listPending(ctx, out, *schema, rest[0])
	case "reset":
		err = withPool(ctx, func(pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{*schema}.Sanitize()+` CASCADE;
DROP SCHEMA IF EXISTS `+pgx.Identifier{*schema + "_durable"}.Sanitize()+` CASCADE`)
			if err == nil {
				fmt.Fprintf(out, "dropped schemas %s and %s_durable\n", *schema, *schema)
			}
			return err
		})
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "approval:", err)
		return 1
	}
	return 0
}

func withPool(ctx context.Context, f func(*pgxpool.Pool) error) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("DATABASE_URL is not set; run inside `scripts/with-postgres bash`, or set it to your server")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(pool)
}

func newEngine(pool *pgxpool.Pool, schema string) (*durable.Engine, error) {
	return durable.New(pool, &durable.Config{Schema: schema + "_durable", AppVersion: appVersion, ExecutorID: executorID,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

type refundArgs struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	Reason      string `json:"reason"`
}

// defineAgent declares the support agent on eng, with model as its model.
func defineAgent(eng *durable.Engine, pool *pgxpool.Pool, schema string, model agentkit.Model) *agentkit.Agent {
	table := pgx.Identifier{schema, "refunds"}.Sanitize()
	refund := agentkit.StepTool("refund", "Refund an order, in cents.",
		json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"},"reason":{"type":"string"}},"required":["order_id","amount_cents"]}`),
		func(ctx context.Context, a refundArgs) (string, error) {
			// The payments provider: one row per idempotency key, calls counted.
			var id int64
			var calls int
			err := pool.QueryRow(ctx, `INSERT INTO `+table+` AS r (idem_key, order_id, amount_cents) VALUES ($1, $2, $3)
ON CONFLICT (idem_key) DO UPDATE SET calls = r.calls + 1 RETURNING r.id, r.calls`,
				agentkit.ToolIdempotencyKey(ctx), a.OrderID, a.AmountCents).Scan(&id, &calls)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("refund rf_%d of %d.%02d EUR issued for order %s", id, a.AmountCents/100, a.AmountCents%100, a.OrderID), nil
		}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{Timeout: 48 * time.Hour, OnTimeout: agentkit.TimeoutDeny}})
	return agentkit.Define(eng, agentName, agentkit.AgentConfig{
		Model:  model,
		System: "You are a support agent. Refunds need a human's approval.",
		Tools:  []*agentkit.Tool{refund},
	})
}

// script is the offline model: a refund request, then a summary of the
// tool's result.
func script(req *agentkittest.Request) agentkittest.Reply {
	if req.Turn == 1 {
		args, _ := json.Marshal(refundArgs{OrderID: "42", AmountCents: 4999, Reason: "arrived broken"})
		return agentkittest.Reply{Text: "I will refund order 42.", ToolCalls: []agentkit.ToolCall{{Name: "refund", Arguments: args}}}
	}
	res := req.ToolResults()
	return agentkittest.Reply{Text: "Done. Tool said: " + res[len(res)-1]}
}

// createRefunds creates the refund "provider"'s table in schema.
func createRefunds(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()+`;
CREATE TABLE IF NOT EXISTS `+pgx.Identifier{schema, "refunds"}.Sanitize()+` (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idem_key     text NOT NULL UNIQUE,
    order_id     text NOT NULL,
    amount_cents int NOT NULL,
    calls        int NOT NULL DEFAULT 1,
    at           timestamptz NOT NULL DEFAULT now()
)`)
	return err
}

func runAgent(ctx context.Context, out io.Writer, schema, ticket string) error {
	return withPool(ctx, func(pool *pgxpool.Pool) error {
		if err := createRefunds(ctx, pool, schema); err != nil {
			return err
		}
		srv := agentkittest.NewServer(script)
		defer srv.Close()
		model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted"})
		if err != nil {
			return err
		}
		eng, err := newEngine(pool, schema)
		if err != nil {
			return err
		}
		agent := defineAgent(eng, pool, schema, model)
		say := func(format string, args ...any) {
			fmt.Fprintf(out, "[agent pid %d] %s\n", os.Getpid(), fmt.Sprintf(format, args...))
		}
		if err := eng.Launch(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = eng.Shutdown(sctx)
		}()
		// Start is idempotent on the ID: after a restart it returns the
		// run that Launch has already resumed.
		h, err := agent.Start(ctx, agentkit.Input{Prompt: "Order 42 arrived broken, I want my money back."}, &durable.StartOpts{ID: ticket})
		if err != nil {
			return err
		}
		st, err := h.Status(ctx)
		if err != nil {
			return err
		}
		say("engine launched as executor %q; run %s is %s", executorID, ticket, st)

		// Show the pending calls as they appear, with the command that
		// decides them, until the run finishes.
		resCh := make(chan error, 1)
		var res agentkit.Result
		go func() {
			var err error
			res, err = h.Result(ctx)
			resCh <- err
		}()
		shown := map[string]bool{}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-resCh:
				if err != nil && ctx.Err() != nil {
					say("stopping; run %s stays pending and resumes when the agent starts again", ticket)
					return nil
				}
				if err != nil {
					return fmt.Errorf("run %s: %w", ticket, err)
				}
				var refunds, calls int
				if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(calls), 0) FROM `+pgx.Identifier{schema, "refunds"}.Sanitize()).Scan(&refunds, &calls); err != nil {
					return err
				}
				say("run %s finished (%s): %s", ticket, res.Outcome, res.Final)
				say("refunds issued: %d (provider calls: %d)", refunds, calls)
				return nil
			case <-ctx.Done():
				say("stopping; run %s stays pending and resumes when the agent starts again", ticket)
				return nil
			case <-tick.C:
			}
			pend, err := agentkit.Pending(ctx, eng, ticket)
			if err != nil {
				continue
			}
			for _, p := range pend {
				if shown[p.Call.ID] {
					continue
				}
				shown[p.Call.ID] = true
				say("waiting for approval: %s %s (deadline %s); in another terminal:", p.Call.Name, string(p.Call.Arguments), p.Deadline.Format(time.RFC3339))
				fmt.Fprintf(out, "    go run ./examples/approval%s approve %s %s\n", schemaFlag(schema), ticket, p.Call.ID)
				fmt.Fprintf(out, "    go run ./examples/approval%s deny %s %s \"reason\"\n", schemaFlag(schema), ticket, p.Call.ID)
			}
		}
	})
}

func schemaFlag(schema string) string {
	if schema == "approval" {
		return ""
	}
	return " -schema " + schema
}

// readOnly returns an engine for commands that only read and send: it
// is not launched, so it runs nothing.
func readOnly(pool *pgxpool.Pool, schema string) (*durable.Engine, error) {
	return durable.New(pool, &durable.Config{Schema: schema + "_durable", AppVersion: appVersion, ExecutorID: "approval-cli",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func decide(ctx context.Context, out io.Writer, schema, run, call string, d agentkit.Decision) error {
	return withPool(ctx, func(pool *pgxpool.Pool) error {
		eng, err := readOnly(pool, schema)
		if err != nil {
			return err
		}
		if err := agentkit.Decide(ctx, eng, run, call, d); err != nil {
			return err
		}
		fmt.Fprintf(out, "sent %s for call %s of run %s; the agent goes on when its process runs\n", d.Action, call, run)
		return nil
	})
}

func listPending(ctx context.Context, out io.Writer, schema, run string) error {
	return withPool(ctx, func(pool *pgxpool.Pool) error {
		eng, err := readOnly(pool, schema)
		if err != nil {
			return err
		}
		pend, err := agentkit.Pending(ctx, eng, run)
		if err != nil {
			return err
		}
		if len(pend) == 0 {
			fmt.Fprintf(out, "run %s has no call waiting for a decision\n", run)
		}
		for _, p := range pend {
			fmt.Fprintf(out, "%s %s %s deadline %s\n", p.Call.ID, p.Call.Name, strings.TrimSpace(string(p.Call.Arguments)), p.Deadline.Format(time.RFC3339))
		}
		return nil
	})
}
