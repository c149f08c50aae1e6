//go:build unix

// Command crashdemo kills a worker process in the middle of a durable
// workflow and shows a second process finishing it: completed steps are
// not re-run, an external effect interrupted before its checkpoint is
// deduplicated by its idempotency key, and the database write happens once.
//
// Run it from the repository root:
//
//	scripts/with-postgres go run ./examples/crashdemo
//
// scripts/with-postgres starts a throwaway Postgres when DATABASE_URL is not
// set. The demo drops and recreates the schemas crashdemo (its own tables)
// and crashdemo_durable (the engine's) on every run.
//
// The same binary is the parent and, re-executed with CRASHDEMO_WORKER set,
// each of the two workers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/examples/internal/demo"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// options of one demo run.
type options struct {
	AppSchema    string        // application tables; default "crashdemo"
	EngineSchema string        // engine tables (Config.Schema); default "crashdemo_durable"
	StepDelay    time.Duration // duration of each step; default 400ms
	KillAfter    int           // SIGKILL worker 1 once this many steps are logged (1-5); default 3
	Verbose      bool          // show the engine's logs of the workers
}

func (o options) withDefaults() options {
	if o.AppSchema == "" {
		o.AppSchema = "crashdemo"
	}
	if o.EngineSchema == "" {
		o.EngineSchema = "crashdemo_durable"
	}
	if o.StepDelay <= 0 {
		o.StepDelay = 400 * time.Millisecond
	}
	if o.KillAfter == 0 {
		o.KillAfter = 3
	}
	return o
}

func main() {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	var o options
	flag.DurationVar(&o.StepDelay, "step-delay", 400*time.Millisecond, "how long each step takes")
	flag.IntVar(&o.KillAfter, "kill-after", 3, "SIGKILL the first worker once this many steps have run (1-5)")
	flag.BoolVar(&o.Verbose, "v", false, "print the engine's logs of the workers")
	flag.Parse()

	demo.Main("crashdemo", func(ctx context.Context, out io.Writer) error { return run(ctx, out, o) })
}

// run is the whole demo: set up, worker 1, kill, worker 2, report. It
// returns a *demo.Failed when a check failed.
func run(ctx context.Context, out io.Writer, o options) error {
	o = o.withDefaults()
	if o.KillAfter < 1 || o.KillAfter >= numSteps {
		return fmt.Errorf("kill-after must be between 1 and %d", numSteps-1)
	}
	w := demo.NewSyncWriter(out)
	say := func(format string, args ...any) { fmt.Fprintf(w, "[parent] "+format+"\n", args...) }

	pool, err := demo.Connect(ctx, "crashdemo")
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig
	fmt.Fprintf(w, "crashdemo: a durable workflow survives kill -9 (Postgres %s:%d/%s)\n\n", cc.Host, cc.Port, cc.Database)

	if err := setup(ctx, pool, o); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	say("recreated schemas %s (app tables: effects, orders, step_log) and %s (engine)", o.AppSchema, o.EngineSchema)

	// Worker 1 runs until KillAfter steps are logged, then dies by SIGKILL.
	var startedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&startedAt); err != nil {
		return err
	}
	w1, err := startWorker(ctx, w, o, 1)
	if err != nil {
		return err
	}
	say("started worker 1 (pid %d): workflow %q, ID %s, %d steps of ~%v each", w1.pid, workflowName, workflowID, numSteps, o.StepDelay)
	if err := waitForSteps(ctx, pool, o, w1, o.KillAfter); err != nil {
		w1.kill()
		return err
	}
	if err := syscall.Kill(w1.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill worker 1: %w", err)
	}
	var killedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&killedAt); err != nil {
		return err
	}
	w1err := <-w1.done
	killedBySignal := diedOf(w1err, syscall.SIGKILL)
	say("%d steps logged -> sent SIGKILL to worker 1 (pid %d); it exited: %v", o.KillAfter, w1.pid, w1err)
	ckpts, err := checkpoints(ctx, pool, o)
	if err != nil {
		return fmt.Errorf("read the engine's checkpoints: %w", err)
	}
	say("the engine had checkpointed %d step(s) at that moment: %s", len(ckpts), strings.Join(ckpts, ", "))

	// Worker 2: same ExecutorID, so its Launch resumes the run at once.
	w2, err := startWorker(ctx, w, o, 2)
	if err != nil {
		return err
	}
	say("started worker 2 (pid %d) with the same ExecutorID %q", w2.pid, executorID)
	limit := time.NewTimer(30*time.Second + 2*numSteps*o.StepDelay)
	defer limit.Stop()
	var w2err error
	select {
	case w2err = <-w2.done:
	case <-limit.C:
		w2.kill()
		<-w2.done
		w2err = errors.New("timed out waiting for the result")
	case <-ctx.Done():
		w2.kill()
		<-w2.done
		return ctx.Err()
	}
	if w2err != nil {
		say("worker 2 (pid %d) failed: %v", w2.pid, w2err)
	} else {
		say("worker 2 (pid %d) exited normally", w2.pid)
	}

	return report(ctx, w, pool, o, reportIn{
		w1pid: w1.pid, w2pid: w2.pid, startedAt: startedAt, killedAt: killedAt, killedBySignal: killedBySignal,
		w1err: w1err, w2err: w2err, ckpts: ckpts,
	})
}

