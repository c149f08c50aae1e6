//go:build unix

// Command onboarding runs an enterprise onboarding agent as a durable
// workflow, kills the worker process running it with SIGKILL partway (as a
// deploy would), starts a new worker, and prints a report from the
// providers' own counters and the run's recorded steps: each side effect
// happened once, the model was asked once, and the run resumed where it
// stopped.
//
// Run it from the repository root:
//
//	scripts/with-postgres go run ./examples/onboarding
//
// The seven steps: provision a workspace (transaction step), import the
// customer's data (rate-limited chunks with durable sleeps between them),
// generate a starter configuration with a model (an agentkit agent run as
// a child workflow), create a subscription at the payments provider, send
// three welcome emails, post a chat message, write an audit record
// (transaction step). The payments, mail and chat providers are local HTTP
// servers in this (parent) process that dedupe on idempotency keys and
// count what they receive. The model is an offline scripted server unless
// OPENAI_BASE_URL is set (with OPENAI_API_KEY and OPENAI_MODEL), reached
// through a counting gateway in this process.
//
// The demo drops and recreates the schemas onboarding (its tables) and
// onboarding_durable (the engine's) on every run. The same binary is the
// parent and, re-executed with ONBOARDING_WORKER set, each worker.
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
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/examples/internal/demo"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// options of one demo run.
type options struct {
	AppSchema    string        // default "onboarding"
	EngineSchema string        // default "onboarding_durable"
	StepDelay    time.Duration // duration of each step; default 6s
	Chunks       int           // import chunks; default 4
	KillAt       string        // "payment", "email" (the 2nd welcome email) or "chat"; default "email"
	Verbose      bool
	// Model endpoint; empty BaseURL: the offline scripted server.
	ModelBaseURL, ModelKey, ModelName string
}

func (o options) withDefaults() options {
	if o.AppSchema == "" {
		o.AppSchema = "onboarding"
	}
	if o.EngineSchema == "" {
		o.EngineSchema = "onboarding_durable"
	}
	if o.StepDelay <= 0 {
		o.StepDelay = 6 * time.Second
	}
	if o.Chunks <= 0 {
		o.Chunks = 4
	}
	if o.KillAt == "" {
		o.KillAt = "email"
	}
	if o.ModelBaseURL != "" && o.ModelName == "" {
		o.ModelName = "gpt-4.1-mini"
	}
	if o.ModelBaseURL == "" {
		o.ModelName = "scripted-offline"
	}
	return o
}

func main() {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	var o options
	flag.DurationVar(&o.StepDelay, "step-delay", 6*time.Second, "how long each step takes (the whole run takes about 12 of them)")
	flag.IntVar(&o.Chunks, "chunks", 4, "import chunks (500 records each)")
	flag.StringVar(&o.KillAt, "kill-at", "email", `when to SIGKILL worker 1: "payment" (the subscription was created), "email" (the 2nd welcome email was sent) or "chat"; always after the effect and before its checkpoint`)
	flag.BoolVar(&o.Verbose, "v", false, "print the engine's logs of the workers")
	flag.Parse()
	o.ModelBaseURL, o.ModelKey, o.ModelName = os.Getenv("OPENAI_BASE_URL"), os.Getenv("OPENAI_API_KEY"), os.Getenv("OPENAI_MODEL")

	demo.Main("onboarding", func(ctx context.Context, out io.Writer) error { return run(ctx, out, o) })
}

// scriptedConfig is the offline model's answer.
const scriptedConfig = `{"sso":{"provider":"okta","enforced":true},"roles":{"admin":["*"],"billing":["invoices","subscription"],"developer":["api_keys","webhooks","sandbox"]},"retention_days":365,"region":"eu-west-1"}`

// services are the parent's servers.
type services struct {
	payments, mail, chat *provider
	gateway              *modelGateway
	scripted             *agentkittest.Server // nil with a real model
}

func (s *services) close() {
	for _, p := range []*provider{s.payments, s.mail, s.chat} {
		if p != nil {
			p.close()
		}
	}
	if s.gateway != nil {
		s.gateway.close()
	}
	if s.scripted != nil {
		s.scripted.Close()
	}
}

func startServices(o options) (*services, error) {
	s := &services{}
	var err error
	if s.payments, err = newProvider("payments", "sub"); err != nil {
		return s, err
	}
	if s.mail, err = newProvider("mail", "msg"); err != nil {
		return s, err
	}
	if s.chat, err = newProvider("chat", "chat"); err != nil {
		return s, err
	}
	upstream := o.ModelBaseURL
	if upstream == "" {
		// The model takes one step's time to answer.
		s.scripted = agentkittest.NewServer(agentkittest.Turns(agentkittest.Reply{Text: scriptedConfig, Delay: o.StepDelay}))
		upstream = s.scripted.URL
	}
	s.gateway, err = newModelGateway(upstream, o.ModelKey)
	return s, err
}

