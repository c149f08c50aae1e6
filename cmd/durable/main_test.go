package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/internal/pgtest"
)

// bin is the durable binary built once for the package's tests.
var bin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Getenv("DATABASE_URL") == "" {
		fmt.Fprintln(os.Stderr, "cmd/durable: DATABASE_URL is not set; skipping the end-to-end tests (scripts/test sets it)")
		return 0
	}
	dir, err := os.MkdirTemp("", "durable-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "durable")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the durable command:", err)
		return 1
	}
	return m.Run()
}

// env is one test's database schema, with a pool and a launched engine of
// the workflows the test registers: the live system the CLI operates on.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	eng    *durable.Engine
}

func newEnv(t *testing.T, register func(e *durable.Engine)) *env {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [3]byte
	_, _ = rand.Read(b[:])
	schema := "cli_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { pgtest.DropSchema(t, os.Getenv("DATABASE_URL"), schema) })
	e := &env{t: t, pool: pool, schema: schema}
	if register != nil {
		eng, err := durable.New(pool, &durable.Config{
			Schema: schema, AppVersion: "v1", LeaseTTL: time.Second, PollInterval: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		require.NoError(t, err)
		register(eng)
		require.NoError(t, eng.Launch(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = eng.Shutdown(ctx)
		})
		e.eng = eng
	}
	return e
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the durable binary on the env's schema.
func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--schema", e.schema)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return result{out.String(), errb.String(), code}
}

// ok runs the binary and requires exit code 0.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, 0, r.code, "durable %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.stdout, r.stderr)
	return r.stdout
}

// okJSON runs the binary with --json and decodes its output into v.
func (e *env) okJSON(v any, args ...string) {
	e.t.Helper()
	out := e.ok(append(args, "--json")...)
	require.NoError(e.t, json.Unmarshal([]byte(out), v), out)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	out := e.ok("migrate")
	require.Contains(t, out, fmt.Sprintf("is at version %d", durable.SchemaVersion()))
	var m struct {
		Schema  string `json:"schema"`
		Version int    `json:"version"`
	}
	e.okJSON(&m, "migrate") // idempotent
	require.Equal(t, e.schema, m.Schema)
	require.Equal(t, durable.SchemaVersion(), m.Version)
	out = e.ok("list")
	require.Contains(t, out, "(no runs)")

	// --print-sql needs no database.
	cmd := exec.Command(bin, "migrate", "--print-sql", "--schema", "ops_review")
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	sql, err := cmd.Output()
	require.NoError(t, err)
	want, err := durable.MigrationSQL("ops_review")
	require.NoError(t, err)
	require.Equal(t, want, string(sql))

	// Usage errors exit 2, other errors 1, each with a message on stderr.
	bad := exec.Command(bin, "migrate", "--print-sql", "--schema", "bad name")
	var stderr bytes.Buffer
	bad.Stderr = &stderr
	err = bad.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, stderr.String(), "plain identifier")
	r := e.run("frobnicate")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
	r = e.run("list", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "durable: list workflows")
	noSchema := &env{t: t, schema: "cli_missing_schema"}
	r = noSchema.run("list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `run "durable migrate"`)
	require.Equal(t, 0, e.run("help").code)
}

func TestListAndShow(t *testing.T) {
	t.Parallel()
	var greet, fails *durable.Workflow[string, string]
	e := newEnv(t, func(eng *durable.Engine) {
		greet = durable.Register(eng, "greet", func(wctx durable.Context, in string) (string, error) {
			name, err := durable.Step(wctx, "lookup", func(context.Context) (string, error) { return strings.ToUpper(in), nil }, nil)
			if err != nil {
				return "", err
			}
			return durable.Step(wctx, "format", func(context.Context) (string, error) { return "hello " + name, nil }, nil)
		}, nil)
		fails = durable.Register(eng, "fails", func(wctx durable.Context, in string) (string, error) {
			return durable.Step(wctx, "charge", func(context.Context) (string, error) {
				return "", durable.Permanent(errors.New("card declined\nsecond line"))
			}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		}, nil)
	})
	ctx := ctxT(t)
	for i := range 3 {
		var tags map[string]string
		if i == 1 {
			tags = map[string]string{"customer": "acme", "tier": "gold"}
		}
		h, err := greet.Start(ctx, fmt.Sprint("ann", i), &durable.StartOpts{ID: fmt.Sprintf("greet-%d", i), Tags: tags})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
	}
	h, err := fails.Start(ctx, "x", &durable.StartOpts{ID: "fails-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.Error(t, err)

	out := e.ok("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	require.Regexp(t, `^ID\s+NAME\s+STATUS\s+QUEUE\s+TAGS\s+CREATED\s+UPDATED\s+ERROR$`, lines[0])
	require.Regexp(t, `^fails-1\s+fails\s+error\s+-\s+-\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+.*durable: step 0 "charge"`, lines[1], "newest first")
	require.Contains(t, out, "greet-0")
	require.Regexp(t, `(?m)^greet-1\s+greet\s+success\s+-\s+customer=acme,tier=gold\s+\d{4}`, out)

	// --tag keeps the runs with every tag given.
	out = e.ok("list", "--tag", "customer=acme")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^greet-1\s`, lines[1])
	require.Contains(t, e.ok("list", "--tag", "customer=acme", "--tag", "tier=silver"), "(no runs)")
	var tagged struct {
		Runs []struct {
			ID   string            `json:"id"`
			Tags map[string]string `json:"tags"`
		} `json:"runs"`
	}
	e.okJSON(&tagged, "list", "--tag", "customer=acme", "--tag", "tier=gold", "--status", "success")
	require.Len(t, tagged.Runs, 1)
	require.Equal(t, map[string]string{"customer": "acme", "tier": "gold"}, tagged.Runs[0].Tags)
	for _, bad := range [][]string{{"--tag", "customer"}, {"--tag", "=acme"}, {"--tag", "customer="}, {"--tag", "a=1", "--tag", "a=2"}} {
		r := e.run(append([]string{"list"}, bad...)...)
		require.Equal(t, 2, r.code, "%v: %s", bad, r.stderr)
	}
	r := e.run("list", "--tag", "k="+strings.Repeat("v", 256))
	require.Equal(t, 2, r.code, "a value over the limit: %s", r.stderr)
	require.Contains(t, r.stderr, "ListParams.Tags")

	var page struct {
		Runs []struct {
			ID     string          `json:"id"`
			Name   string          `json:"name"`
			Status string          `json:"status"`
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
			Error  *struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"runs"`
		Next string `json:"next"`
	}
	e.okJSON(&page, "list", "--status", "error")
	require.Len(t, page.Runs, 1)
	require.Equal(t, "fails-1", page.Runs[0].ID)
	require.Contains(t, page.Runs[0].Error.Message, "card declined")
	require.Empty(t, page.Next)

	e.okJSON(&page, "list", "--name", "greet", "--limit", "2", "--since", "1h")
	require.Len(t, page.Runs, 2)
	require.Equal(t, "greet-2", page.Runs[0].ID)
	require.JSONEq(t, `"hello ANN2"`, string(page.Runs[0].Output))
	require.NotEmpty(t, page.Next)
	cursor := page.Next
	e.okJSON(&page, "list", "--name", "greet", "--limit", "2", "--cursor", cursor)
	require.Len(t, page.Runs, 1)
	require.Equal(t, "greet-0", page.Runs[0].ID)
	out = e.ok("list", "--name", "greet", "--limit", "2")
	require.Contains(t, out, "more: --cursor ")
	e.okJSON(&page, "list", "--id-prefix", "greet-1", "--status", "success,pending")
	require.Len(t, page.Runs, 1)
	e.okJSON(&page, "list", "--since", "2000-01-01")
	require.Len(t, page.Runs, 4)

	out = e.ok("show", "greet-1")
	require.Regexp(t, `(?m)^Status\s+success$`, out)
	require.Regexp(t, `(?m)^Tags\s+customer=acme,tier=gold$`, out)
	require.NotContains(t, e.ok("show", "greet-0"), "Tags")
	require.Regexp(t, `(?m)^Input\s+"ann1"$`, out)
	require.Regexp(t, `(?m)^Output\s+"hello ANN1"$`, out)
	require.Regexp(t, `(?m)^POS\s+NAME\s+STATUS\s+ATTEMPTS\s+STARTED\s+AT\s+DURATION\s+ERROR$`, out)
	require.Regexp(t, `(?m)^0\s+lookup\s+done\s+1\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+\+\S+s\s+\S+s\s*$`, out)
	require.Regexp(t, `(?m)^1\s+format\s+done\s+1\s+`, out)

	var shown struct {
		Run struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"run"`
		Steps []struct {
			Pos        int             `json:"pos"`
			Name       string          `json:"name"`
			Status     string          `json:"status"`
			Attempts   int             `json:"attempts"`
			StartedAt  *time.Time      `json:"started_at"`
			DurationMS *float64        `json:"duration_ms"`
			Output     json.RawMessage `json:"output"`
			Error      *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"steps"`
	}
	out = e.ok("show", "fails-1")
	require.Regexp(t, `(?m)^Error\s+.*card declined second line$`, out, "newlines flattened")
	e.okJSON(&shown, "show", "fails-1")
	require.Equal(t, "error", shown.Run.Status)
	require.Len(t, shown.Steps, 1)
	require.Equal(t, "charge", shown.Steps[0].Name)
	require.Equal(t, "error", shown.Steps[0].Status)
	require.Contains(t, shown.Steps[0].Error.Message, "card declined")
	require.NotNil(t, shown.Steps[0].StartedAt)
	require.NotNil(t, shown.Steps[0].DurationMS)
	require.GreaterOrEqual(t, *shown.Steps[0].DurationMS, 0.0)

	r = e.run("show", "no-such-run")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `durable: workflow not found: "no-such-run"`)
	require.Empty(t, r.stdout)
	for _, args := range [][]string{
		{"show"}, {"show", "a", "b"}, {"list", "--status", "weird"}, {"list", "--limit", "0"},
		{"list", "--since", "yesterday"}, {"list", "--nope"}, {"list", "--cursor", "garbage"},
	} {
		r := e.run(args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.NotEmpty(t, r.stderr)
	}
}

func TestControl(t *testing.T) {
	t.Parallel()
	var waiter, flaky *durable.Workflow[string, string]
	var flakyCalls atomic.Int32
	e := newEnv(t, func(eng *durable.Engine) {
		// waiter waits for a human's answer, as an approval flow does.
		waiter = durable.Register(eng, "waiter", func(wctx durable.Context, in string) (string, error) {
			if _, err := durable.Step(wctx, "prepare", func(context.Context) (string, error) { return in, nil }, nil); err != nil {
				return "", err
			}
			answer, ok, err := durable.Recv[map[string]string](wctx, "approval", time.Hour)
			if err != nil {
				return "", err
			}
			if !ok {
				return "", errors.New("no answer")
			}
			return in + ": " + answer["decision"], nil
		}, nil)
		flaky = durable.Register(eng, "flaky", func(wctx durable.Context, in string) (string, error) {
			a, err := durable.Step(wctx, "a", func(context.Context) (string, error) { return in + "-a", nil }, nil)
			if err != nil {
				return "", err
			}
			return durable.Step(wctx, "b", func(context.Context) (string, error) {
				if flakyCalls.Add(1) == 1 {
					return "", durable.Permanent(errors.New("provider down"))
				}
				return a + "-b", nil
			}, nil)
		}, nil)
	})
	ctx := ctxT(t)

	// send: approve a run waiting in Recv; it finishes.
	h, err := waiter.Start(ctx, "refund", &durable.StartOpts{ID: "w-1"})
	require.NoError(t, err)
	out := e.ok("send", "w-1", "approval", `{"decision": "approved"}`)
	require.Contains(t, out, `sent to w-1 on topic "approval"`)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "refund: approved", res)
	r := e.run("send", "w-1", "approval", `{}`)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "already finished")
	r = e.run("send", "w-1", "approval", `not json`)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "not valid JSON")
	r = e.run("send", "w-404", "approval", `1`)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "workflow not found")

	// cancel, then resume, then send.
	h2, err := waiter.Start(ctx, "upgrade", &durable.StartOpts{ID: "w-2"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		steps, err := e.eng.ListSteps(ctx, "w-2")
		return err == nil && len(steps) >= 1
	}, 30*time.Second, 10*time.Millisecond)
	out = e.ok("cancel", "w-2")
	require.Contains(t, out, "cancelled w-2: status cancelled")
	_, err = h2.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCancelled)
	var st struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	e.okJSON(&st, "resume", "w-2")
	require.Equal(t, "w-2", st.ID)
	require.Contains(t, []string{"pending", "enqueued"}, st.Status)
	// A retried send with an idempotency key is delivered once.
	e.ok("send", "w-2", "note", `"first"`, "--idempotency-key", "ticket-7")
	e.ok("send", "w-2", "note", `"again"`, "--idempotency-key", "ticket-7")
	var notes int
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{e.schema, "messages"}.Sanitize()+
		" WHERE workflow_id = 'w-2' AND topic = 'note'").Scan(&notes))
	require.Equal(t, 1, notes)
	e.ok("send", "w-2", "approval", `{"decision":"granted"}`)
	res, err = h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "upgrade: granted", res)
	r = e.run("resume", "w-2")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "only cancelled, dead or failed runs can be resumed")
	r = e.run("cancel", "w-404")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "workflow not found")

	// fork from the failed step, and resume --retry-failed-step.
	hf, err := flaky.Start(ctx, "x", &durable.StartOpts{ID: "f-1"})
	require.NoError(t, err)
	_, err = hf.Result(ctx)
	require.ErrorContains(t, err, "provider down")
	var forked struct {
		ID         string `json:"id"`
		FromStep   int    `json:"from_step"`
		AppVersion string `json:"app_version"`
	}
	e.okJSON(&forked, "fork", "f-1", "--from-step", "1", "--id", "f-1-retry")
	require.Equal(t, "f-1-retry", forked.ID)
	require.Equal(t, "v1", forked.AppVersion, "the forked run's version by default")
	hr, err := flaky.Handle(ctx, "f-1-retry")
	require.NoError(t, err)
	res, err = hr.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "x-a-b", res)
	out = e.ok("show", "f-1-retry")
	require.Regexp(t, `(?m)^0\s+a\s+done`, out)
	r = e.run("fork", "f-1", "--from-step", "1", "--id", "f-1-retry")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "already used")
	r = e.run("fork", "f-1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--from-step is required")
	r = e.run("fork", "f-1", "--from-step", "7")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "recorded steps")

	out = e.ok("resume", "f-1", "--retry-failed-step")
	require.Contains(t, out, "resumed f-1")
	res, err = hf.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "x-a-b", res)
}