// setup drops and recreates the demo's schemas and migrates the engine's.
func setup(ctx context.Context, pool *pgxpool.Pool, o options) error {
	s := pgx.Identifier{o.AppSchema}.Sanitize()
	e := pgx.Identifier{o.EngineSchema}.Sanitize()
	_, err := pool.Exec(ctx, `
DROP SCHEMA IF EXISTS `+s+` CASCADE;
DROP SCHEMA IF EXISTS `+e+` CASCADE;
CREATE SCHEMA `+s+`;
-- The "external provider": one row per idempotency key, n counts the calls.
CREATE TABLE `+s+`.effects (
    idem_key text PRIMARY KEY,
    api      text NOT NULL,
    step     text NOT NULL,
    prefix   text NOT NULL,
    id       bigint GENERATED ALWAYS AS IDENTITY UNIQUE, -- the resource is prefix-id
    n        int NOT NULL DEFAULT 1,
    first_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Written by the transaction step. order_id is deliberately not unique, so
-- a duplicate write would show as a second row.
CREATE TABLE `+s+`.orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id    text NOT NULL,
    customer    text NOT NULL,
    item        text NOT NULL,
    qty         int NOT NULL,
    total_cents int NOT NULL,
    reservation text NOT NULL,
    charge      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- One row each time a process executes a step.
CREATE TABLE `+s+`.step_log (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pid    int NOT NULL,
    worker int NOT NULL,
    pos    int NOT NULL,
    step   text NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);`)
	if err != nil {
		return err
	}
	return durable.Migrate(ctx, pool, o.EngineSchema)
}

type workerProc struct {
	pid  int
	cmd  *exec.Cmd
	done chan error // receives the result of Wait, once
}

func (p *workerProc) kill() { _ = p.cmd.Process.Kill() }