// run is the whole demo. It returns a *demo.Failed when a check failed.
func run(ctx context.Context, out io.Writer, o options) error {
	o = o.withDefaults()
	killer := map[string]int{"payment": 1, "email": 2, "chat": 1} // effect number that triggers the kill
	if _, ok := killer[o.KillAt]; !ok {
		return fmt.Errorf("-kill-at %q: want payment, email or chat", o.KillAt)
	}
	w := demo.NewSyncWriter(out)
	say := func(format string, args ...any) { fmt.Fprintf(w, "[parent] "+format+"\n", args...) }

	pool, err := demo.Connect(ctx, "onboarding")
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig
	fmt.Fprintf(w, "onboarding: an enterprise onboarding agent survives kill -9 (Postgres %s:%d/%s)\n\n", cc.Host, cc.Port, cc.Database)
	if err := setup(ctx, pool, o); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	say("recreated schemas %s (workspaces, members, records, audit) and %s (engine)", o.AppSchema, o.EngineSchema)

	svc, err := startServices(o)
	defer svc.close()
	if err != nil {
		return err
	}
	model := "offline scripted model (agentkittest)"
	if o.ModelBaseURL != "" {
		model = fmt.Sprintf("%s at %s", o.ModelName, o.ModelBaseURL)
	}
	say("providers on 127.0.0.1: payments %s, mail %s, chat %s; model: %s via gateway %s", svc.payments.URL, svc.mail.URL, svc.chat.URL, model, svc.gateway.URL)

	// The kill: the provider's handler calls this once the effect is done,
	// and answers only after the worker is dead, so the worker never
	// learns that its call succeeded (nor checkpoints the step).
	killCh, killed := make(chan effect, 1), make(chan struct{})
	var once sync.Once
	target := map[string]*provider{"payment": svc.payments, "email": svc.mail, "chat": svc.chat}[o.KillAt]
	target.onEffect = func(e effect) {
		if n, _ := target.snapshot(); len(n) != killer[o.KillAt] {
			return
		}
		once.Do(func() {
			killCh <- e
			select {
			case <-killed:
			case <-time.After(10 * time.Second):
			}
		})
	}

	cfg := workerConfig{AppSchema: o.AppSchema, EngineSchema: o.EngineSchema, StepDelay: o.StepDelay, Chunks: o.Chunks,
		PaymentsURL: svc.payments.URL + "/v1/subscriptions", MailURL: svc.mail.URL + "/v1/send", ChatURL: svc.chat.URL + "/api/chat.postMessage",
		ModelURL: svc.gateway.URL, ModelName: o.ModelName, Verbose: o.Verbose}

	var startedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&startedAt); err != nil {
		return err
	}
	cfg.Worker = 1
	w1, err := startWorker(ctx, w, cfg)
	if err != nil {
		return err
	}
	say("started worker 1 (pid %d): run %s, ~%v per step; it will be killed after the %s effect, before its checkpoint", w1.pid, runID, o.StepDelay, o.KillAt)
	limit := time.Duration(20+2*o.Chunks) * o.StepDelay
	limit += 60 * time.Second
	var e effect
	select {
	case e = <-killCh:
	case err := <-w1.done:
		return fmt.Errorf("worker 1 exited before the kill: %v", err)
	case <-time.After(limit):
		w1.kill()
		return errors.New("timed out waiting for the kill point")
	case <-ctx.Done():
		w1.kill()
		return ctx.Err()
	}
	if err := syscall.Kill(w1.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill worker 1: %w", err)
	}
	w1err := <-w1.done
	close(killed)
	var killedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&killedAt); err != nil {
		return err
	}
	say("the %s provider performed %s (key %s) -> SIGKILL worker 1 (pid %d) before it got the answer: %v", target.name, e.ID, e.Key, w1.pid, w1err)

	cfg.Worker = 2
	w2, err := startWorker(ctx, w, cfg)
	if err != nil {
		return err
	}
	say("started worker 2 (pid %d) with the same ExecutorID %q", w2.pid, executorID)
	var w2err error
	select {
	case w2err = <-w2.done:
	case <-time.After(limit):
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
	return report(ctx, w, pool, o, svc, reportIn{startedAt: startedAt, killedAt: killedAt, killedBy: e,
		killedBySignal: diedOf(w1err, syscall.SIGKILL), w1err: w1err, w2err: w2err})
}