func TestQueuesAndSchedules(t *testing.T) {
	t.Parallel()
	var job *durable.Workflow[string, string]
	var q *durable.Queue
	e := newEnv(t, func(eng *durable.Engine) {
		job = durable.Register(eng, "job", func(wctx durable.Context, in string) (string, error) {
			return "did " + in, nil
		}, nil)
		q = durable.RegisterQueue(eng, "work", &durable.QueueOpts{GlobalConcurrency: 4, RateLimit: 100, RatePeriod: time.Second,
			FairShare: true, PartitionRateLimit: 5, PartitionRatePeriod: time.Minute})
		durable.RegisterQueue(eng, "idle", nil)
		durable.Schedule(job, "yearly-report", "0 0 1 1 *", &durable.ScheduleOpts[string]{Input: "report"})
	})
	ctx := ctxT(t)
	require.NoError(t, q.Pause(ctx))
	var handles []*durable.Handle[string]
	for i := range 3 {
		h, err := job.Enqueue(ctx, q, fmt.Sprint(i), &durable.EnqueueOpts{PartitionKey: []string{"acme", "acme", ""}[i]})
		require.NoError(t, err)
		handles = append(handles, h)
	}
	require.NoError(t, q.SetPartitionLimits(ctx, "vip", &durable.PartitionLimits{Concurrency: 2, Weight: 3}))

	out := e.ok("queues")
	require.Regexp(t, `(?m)^NAME\s+READY\s+DELAYED\s+RUNNING\s+GLOBAL\s+WORKER\s+PARTITION\s+RATE\s+KEY RATE\s+FAIR\s+PAUSED$`, out)
	require.Regexp(t, `(?m)^idle\s+0\s+0\s+0\s+-\s+-\s+-\s+-\s+-\s+no\s+no$`, out)
	require.Regexp(t, `(?m)^work\s+3\s+0\s+0\s+4\s+-\s+-\s+100/1s\s+5/1m0s\s+yes\s+yes$`, out)
	out = e.ok("queues", "partitions", "work")
	require.Regexp(t, `(?m)^KEY\s+READY\s+DELAYED\s+RUNNING\s+LIMIT\s+WEIGHT$`, out)
	require.Regexp(t, `(?m)^acme\s+2\s+0\s+0\s+-\s+1\n\(none\)\s+1\s+0\s+0\s+-\s+1\nvip\s+0\s+0\s+0\s+2\s+3$`, out)
	var parts []struct {
		Key         string `json:"key"`
		Ready       int    `json:"ready"`
		Concurrency *int   `json:"concurrency"`
		Weight      int    `json:"weight"`
	}
	e.okJSON(&parts, "queues", "partitions", "work")
	require.Len(t, parts, 3)
	require.Equal(t, "acme", parts[0].Key)
	require.Equal(t, 2, parts[0].Ready)
	require.Equal(t, 2, *parts[2].Concurrency)
	require.Equal(t, 3, parts[2].Weight)
	var queues []struct {
		Name              string `json:"name"`
		Ready             int    `json:"ready"`
		Running           int    `json:"running"`
		Paused            bool   `json:"paused"`
		GlobalConcurrency int    `json:"global_concurrency"`
		RateLimit         int    `json:"rate_limit"`
		RatePeriodMS      int64  `json:"rate_period_ms"`
	}
	e.okJSON(&queues, "queues")
	require.Len(t, queues, 2)
	require.Equal(t, "work", queues[1].Name)
	require.Equal(t, 3, queues[1].Ready)
	require.True(t, queues[1].Paused)
	require.Equal(t, int64(1000), queues[1].RatePeriodMS)

	require.Contains(t, e.ok("queues", "resume", "work"), `queue "work" resumed`)
	for _, h := range handles {
		_, err := h.Result(ctx)
		require.NoError(t, err)
	}
	e.okJSON(&queues, "queues")
	require.False(t, queues[1].Paused)
	require.Zero(t, queues[1].Ready)
	r := e.run("queues", "pause", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "queue not found")
	require.Equal(t, 2, e.run("queues", "drain", "work").code)

	out = e.ok("schedules")
	require.Regexp(t, `(?m)^NAME\s+WORKFLOW\s+SPEC\s+ZONE\s+PAUSED\s+LAST TICK\s+NEXT TICK\s+LAST RUN$`, out)
	require.Regexp(t, `(?m)^yearly-report\s+job\s+0 0 1 1 \*\s+UTC\s+no\s+-\s+\d{4}-01-01 00:00:00Z\s+-$`, out)
	var ps struct {
		Schedule string `json:"schedule"`
		Paused   bool   `json:"paused"`
	}
	e.okJSON(&ps, "schedules", "pause", "yearly-report")
	require.True(t, ps.Paused)
	var scheds []struct {
		Name     string     `json:"name"`
		Paused   bool       `json:"paused"`
		NextTick *time.Time `json:"next_tick"`
	}
	e.okJSON(&scheds, "schedules")
	require.Len(t, scheds, 1)
	require.True(t, scheds[0].Paused)
	require.Nil(t, scheds[0].NextTick)
	require.Contains(t, e.ok("schedules", "resume", "yearly-report"), `schedule "yearly-report" resumed`)

	// trigger: started by the executor that declares the schedule.
	var trig struct {
		ID string `json:"id"`
	}
	e.okJSON(&trig, "schedules", "trigger", "yearly-report", "--tick", "2031-05-06T07:08:09Z")
	require.Equal(t, "sched:yearly-report:manual:2031-05-06T07:08:09Z", trig.ID)
	require.Eventually(t, func() bool {
		h, err := job.Handle(ctx, trig.ID)
		if err != nil {
			return false
		}
		out, err := h.Result(ctx)
		return err == nil && out == "did report"
	}, 30*time.Second, 20*time.Millisecond)
	r = e.run("schedules", "trigger", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "schedule not found")
	require.Equal(t, 2, e.run("schedules", "trigger", "yearly-report", "--tick", "tomorrow").code)
	require.Equal(t, 2, e.run("schedules", "explode", "yearly-report").code)
}

