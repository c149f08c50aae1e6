package durable_test

// Child processes of the crash tests. The test binary re-executes itself
// with DURABLE_CHILD set; the child runs one engine and may SIGKILL itself
// at a chosen boundary, which is as abrupt as an OOM kill or a power cut.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/proctest"
)

// crashSteps is the workflow of the crash matrix: plain steps call an
// external provider keyed by the idempotency key; tx steps write app rows.
var crashSteps = []string{"plain", "tx", "plain", "tx", "plain"}

func runChildIfAsked() bool {
	mode := os.Getenv("DURABLE_CHILD")
	if mode == "" {
		return false
	}
	if err := runChild(mode); err != nil {
		fmt.Fprintln(os.Stderr, "child error:", err)
		os.Exit(3)
	}
	os.Exit(0)
	return true
}

var killSelf = proctest.KillSelf

func runChild(mode string) error {
	ctx := context.Background()
	schema := os.Getenv("DURABLE_SCHEMA")
	pcfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	// Room for the tests' own statements beside steps that hold a
	// connection (the default is 4 on a 2-core machine).
	pcfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	lease, _ := time.ParseDuration(os.Getenv("DURABLE_LEASE"))
	tp := childTracerProvider()
	maxRec, _ := strconv.Atoi(os.Getenv("DURABLE_MAXREC"))
	park, _ := time.ParseDuration(os.Getenv("DURABLE_PARK"))
	poll, _ := time.ParseDuration(os.Getenv("DURABLE_POLL"))
	cfg := forPooler(&durable.Config{
		Schema:               schema,
		AppVersion:           "crash",
		ExecutorID:           os.Getenv("DURABLE_EXEC_ID"),
		LeaseTTL:             lease,
		PollInterval:         cmp.Or(poll, 200*time.Millisecond),
		MaxRecoveryAttempts:  maxRec,
		ParkThreshold:        park,
		StepRetry:            durable.RetryPolicy{BaseDelay: time.Millisecond},
		Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		TracerProvider:       tp,
		DeferStepCheckpoints: os.Getenv("DURABLE_DEFER") != "",
	})
	if os.Getenv("DURABLE_CRASH") == "handon" {
		// Killed once a finish that handed queue slots on has committed,
		// before the runs it claimed are launched.
		hooks.Set(cfg, hooks.Knobs{OnHandOn: func(int) { killSelf() }})
	}
	e, err := durable.New(pool, cfg)
	if err != nil {
		return err
	}
	q := func(s string) string { return strings.ReplaceAll(s, "@", pgx.Identifier{schema}.Sanitize()+".") }
	logExec := func(ctx context.Context, wf string, pos int) {
		_, _ = pool.Exec(ctx, q("INSERT INTO @executions (workflow_id, pos, pid) VALUES ($1, $2, $3)"), wf, pos, os.Getpid())
	}
	switch mode {
	case "waits":
		return runWaitChild(ctx, e, pool)
	case "saga":
		return runSagaChild(ctx, e, pool, q)
	case "retry":
		return runRetryChild(ctx, e, pool, q)
	case "update":
		return runUpdateChild(ctx, e, pool, q)
	case "select":
		return runSelectChild(ctx, e, pool, q)
	case "queue":
		return runQueueChild(ctx, e, pool, schema)
	case "trace":
		return runTraceChild(ctx, e, tp)
	case "matrix":
		crash := os.Getenv("DURABLE_CRASH") // point:pos
		point, posStr, _ := strings.Cut(crash, ":")
		crashPos, _ := strconv.Atoi(posStr)
		at := func(p string, pos int) bool { return crash != "" && p == point && pos == crashPos }
		wf := durable.Register(e, "matrix", func(wctx durable.Context, in int) (int, error) {
			sum := in
			for i, kind := range crashSteps {
				if at("before", i) {
					killSelf()
				}
				var v int
				var err error
				if kind == "plain" {
					v, err = durable.Step(wctx, fmt.Sprintf("effect-%d", i), func(ctx context.Context) (int, error) {
						logExec(ctx, wctx.WorkflowID(), i)
						// The external provider dedupes on the idempotency key.
						if _, err := pool.Exec(ctx, q(`INSERT INTO @effects (idem_key) VALUES ($1)
							ON CONFLICT (idem_key) DO UPDATE SET seen = @effects.seen + 1`), durable.IdempotencyKey(ctx)); err != nil {
							return 0, err
						}
						if at("after-effect", i) {
							killSelf()
						}
						return i * 10, nil
					}, nil)
				} else {
					v, err = durable.TxStep(wctx, fmt.Sprintf("write-%d", i), func(ctx context.Context, tx pgx.Tx) (int, error) {
						logExec(ctx, wctx.WorkflowID(), i)
						if _, err := tx.Exec(ctx, q("INSERT INTO @orders (workflow_id, pos) VALUES ($1, $2)"), wctx.WorkflowID(), i); err != nil {
							return 0, err
						}
						if at("in-tx", i) {
							killSelf()
						}
						return i * 100, nil
					}, nil)
				}
				if err != nil {
					return 0, err
				}
				sum += v
				if at("after-checkpoint", i) {
					killSelf()
				}
			}
			return sum, nil
		}, nil)
		if err := e.Launch(ctx); err != nil {
			return err
		}
		h, err := wf.Start(ctx, 1, &durable.StartOpts{ID: "matrix-run"})
		if err != nil {
			return err
		}
		out, err := h.Result(ctx)
		if errors.Is(err, durable.ErrDeadLetter) {
			fmt.Println("dead-lettered:", err)
			return e.Shutdown(ctx)
		}
		if err != nil {
			return err
		}
		fmt.Println("result", out)
		return e.Shutdown(ctx)

	case "worker":
		// Runs "slow" workflows; starts DURABLE_START of them, then serves
		// until killed. DURABLE_BLOCK makes step 0 block for that long
		// (the fencing test pauses this process meanwhile); with
		// DURABLE_TX, step 0 is a transaction step that also writes an
		// order row. DURABLE_HOLD makes workflow code wait that long after
		// its last step, before it returns. With DURABLE_RELEASE (a file
		// path), those waits end early when the file exists: the test
		// releases the process once it has seen what it waited for.
		block, _ := time.ParseDuration(os.Getenv("DURABLE_BLOCK"))
		hold, _ := time.ParseDuration(os.Getenv("DURABLE_HOLD"))
		release := os.Getenv("DURABLE_RELEASE")
		pause := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if release != "" {
					if _, err := os.Stat(release); err == nil {
						return
					}
				}
			}
		}
		txStep0 := os.Getenv("DURABLE_TX") != ""
		wf := durable.Register(e, "slow", func(wctx durable.Context, steps int) (string, error) {
			var last string
			for i := 0; i < steps; i++ {
				work := func(ctx context.Context) (string, error) {
					logExec(ctx, wctx.WorkflowID(), i)
					if i == 0 && block > 0 {
						fmt.Println("blocking", wctx.WorkflowID())
						pause(block)
					} else {
						time.Sleep(50 * time.Millisecond)
					}
					return fmt.Sprintf("%s by %d", durable.IdempotencyKey(ctx), os.Getpid()), nil
				}
				var err error
				if i == 0 && txStep0 {
					last, err = durable.TxStep(wctx, "s0", func(ctx context.Context, tx pgx.Tx) (string, error) {
						if _, err := tx.Exec(ctx, q("INSERT INTO @orders (workflow_id, pos) VALUES ($1, $2)"), wctx.WorkflowID(), os.Getpid()); err != nil {
							return "", err
						}
						return work(ctx)
					}, nil)
				} else {
					last, err = durable.Step(wctx, fmt.Sprintf("s%d", i), work, nil)
				}
				if err != nil {
					return "", err
				}
			}
			if hold > 0 {
				fmt.Println("holding", wctx.WorkflowID())
				pause(hold)
			}
			return fmt.Sprintf("%s; returned by %d", last, os.Getpid()), nil
		}, nil)
		if err := e.Launch(ctx); err != nil {
			return err
		}
		n, _ := strconv.Atoi(os.Getenv("DURABLE_START"))
		steps, _ := strconv.Atoi(cmpOr(os.Getenv("DURABLE_STEPS"), "10"))
		for i := 0; i < n; i++ {
			if _, err := wf.Start(ctx, steps, &durable.StartOpts{ID: fmt.Sprintf("%s-%d", e.ExecutorID(), i)}); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		// Serve until stdin closes or the process is killed.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return e.Shutdown(sctx)
	case "schedule":
		return runScheduleChild(ctx, e, pool)
	case "attempts":
		return runAttemptsChild(ctx, e, pool, schema)
	case "http":
		return runHTTPChild(ctx, e)
	}
	return errors.New("unknown child mode " + mode)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func startChild(t *testing.T, mode, schema, execID string, env ...string) *proctest.Child {
	t.Helper()
	return proctest.Start(t, append([]string{"DURABLE_CHILD=" + mode, "DURABLE_SCHEMA=" + schema, "DURABLE_EXEC_ID=" + execID}, env...)...)
}

// startReady is startChild for an executor that says "ready" once it has
// launched, and waits for that.
func startReady(t *testing.T, mode, schema, execID string, env ...string) *proctest.Child {
	t.Helper()
	c := startChild(t, mode, schema, execID, env...)
	c.WaitLine(t, "ready")
	return c
}
