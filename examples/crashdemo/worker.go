//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment of a worker process, set by the parent (see startWorker).
const (
	envWorker       = "CRASHDEMO_WORKER"        // "1" or "2": run as that worker, not as the demo
	envAppSchema    = "CRASHDEMO_APP_SCHEMA"    // schema of the application tables
	envEngineSchema = "CRASHDEMO_ENGINE_SCHEMA" // Config.Schema of the engine
	envStepDelay    = "CRASHDEMO_STEP_DELAY"    // time.Duration each step takes
	envVerbose      = "CRASHDEMO_VERBOSE"       // "1": engine logs to stderr
)

const (
	workflowName = "order-pipeline"
	workflowID   = "order-1001"
	executorID   = "demo-worker" // the same in both workers: Launch resumes its own runs at once
	appVersion   = "demo-1"
	numSteps     = 6
)

// Order is the workflow's input.
type Order struct {
	ID        string `json:"id"`
	Customer  string `json:"customer"`
	Item      string `json:"item"`
	Qty       int    `json:"qty"`
	UnitCents int    `json:"unit_cents"`
}

// Receipt is the workflow's result. Every field comes from a step's
// recorded output, so a resumed run returns the values of the first run.
type Receipt struct {
	OrderID     string `json:"order_id"`
	TotalCents  int    `json:"total_cents"`
	Reservation string `json:"reservation"` // from the stock provider
	Charge      string `json:"charge"`      // from the payment provider
	OrderRow    int64  `json:"order_row"`   // crashdemo.orders.id
	Email       string `json:"email"`       // from the mail provider
	Shipment    string `json:"shipment"`    // from the shipping provider
}

var demoOrder = Order{ID: workflowID, Customer: "ada@example.com", Item: "mechanical keyboard", Qty: 2, UnitCents: 4999}

// app is what the workflow's steps need: the pool, the application schema
// and the step delay. out receives progress lines.
type app struct {
	pool   *pgxpool.Pool
	schema string // quoted identifier
	delay  time.Duration
	worker int
	out    io.Writer
}

func (a *app) t(table string) string { return a.schema + "." + table }

// say prints one progress line of the step whose context ctx is.
func (a *app) say(ctx context.Context, format string, args ...any) {
	info, _ := durable.StepInfoFrom(ctx)
	fmt.Fprintf(a.out, "    [worker %d pid %d] step %d/%d %-16s %s\n", a.worker, os.Getpid(),
		info.Pos+1, numSteps, info.Name, fmt.Sprintf(format, args...))
}

// work simulates half a step's worth of work.
func (a *app) work(ctx context.Context) error {
	t := time.NewTimer(a.delay / 2)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// logStep records that this process executed the step of ctx.
func (a *app) logStep(ctx context.Context, q execer) error {
	info, _ := durable.StepInfoFrom(ctx)
	_, err := q.Exec(ctx, `INSERT INTO `+a.t("step_log")+` (pid, worker, pos, step) VALUES ($1, $2, $3, $4)`,
		os.Getpid(), a.worker, info.Pos, info.Name)
	return err
}

// callProvider is the "external provider": a service that dedupes requests
// by idempotency key. The first request with a key creates the resource;
// a repeated one only counts the attempt and returns the same resource.
func (a *app) callProvider(ctx context.Context, api, prefix string) (ref string, calls int, err error) {
	key := durable.IdempotencyKey(ctx)
	if key == "" {
		return "", 0, errors.New("no idempotency key: not called from a step")
	}
	info, _ := durable.StepInfoFrom(ctx)
	err = a.pool.QueryRow(ctx, `INSERT INTO `+a.t("effects")+` AS e (idem_key, api, step, prefix) VALUES ($1, $2, $3, $4)
ON CONFLICT (idem_key) DO UPDATE SET n = e.n + 1, last_at = clock_timestamp()
RETURNING e.prefix || '-' || e.id, e.n`, key, api, info.Name, prefix).Scan(&ref, &calls)
	if err != nil {
		return "", 0, fmt.Errorf("%s provider: %w", api, err)
	}
	return ref, calls, nil
}

// effectStep returns the body of a plain step that calls provider api:
// some work, the call, the step log line, some more work (parsing the
// reply, say). Its checkpoint is written when it returns, so a kill during
// the second half of the work lands after the effect and before the
// checkpoint: the step runs again and the provider sees its key again.
func (a *app) effectStep(api, prefix, what string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if err := a.work(ctx); err != nil {
			return "", err
		}
		ref, calls, err := a.callProvider(ctx, api, prefix)
		if err != nil {
			return "", err
		}
		if err := a.logStep(ctx, a.pool); err != nil {
			return "", err
		}
		key := durable.IdempotencyKey(ctx)
		if calls == 1 {
			a.say(ctx, "%s: %s (%s API, key %s)", what, ref, api, key)
		} else {
			a.say(ctx, "%s API already saw key %s (call #%d): returned %s, did nothing new", api, key, calls, ref)
		}
		if err := a.work(ctx); err != nil {
			return "", err
		}
		return ref, nil
	}
}