func TestPrune(t *testing.T) {
	t.Parallel()
	var job *durable.Workflow[string, string]
	e := newEnv(t, func(eng *durable.Engine) {
		job = durable.Register(eng, "job", func(wctx durable.Context, in string) (string, error) {
			return durable.Step(wctx, "s", func(context.Context) (string, error) { return in, nil }, nil)
		}, nil)
	})
	ctx := ctxT(t)
	for i := range 5 {
		h, err := job.Start(ctx, "x", &durable.StartOpts{ID: fmt.Sprint("run-", i)})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
	}
	// Three of them finished 40 days ago.
	_, err := e.pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.schema, "workflows"}.Sanitize()+
		" SET updated_at = now() - interval '40 days' WHERE id IN ('run-0', 'run-1', 'run-2')")
	require.NoError(t, err)

	var res struct {
		Runs    int64 `json:"runs"`
		Steps   int64 `json:"steps"`
		Batches int   `json:"batches"`
	}
	e.okJSON(&res, "prune", "--older-than", "720h", "--batch", "2", "--max", "1")
	require.Equal(t, int64(1), res.Runs)
	e.okJSON(&res, "prune", "--older-than", "720h", "--batch", "1")
	require.Equal(t, int64(2), res.Runs)
	require.Equal(t, int64(2), res.Steps)
	require.Equal(t, 2, res.Batches)
	out := e.ok("prune", "--older-than", "720h")
	require.Contains(t, out, "pruned 0 runs")
	require.NotContains(t, out, "blobs", "no agentkit table in this schema")

	// With agentkit's blob table, blobs no run refers to go too.
	require.NoError(t, agentkit.Migrate(ctx, e.pool, e.schema))
	store, err := agentkit.NewPGBlobStore(e.pool, e.schema)
	require.NoError(t, err)
	orphan, err := store.Put(ctx, []byte("referred to by no run"))
	require.NoError(t, err)
	_, err = store.Put(ctx, []byte("put just now"))
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.schema, "agentkit_blobs"}.Sanitize()+
		" SET created_at = now() - interval '2 hours' WHERE sha256 = $1", orphan.SHA256)
	require.NoError(t, err)
	var withBlobs struct {
		Blobs int64 `json:"blobs"`
	}
	e.okJSON(&withBlobs, "prune", "--older-than", "720h")
	require.Equal(t, int64(1), withBlobs.Blobs)
	require.Contains(t, e.ok("prune", "--older-than", "720h"), "pruned 0 agentkit blobs")
	out = e.ok("list")
	require.Contains(t, out, "run-3")
	require.NotContains(t, out, "run-0")
	r := e.run("show", "run-0")
	require.Equal(t, 1, r.code)
	for _, args := range [][]string{{"prune"}, {"prune", "--older-than", "-1h"}, {"prune", "--older-than", "1h", "--batch", "0"}} {
		require.Equal(t, 2, e.run(args...).code, args)
	}
}