// setup drops and recreates the demo's schemas and migrates the engine's.
func setup(ctx context.Context, pool *pgxpool.Pool, o options) error {
	_, err := pool.Exec(ctx, `
DROP SCHEMA IF EXISTS `+pgx.Identifier{o.AppSchema}.Sanitize()+` CASCADE;
DROP SCHEMA IF EXISTS `+pgx.Identifier{o.EngineSchema}.Sanitize()+` CASCADE;
CREATE SCHEMA `+pgx.Identifier{o.AppSchema}.Sanitize())
	if err != nil {
		return err
	}
	if err := createAppTables(ctx, pool, o.AppSchema); err != nil {
		return err
	}
	return durable.Migrate(ctx, pool, o.EngineSchema)
}

// createAppTables creates the demo's tables in the existing schema.
func createAppTables(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `
CREATE TABLE `+s+`.workspaces (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  text NOT NULL, -- deliberately not unique: a duplicate would show
    company text NOT NULL,
    plan    text NOT NULL,
    seats   int NOT NULL
);
CREATE TABLE `+s+`.members (
    workspace_id bigint NOT NULL,
    role         text NOT NULL,
    email        text NOT NULL
);
CREATE TABLE `+s+`.records (
    workspace_id bigint NOT NULL,
    chunk        int NOT NULL,
    n            int NOT NULL
);
CREATE TABLE `+s+`.audit (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       text NOT NULL,
    workspace_id bigint NOT NULL,
    subscription text NOT NULL,
    emails       text[] NOT NULL,
    chat_message text NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);`)
	return err
}

type workerProc struct {
	pid  int
	cmd  *exec.Cmd
	done chan error
}

func (p *workerProc) kill() { _ = p.cmd.Process.Kill() }