// pipeline is the workflow "order-pipeline": six steps, each logged in
// crashdemo.step_log by the process that executed it.
func (a *app) pipeline(wctx durable.Context, in Order) (Receipt, error) {
	r := Receipt{OrderID: in.ID}
	var err error

	// 1. A plain step without external effect.
	r.TotalCents, err = durable.Step(wctx, "validate-order", func(ctx context.Context) (int, error) {
		if err := a.work(ctx); err != nil {
			return 0, err
		}
		if in.Qty <= 0 || in.UnitCents <= 0 {
			return 0, durable.Permanent(fmt.Errorf("invalid order %+v", in))
		}
		total := in.Qty * in.UnitCents
		if err := a.logStep(ctx, a.pool); err != nil {
			return 0, err
		}
		a.say(ctx, "%d x %s = %s", in.Qty, in.Item, money(total))
		return total, a.work(ctx)
	}, nil)
	if err != nil {
		return r, err
	}

	// 2, 3. External effects, deduplicated by the step's idempotency key.
	if r.Reservation, err = durable.Step(wctx, "reserve-stock", a.effectStep("stock", "rsv", "stock reserved"), nil); err != nil {
		return r, err
	}
	if r.Charge, err = durable.Step(wctx, "charge-card", a.effectStep("payments", "ch", "charged "+money(r.TotalCents)), nil); err != nil {
		return r, err
	}

	// 4. A transaction step: the order row, the step log line and the
	// engine's checkpoint commit together or not at all.
	r.OrderRow, err = durable.TxStep(wctx, "write-order", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		if err := a.work(ctx); err != nil {
			return 0, err
		}
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO `+a.t("orders")+` (order_id, customer, item, qty, total_cents, reservation, charge)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, in.ID, in.Customer, in.Item, in.Qty, r.TotalCents, r.Reservation, r.Charge).Scan(&id)
		if err != nil {
			return 0, err
		}
		if err := a.logStep(ctx, tx); err != nil {
			return 0, err
		}
		a.say(ctx, "inserted orders row %d (commits with the checkpoint)", id)
		return id, a.work(ctx)
	}, nil)
	if err != nil {
		return r, err
	}

	// 5, 6. More external effects.
	if r.Email, err = durable.Step(wctx, "send-email", a.effectStep("mail", "msg", "confirmation sent"), nil); err != nil {
		return r, err
	}
	if r.Shipment, err = durable.Step(wctx, "request-shipment", a.effectStep("shipping", "shp", "shipment booked"), nil); err != nil {
		return r, err
	}
	return r, nil
}

func money(cents int) string { return fmt.Sprintf("%d.%02d EUR", cents/100, cents%100) }

func newEngine(pool *pgxpool.Pool, engineSchema, executor string, logger *slog.Logger) (*durable.Engine, error) {
	return durable.New(pool, &durable.Config{
		Schema:     engineSchema,
		AppVersion: appVersion,
		ExecutorID: executor,
		Logger:     logger,
	})
}

// workerMain is the entry of a worker process. It returns the exit code.
func workerMain() int {
	if err := runWorker(); err != nil {
		fmt.Fprintf(os.Stderr, "    [worker %s pid %d] error: %v\n", os.Getenv(envWorker), os.Getpid(), err)
		return 1
	}
	return 0
}

func runWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	worker, err := strconv.Atoi(os.Getenv(envWorker))
	if err != nil || (worker != 1 && worker != 2) {
		return fmt.Errorf("%s=%q: want 1 or 2", envWorker, os.Getenv(envWorker))
	}
	delay, err := time.ParseDuration(os.Getenv(envStepDelay))
	if err != nil {
		return fmt.Errorf("%s: %w", envStepDelay, err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()

	a := &app{
		pool:   pool,
		schema: pgx.Identifier{os.Getenv(envAppSchema)}.Sanitize(),
		delay:  delay,
		worker: worker,
		out:    os.Stdout,
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv(envVerbose) == "1" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	eng, err := newEngine(pool, os.Getenv(envEngineSchema), executorID, logger)
	if err != nil {
		return err
	}
	wf := durable.Register(eng, workflowName, a.pipeline, nil)

	prefix := fmt.Sprintf("    [worker %d pid %d]", worker, os.Getpid())
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}()

	var h *durable.Handle[Receipt]
	if worker == 1 {
		fmt.Printf("%s engine launched as executor %q; starting workflow %s (ID %s)\n", prefix, executorID, workflowName, workflowID)
		h, err = wf.Start(ctx, demoOrder, &durable.StartOpts{ID: workflowID})
	} else {
		// Launch has already resumed the pending run of this executor ID
		// in the background; we only follow it.
		fmt.Printf("%s engine launched as executor %q (Launch resumes this executor's pending runs); following %s\n", prefix, executorID, workflowID)
		h, err = wf.Handle(ctx, workflowID)
	}
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", workflowID, err)
	}
	fmt.Printf("%s workflow finished: charge %s, order row %d, email %s, shipment %s\n", prefix, res.Charge, res.OrderRow, res.Email, res.Shipment)
	return nil
}