// startWorker re-executes this binary (or the test binary, see main_test.go)
// in worker mode. Its output goes to w.
func startWorker(ctx context.Context, w io.Writer, o options, n int) (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(),
		fmt.Sprintf("%s=%d", envWorker, n),
		envAppSchema+"="+o.AppSchema,
		envEngineSchema+"="+o.EngineSchema,
		envStepDelay+"="+o.StepDelay.String(),
	)
	if o.Verbose {
		cmd.Env = append(cmd.Env, envVerbose+"=1")
	}
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", n, err)
	}
	p := &workerProc{pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// waitForSteps polls crashdemo.step_log until n steps are logged.
func waitForSteps(ctx context.Context, pool *pgxpool.Pool, o options, p *workerProc, n int) error {
	q := `SELECT count(*) FROM ` + pgx.Identifier{o.AppSchema}.Sanitize() + `.step_log`
	tick := time.NewTicker(min(o.StepDelay/20, 20*time.Millisecond))
	defer tick.Stop()
	limit := time.After(30*time.Second + 2*numSteps*o.StepDelay)
	for {
		var got int
		if err := pool.QueryRow(ctx, q).Scan(&got); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("worker 1 exited before %d steps were logged (%d were): %v", n, got, err)
		case <-limit:
			return fmt.Errorf("timed out waiting for %d logged steps (%d so far)", n, got)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func diedOf(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// checkpoints returns the names of the steps the engine has recorded as
// done, by position, through the engine's public step listing.
func checkpoints(ctx context.Context, pool *pgxpool.Pool, o options) ([]string, error) {
	eng, err := newEngine(pool, o.EngineSchema, "crashdemo-parent", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	steps, err := eng.ListSteps(ctx, workflowID)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, st := range steps {
		if st.Status != "done" {
			continue
		}
		if st.Pos != len(names) {
			return nil, fmt.Errorf("checkpoints are not contiguous: position %d after %d", st.Pos, len(names))
		}
		names = append(names, st.Name)
	}
	return names, nil
}

type reportIn struct {
	w1pid, w2pid   int
	startedAt      time.Time // worker 1 started, database clock
	killedAt       time.Time // worker 1 killed, database clock
	killedBySignal bool
	w1err, w2err   error
	ckpts          []string // steps checkpointed when worker 1 died
}

type logRow struct {
	pid, worker, pos int
	step             string
	at               time.Time
}

type effectRow struct {
	key, api, step, ref string
	n                   int
}

// report prints the timeline, the provider's counters, the orders and the
// final status, then checks them and prints the verdict.
func report(ctx context.Context, w io.Writer, pool *pgxpool.Pool, o options, in reportIn) error {
	s := pgx.Identifier{o.AppSchema}.Sanitize()
	logs, err := queryRows(ctx, pool, `SELECT pid, worker, pos, step, at FROM `+s+`.step_log ORDER BY at, id`,
		func(r pgx.Rows) (l logRow, err error) { return l, r.Scan(&l.pid, &l.worker, &l.pos, &l.step, &l.at) })
	if err != nil {
		return err
	}
	effects, err := queryRows(ctx, pool, `SELECT idem_key, api, step, prefix || '-' || id, n FROM `+s+`.effects ORDER BY id`,
		func(r pgx.Rows) (e effectRow, err error) { return e, r.Scan(&e.key, &e.api, &e.step, &e.ref, &e.n) })
	if err != nil {
		return err
	}
	orderIDs, err := queryRows(ctx, pool, `SELECT id FROM `+s+`.orders WHERE order_id = $1 ORDER BY id`,
		func(r pgx.Rows) (id int64, err error) { return id, r.Scan(&id) }, workflowID)
	if err != nil {
		return err
	}

	// The final status and result, read through the library's API by an
	// engine that is never launched (it only reads).
	eng, err := newEngine(pool, o.EngineSchema, "crashdemo-parent", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	wf := durable.Register(eng, workflowName, (&app{}).pipeline, nil)
	var (
		status durable.Status
		res    Receipt
		resErr error
	)
	h, err := wf.Handle(ctx, workflowID)
	if err == nil {
		status, err = h.Status(ctx)
	}
	if err != nil {
		return err
	}
	if status.Finished() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, resErr = h.Result(rctx)
		cancel()
	}

	// Timeline.
	fmt.Fprintf(w, "\nTimeline (%s.step_log: which process executed which step; time since worker 1 started)\n", o.AppSchema)
	ck := len(in.ckpts)
	byStep := map[string][]int{} // step -> workers that executed it
	for _, l := range logs {
		byStep[l.step] = append(byStep[l.step], l.worker)
	}
	t0 := in.startedAt
	marked := false
	killLine := func() {
		fmt.Fprintf(w, "  ---- %+6.2fs  SIGKILL worker 1; checkpoints recorded: %s", in.killedAt.Sub(t0).Seconds(), stepRange(ck))
		if ck > 0 {
			fmt.Fprintf(w, " (worker 2 replays them, it does not execute them)")
		}
		fmt.Fprintln(w)
		marked = true
	}
	for _, l := range logs {
		if !marked && l.at.After(in.killedAt) {
			killLine()
		}
		when, note := "before kill", ""
		if l.at.After(in.killedAt) {
			when = "after kill"
		}
		switch {
		case l.worker == 1 && l.pos < ck:
			note = "checkpointed"
		case l.worker == 1:
			note = "executed, killed before its checkpoint"
		case slices.Contains(byStep[l.step], 1):
			note = "executed again: its checkpoint was missing"
		}
		line := fmt.Sprintf("  %d %-17s worker %d  pid %-7d %+6.2fs  %-11s  %s", l.pos+1, l.step, l.worker, l.pid, l.at.Sub(t0).Seconds(), when, note)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	if !marked {
		killLine()
	}

	// Provider counters.
	fmt.Fprintf(w, "\nExternal provider (%s.effects: one row per idempotency key; key = workflow ID/step position from 0)\n", o.AppSchema)
	for _, e := range effects {
		note := ""
		if e.n > 1 {
			note = fmt.Sprintf("seen %d times, acted once (dedupe by key)", e.n)
		}
		line := fmt.Sprintf("  key %-14s %-9s %-17s -> %-6s calls %d  %s", e.key, e.api, e.step, e.ref, e.n, note)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintf(w, "\nOrders rows for %s: %d\n", workflowID, len(orderIDs))
	fmt.Fprintf(w, "Final status: %s", status)
	if resErr != nil {
		fmt.Fprintf(w, ", error: %v", resErr)
	} else if status == durable.StatusSuccess {
		fmt.Fprintf(w, ", receipt: total %s, reservation %s, charge %s, order row %d, email %s, shipment %s",
			money(res.TotalCents), res.Reservation, res.Charge, res.OrderRow, res.Email, res.Shipment)
	}
	fmt.Fprintln(w)

	// Checks.
	c := &checker{w: w}
	fmt.Fprintln(w, "\nChecks")
	c.check(in.killedBySignal, "worker 1 was killed by SIGKILL mid-run", "worker 1 did not die by SIGKILL: %v", in.w1err)
	c.check(in.w1pid != in.w2pid && in.w2err == nil, "worker 2 is another process and exited normally",
		"worker 2 failed: %v", in.w2err)

	w2steps := []int{}
	for _, l := range logs {
		if l.worker == 2 {
			w2steps = append(w2steps, l.pos)
		}
	}
	resumedAt := -1
	if len(w2steps) > 0 {
		resumedAt = slices.Min(w2steps)
	}
	c.check(resumedAt == ck, fmt.Sprintf("worker 2 resumed at step %d, the first step without a checkpoint", ck+1),
		"worker 2 should have resumed at step %d; its first executed step was %d", ck+1, resumedAt+1)

	var rerunAfterCkpt []string
	for _, l := range logs {
		if l.worker == 2 && l.pos < ck {
			rerunAfterCkpt = append(rerunAfterCkpt, l.step)
		}
	}
	c.check(len(rerunAfterCkpt) == 0, "no step re-ran after its checkpoint",
		"steps re-ran after their checkpoint: %s", strings.Join(rerunAfterCkpt, ", "))

	var wrongCount []string
	for pos := range numSteps {
		var once1, once2 int
		for _, l := range logs {
			if l.pos == pos && l.worker == 1 {
				once1++
			}
			if l.pos == pos && l.worker == 2 {
				once2++
			}
		}
		switch {
		case pos < ck && (once1 != 1 || once2 != 0),
			pos == ck && (once1 > 1 || once2 != 1),
			pos > ck && (once1 != 0 || once2 != 1):
			wrongCount = append(wrongCount, fmt.Sprintf("step %d ran %d+%d times", pos+1, once1, once2))
		}
	}
	c.check(len(wrongCount) == 0, "every step executed: checkpointed ones once, the others once in worker 2",
		"unexpected executions: %s", strings.Join(wrongCount, "; "))

	perStep := map[string][]effectRow{}
	for _, e := range effects {
		perStep[e.step] = append(perStep[e.step], e)
	}
	var dupEffects []string
	for _, step := range []string{"reserve-stock", "charge-card", "send-email", "request-shipment"} {
		if n := len(perStep[step]); n != 1 {
			dupEffects = append(dupEffects, fmt.Sprintf("%s has %d provider records", step, n))
		}
	}
	charge := perStep["charge-card"]
	chargeNote := ""
	if len(charge) == 1 && charge[0].n > 1 {
		chargeNote = fmt.Sprintf(" (payments API called %d times with key %s)", charge[0].n, charge[0].key)
	}
	c.check(len(dupEffects) == 0, "one provider record per effect step: card charged once"+chargeNote,
		"effects not deduplicated: %s", strings.Join(dupEffects, "; "))

	c.check(len(orderIDs) == 1, "exactly 1 order row", "%d order rows for %s, want 1", len(orderIDs), workflowID)

	refMatches := func(step, got string) bool { e := perStep[step]; return len(e) == 1 && e[0].ref == got }
	receiptOK := status == durable.StatusSuccess && resErr == nil && res.OrderID == workflowID &&
		len(orderIDs) == 1 && res.OrderRow == orderIDs[0] &&
		refMatches("reserve-stock", res.Reservation) && refMatches("charge-card", res.Charge) &&
		refMatches("send-email", res.Email) && refMatches("request-shipment", res.Shipment)
	c.check(receiptOK, "status success; the receipt matches the provider's records and the order row",
		"final status %s (err %v); receipt %+v vs the provider's records and the order row", status, resErr, res)

	// Verdict.
	if len(c.failed) > 0 {
		msg := "FAILED: " + strings.Join(c.failed, "; ")
		fmt.Fprintln(w, "\n"+msg)
		return &demo.Failed{Msg: msg}
	}
	rerun := ""
	if inflight := stepName(ck); len(byStep[inflight]) > 1 {
		rerun = ", which ran again (killed after its work, before its checkpoint)"
		if e := perStep[inflight]; len(e) == 1 && e[0].n > 1 {
			rerun = fmt.Sprintf(", which ran again (killed after its effect, before its checkpoint): the provider deduped key %s", e[0].key)
		}
	}
	fmt.Fprintf(w, "\nOK: resumed at step %d (%s)%s; no step re-ran after its checkpoint, card charged once, 1 order row, status %s\n",
		ck+1, stepName(ck), rerun, status)
	return nil
}

var stepNames = [numSteps]string{"validate-order", "reserve-stock", "charge-card", "write-order", "send-email", "request-shipment"}

func stepName(pos int) string {
	if pos >= 0 && pos < numSteps {
		return stepNames[pos]
	}
	return "?"
}

func stepRange(n int) string {
	switch n {
	case 0:
		return "none"
	case 1:
		return "step 1"
	}
	return fmt.Sprintf("steps 1-%d", n)
}

type checker struct {
	w      io.Writer
	failed []string
}

func (c *checker) check(ok bool, okMsg, failFormat string, args ...any) {
	if ok {
		fmt.Fprintf(c.w, "  [ok]   %s\n", okMsg)
		return
	}
	msg := fmt.Sprintf(failFormat, args...)
	fmt.Fprintf(c.w, "  [FAIL] %s\n", msg)
	c.failed = append(c.failed, msg)
}

func queryRows[T any](ctx context.Context, pool *pgxpool.Pool, sql string, scan func(pgx.Rows) (T, error), args ...any) ([]T, error) {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