// startWorker re-executes this binary (or the test binary, see
// main_test.go) in worker mode.
func startWorker(ctx context.Context, w io.Writer, cfg workerConfig) (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), envWorker+"="+string(b))
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", cfg.Worker, err)
	}
	p := &workerProc{pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

func diedOf(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

type reportIn struct {
	startedAt, killedAt time.Time // database clock
	killedBy            effect
	killedBySignal      bool
	w1err, w2err        error
}

// report prints the timeline, the providers' counters, the model's request
// count and the app rows, checks them and prints the verdict.
func report(ctx context.Context, w io.Writer, pool *pgxpool.Pool, o options, svc *services, in reportIn) error {
	eng, err := newEngine(pool, o.EngineSchema, "onboarding-report", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	wf := register(eng, &app{}, nil)
	h, err := wf.Handle(ctx, runID)
	if err != nil {
		return err
	}
	status, err := h.Status(ctx)
	if err != nil {
		return err
	}
	var res Onboarded
	var resErr error
	if status.Finished() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, resErr = h.Result(rctx)
		cancel()
	}
	steps, err := eng.ListSteps(ctx, runID)
	if err != nil {
		return err
	}

	// Timeline of the recorded steps.
	fmt.Fprintf(w, "\nTimeline (the run's recorded steps, from Engine.ListSteps; time since worker 1 started)\n")
	marked, before, childID := false, 0, ""
	var modelSteps []durable.StepRecord
	for _, st := range steps {
		if !marked && st.FinishedAt.After(in.killedAt) {
			fmt.Fprintf(w, "  ---- %+7.2fs  SIGKILL worker 1 (during the step below, after its effect); worker 2 replays the %d steps above, it does not run them\n",
				in.killedAt.Sub(in.startedAt).Seconds(), before)
			marked = true
		}
		who := "worker 1"
		if marked {
			who = "worker 2"
		} else {
			before++
		}
		name, note := st.Name, ""
		switch {
		case name == "durable.sleep":
			name, note = "  (pause)", "durable sleep: the import source's rate limit"
		case strings.HasPrefix(name, "child:"):
			_ = json.Unmarshal(st.Output, &childID)
			name, note = "generate-config", "agent run "+childID+" started"
		}
		if st.Attempts > 1 {
			note = strings.TrimSpace(note + fmt.Sprintf(" (%d attempts)", st.Attempts))
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %2d %-24s %+7.2fs  %s  %s", st.Pos, name, st.FinishedAt.Sub(in.startedAt).Seconds(), who, note), " "))
	}
	if childID != "" {
		cs, err := eng.ListSteps(ctx, childID)
		if err != nil {
			return err
		}
		for _, st := range cs {
			if strings.HasPrefix(st.Name, "agentkit.model:") {
				modelSteps = append(modelSteps, st)
				fmt.Fprintf(w, "     agent run %s: step %s recorded at %+7.2fs, %d attempt(s)\n", childID, st.Name,
					st.FinishedAt.Sub(in.startedAt).Seconds(), st.Attempts)
			}
		}
	}

	// Providers.
	fmt.Fprintln(w, "\nProviders (their own counters, kept in the parent process)")
	type want struct {
		p       *provider
		effects int
	}
	c := &checker{w: w}
	var provChecks []string
	for _, x := range []want{{svc.payments, 1}, {svc.mail, 3}, {svc.chat, 1}} {
		effects, calls := x.p.snapshot()
		keys := make([]string, 0, len(calls))
		for k := range calls {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		total := 0
		for _, k := range keys {
			total += calls[k]
		}
		fmt.Fprintf(w, "  %-8s %d request(s), %d effect(s)\n", x.p.name, total, len(effects))
		for _, e := range effects {
			note := ""
			if calls[e.Key] > 1 {
				note = fmt.Sprintf("  <- key seen %d times, acted once", calls[e.Key])
			}
			fmt.Fprintf(w, "           %-8s key %-32s requests %d%s\n", e.ID, e.Key, calls[e.Key], note)
		}
		if len(effects) != x.effects {
			provChecks = append(provChecks, fmt.Sprintf("%s performed %d effects, want %d", x.p.name, len(effects), x.effects))
		}
	}
	modelRequests := svc.gateway.count()
	fmt.Fprintf(w, "  model    %d request(s) through the gateway", modelRequests)
	if svc.scripted != nil {
		fmt.Fprintf(w, " (scripted server's log: %d request(s))", len(svc.scripted.Requests()))
	}
	fmt.Fprintln(w)

	// App rows.
	s := pgx.Identifier{o.AppSchema}.Sanitize()
	var nWS, nMembers, nRecords, nAudit int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s+`.workspaces WHERE run_id = $1), (SELECT count(*) FROM `+s+`.members),
(SELECT count(*) FROM `+s+`.records), (SELECT count(*) FROM `+s+`.audit WHERE run_id = $1)`, runID).Scan(&nWS, &nMembers, &nRecords, &nAudit)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nApp rows (%s): workspaces %d, members %d, records %d, audit %d\n", o.AppSchema, nWS, nMembers, nRecords, nAudit)
	fmt.Fprintf(w, "Final status: %s", status)
	if resErr != nil {
		fmt.Fprintf(w, ", error: %v", resErr)
	} else if status == durable.StatusSuccess {
		fmt.Fprintf(w, ", subscription %s, emails %s, chat %s, audit row %d\n  configuration: %s",
			res.Subscription, strings.Join(res.Emails, " "), res.ChatMessage, res.AuditID, oneLine(res.Config, 100))
	}
	fmt.Fprintln(w)

	// Checks.
	fmt.Fprintln(w, "\nChecks")
	c.check(in.killedBySignal, "worker 1 was killed by SIGKILL mid-run", "worker 1 did not die by SIGKILL: %v", in.w1err)
	c.check(in.w2err == nil && status == durable.StatusSuccess && resErr == nil, "worker 2 finished the run: status success",
		"worker 2: %v; status %s; result error %v", in.w2err, status, resErr)
	c.check(before > 0 && marked, fmt.Sprintf("%d steps were recorded before the kill and replayed, not re-run", before),
		"the kill did not fall mid-run (%d steps recorded before it)", before)
	c.check(len(provChecks) == 0, "each side effect once: 1 subscription, 3 welcome emails, 1 chat message",
		"%s", strings.Join(provChecks, "; "))
	_, calls := target(svc, o.KillAt).snapshot()
	c.check(calls[in.killedBy.Key] == 2, fmt.Sprintf("the interrupted %s call was repeated by worker 2 with the same key and deduplicated", o.KillAt),
		"the interrupted call's key %s was seen %d times, want 2", in.killedBy.Key, calls[in.killedBy.Key])
	c.check(modelRequests == 1 && len(modelSteps) == 1 && modelSteps[0].Attempts == 1,
		"the model was asked once: the configuration was recorded and not regenerated",
		"the model got %d requests (%d model steps recorded), want 1", modelRequests, len(modelSteps))
	wantRecords := o.Chunks * recordsPerChunk
	c.check(nWS == 1 && nMembers == 3 && nRecords == wantRecords && nAudit == 1,
		fmt.Sprintf("transaction steps wrote their rows once: 1 workspace, 3 members, %d records, 1 audit row", wantRecords),
		"rows: %d workspaces, %d members, %d records (want %d), %d audit", nWS, nMembers, nRecords, wantRecords, nAudit)
	if len(c.failed) > 0 {
		msg := "FAILED: " + strings.Join(c.failed, "; ")
		fmt.Fprintln(w, "\n"+msg)
		return &demo.Failed{Msg: msg}
	}
	fmt.Fprintf(w, "\nOK: killed after the %s effect, resumed in a new process; each side effect once, the model asked once, status %s\n", o.KillAt, status)
	return nil
}

func target(svc *services, killAt string) *provider {
	return map[string]*provider{"payment": svc.payments, "email": svc.mail, "chat": svc.chat}[killAt]
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
