package durable_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// offlineEngine is an engine whose pool points at a port nothing listens
// on: any use of the database fails (and is retried until ctx ends).
func offlineEngine(t *testing.T) *durable.Engine {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e, err := durable.New(pool, &durable.Config{AppVersion: "test", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return e
}

func history(status durable.Status, input string, steps ...durable.HistoryStep) *durable.History {
	return &durable.History{Format: durable.HistoryFormat, WorkflowID: "run-1", Workflow: "wf", AppVersion: "test",
		Status: status, Input: json.RawMessage(input), Steps: steps}
}

func done(pos int, name, output string) durable.HistoryStep {
	return durable.HistoryStep{Pos: pos, Name: name, Status: "done", Output: json.RawMessage(output), Attempts: 1}
}

// TestExportHistory: a finished run's history is exported as the
// documented JSON, read back, and replayed by the same code; a build that
// renamed a step after its sleep is caught there, as the waits of a
// finished run are all over.
func TestExportHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	var wf *durable.Workflow[string, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "greet", func(wctx durable.Context, name string) (string, error) {
			_, err := durable.Step(wctx, "fail", func(context.Context) (int, error) {
				return 0, durable.Permanent(errors.New("no luck"))
			}, nil)
			var se *durable.StepError
			if !errors.As(err, &se) {
				return "", errors.New("want a step error")
			}
			if err := durable.Sleep(wctx, time.Millisecond); err != nil {
				return "", err
			}
			return durable.Step(wctx, "hello", func(context.Context) (string, error) { return "hello " + name, nil }, nil)
		}, nil)
	})
	h, err := wf.Start(ctx, "ada", &durable.StartOpts{ID: "greet-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, durable.ExportHistory(ctx, e, "greet-1", &buf))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	require.EqualValues(t, 1, raw["format"])
	require.Equal(t, "greet-1", raw["workflow_id"])
	require.Equal(t, "greet", raw["workflow"])
	require.Equal(t, "test", raw["app_version"])
	require.Equal(t, "success", raw["status"])
	require.Equal(t, "ada", raw["input"])
	require.Equal(t, "hello ada", raw["output"])
	steps := raw["steps"].([]any)
	require.Len(t, steps, 3)
	first := steps[0].(map[string]any)
	require.Equal(t, "fail", first["name"])
	require.Equal(t, "error", first["status"])
	require.Contains(t, first["error"].(map[string]any)["message"], "no luck")
	require.Equal(t, "durable.sleep", steps[1].(map[string]any)["name"])
	require.Equal(t, map[string]any{"pos": 2.0, "name": "hello", "status": "done", "output": "hello ada", "attempts": 1.0}, steps[2])

	hist, err := durable.ReadHistory(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	loaded, err := durable.LoadHistory(ctx, e, "greet-1")
	require.NoError(t, err)
	require.Equal(t, loaded, hist)

	replay := func(register func(e *durable.Engine)) error {
		e := offlineEngine(t)
		register(e)
		return durable.ReplayHistory(ctx, e, hist)
	}
	require.NoError(t, replay(func(e *durable.Engine) {
		durable.Register(e, "greet", func(wctx durable.Context, name string) (string, error) {
			_, err := durable.Step(wctx, "fail", func(context.Context) (int, error) { panic("not replayed") }, nil)
			if err == nil || !strings.Contains(err.Error(), "no luck") {
				return "", errors.New("want the recorded error")
			}
			if err := durable.Sleep(wctx, time.Millisecond); err != nil {
				return "", err
			}
			return durable.Step(wctx, "hello", func(context.Context) (string, error) { panic("not replayed") }, nil)
		}, nil)
	}))
	err = replay(func(e *durable.Engine) {
		durable.Register(e, "greet", func(wctx durable.Context, name string) (string, error) {
			_, _ = durable.Step(wctx, "fail", func(context.Context) (int, error) { return 0, nil }, nil)
			_ = durable.Sleep(wctx, time.Millisecond)
			return durable.Step(wctx, "hello-v2", func(context.Context) (string, error) { return "", nil }, nil)
		}, nil)
	})
	var re *durable.ReplayError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "greet-1", re.WorkflowID)
	require.Equal(t, "greet", re.Workflow)
	require.Equal(t, 2, re.Pos)
	var nd *durable.NonDeterminismError
	require.ErrorAs(t, err, &nd)
	require.Equal(t, "hello", nd.Recorded)
	require.Equal(t, "hello-v2", nd.Called)

	_, err = durable.LoadHistory(ctx, e, "nope")
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
}

// TestReplayHistoryNeedsNoDatabase: a replay runs no step, resolves no
// intent, waits for nothing and writes no stream entry: it works on an
// engine whose database is unreachable, and ends at the first call with
// no record.
func TestReplayHistoryNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	var calls atomic.Int32
	var childWF *durable.Workflow[int, int]
	count := func(context.Context) (int, error) { calls.Add(1); return 1, nil }
	wake := json.RawMessage(`"` + time.Now().Add(time.Hour).Format(time.RFC3339Nano) + `"`)
	cases := []struct {
		name string
		hist *durable.History
		code func(wctx durable.Context, in int) (int, error)
		want string // "" for no divergence, else a substring of the error
	}{{
		name: "stream writes, then the end of the history",
		hist: history(durable.StatusPending, "1", done(0, "a", "5")),
		code: func(wctx durable.Context, in int) (int, error) {
			n, err := durable.Step(wctx, "a", count, nil)
			if err != nil || n != 5 {
				return 0, errors.New("want the recorded output")
			}
			if err := durable.StreamWrite(wctx, "progress", n); err != nil {
				return 0, err
			}
			if err := durable.StreamClose(wctx, "progress"); err != nil {
				return 0, err
			}
			return durable.Step(wctx, "b", count, nil)
		},
	}, {
		name: "a sleep in progress",
		hist: history(durable.StatusPending, "1", done(0, "a", "5"), durable.HistoryStep{Pos: 1, Name: "durable.sleep", Status: "done", Output: wake}),
		code: func(wctx durable.Context, in int) (int, error) {
			if _, err := durable.Step(wctx, "a", count, nil); err != nil {
				return 0, err
			}
			if err := durable.Sleep(wctx, time.Hour); err != nil {
				return 0, err
			}
			panic("the run is still asleep: the replay ends at the sleep")
		},
	}, {
		name: "a sleep that ended",
		hist: history(durable.StatusPending, "1", durable.HistoryStep{Pos: 0, Name: "durable.sleep", Status: "done", Output: wake}, done(1, "a", "5")),
		code: func(wctx durable.Context, in int) (int, error) {
			if err := durable.Sleep(wctx, time.Hour); err != nil {
				return 0, err
			}
			return durable.Step(wctx, "b", count, nil)
		},
		want: `step 1 is recorded as "a" but the code called "b"`,
	}, {
		name: "the last sleep of a finished run",
		hist: history(durable.StatusSuccess, "1", durable.HistoryStep{Pos: 0, Name: "durable.sleep", Status: "done", Output: wake}),
		code: func(wctx durable.Context, in int) (int, error) {
			if err := durable.Sleep(wctx, time.Hour); err != nil {
				return 0, err
			}
			return 0, errors.New("a failure the run did not have")
		},
		want: "a failure the run did not have",
	}, {
		name: "a message not received yet",
		hist: history(durable.StatusPending, "1", done(0, "durable.recv-deadline:t", string(wake))),
		code: func(wctx durable.Context, in int) (int, error) {
			_, _, err := durable.Recv[string](wctx, "t", time.Hour)
			return 0, err
		},
	}, {
		name: "an intent in flight",
		hist: history(durable.StatusPending, "1", durable.HistoryStep{Pos: 0, Name: "pay", Status: "intent"}),
		code: func(wctx durable.Context, in int) (int, error) {
			return durable.IntentStep(wctx, "pay", count, count, nil)
		},
	}, {
		name: "an intent replayed as a plain step",
		hist: history(durable.StatusPending, "1", durable.HistoryStep{Pos: 0, Name: "pay", Status: "intent"}),
		code: func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "pay", count, nil)
		},
		want: `step 0 is recorded as "pay (intent step)"`,
	}, {
		name: "events, children and patches",
		hist: history(durable.StatusPending, "1", done(0, "durable.event:k", "null"), done(1, "child:child", `"run-1/1"`)),
		code: func(wctx durable.Context, in int) (int, error) {
			if err := durable.SetEvent(wctx, "k", 1); err != nil {
				return 0, err
			}
			if _, err := childWF.StartChild(wctx, 1, nil); err != nil {
				return 0, err
			}
			if patched, err := durable.Patched(wctx, "p"); patched || err == nil {
				return 0, errors.New("a patch marker at the end of the history is where the replay ends")
			}
			return 0, nil
		},
	}, {
		name: "a recorded step error the code returns, in a run in flight",
		hist: history(durable.StatusPending, "1", durable.HistoryStep{Pos: 0, Name: "a", Status: "error", Error: json.RawMessage(`{"kind":"permanent","message":"no luck"}`)}),
		code: func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "a", count, nil)
		},
		want: "no luck",
	}, {
		name: "the same, in a run that failed with it",
		hist: func() *durable.History {
			h := history(durable.StatusError, "1", durable.HistoryStep{Pos: 0, Name: "a", Status: "error", Error: json.RawMessage(`{"kind":"permanent","message":"no luck"}`)})
			h.Error = json.RawMessage(`{"kind":"permanent","message":"no luck"}`)
			return h
		}(),
		code: func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "a", count, nil)
		},
	}, {
		name: "an input the code no longer decodes",
		hist: history(durable.StatusPending, `"one"`),
		code: func(wctx durable.Context, in int) (int, error) { return in, nil },
		want: "cannot decode stored input",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := offlineEngine(t)
			durable.Register(e, "wf", c.code, nil)
			childWF = durable.Register(e, "child", func(durable.Context, int) (int, error) { return 0, nil }, nil)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := durable.ReplayHistory(rctx, e, c.hist)
			if c.want == "" {
				require.NoError(t, err)
			} else {
				var re *durable.ReplayError
				require.ErrorAs(t, err, &re)
				require.ErrorContains(t, err, c.want)
			}
			require.Zero(t, calls.Load(), "a step function or resolver ran")
		})
	}
}

// TestReplayHistoryBoundedByContext: code that blocks outside durable calls
// cannot hold a replay past its context.
func TestReplayHistoryBoundedByContext(t *testing.T) {
	t.Parallel()
	e := offlineEngine(t)
	release := make(chan struct{})
	exited := make(chan struct{})
	durable.Register(e, "wf", func(wctx durable.Context, in int) (int, error) {
		defer close(exited)
		if _, err := durable.Step(wctx, "a", func(context.Context) (int, error) { return 0, nil }, nil); err != nil {
			return 0, err
		}
		<-release // a bug: waiting on something no durable call knows of
		_, err := durable.Step(wctx, "a", func(context.Context) (int, error) { panic("not replayed") }, nil)
		return 0, err
	}, nil)
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	err := durable.ReplayHistory(ctx, e, history(durable.StatusPending, "1", done(0, "a", "1"), done(1, "a", "1")))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	<-exited // the code goes on once unblocked, and its next durable call returns at once
}

// TestReadHistoryRejects: a malformed history is an ErrInvalidArgument
// that names the field.
func TestReadHistoryRejects(t *testing.T) {
	t.Parallel()
	ok := `{"format":1,"workflow_id":"r","workflow":"w","app_version":"v","status":"pending","input":1,"steps":[{"pos":0,"name":"a","status":"done","output":1}]}`
	_, err := durable.ReadHistory(strings.NewReader(ok))
	require.NoError(t, err)
	for _, c := range []struct{ from, to, want string }{
		{`"format":1`, `"format":2`, "format 2"},
		{`"format":1,`, ``, "format is missing"},
		{`"workflow":"w"`, `"workflow":""`, "history.workflow is empty"},
		{`"workflow_id":"r"`, `"workflow_id":""`, "history.workflow_id is empty"},
		{`"input":1,`, ``, "input is missing"},
		{`"status":"pending"`, `"status":"sleeping"`, `status "sleeping"`},
		{`"pos":0`, `"pos":-1`, "steps[0].pos -1 is negative"},
		{`"status":"done"`, `"status":"ok"`, `steps[0].status "ok"`},
		{`"name":"a"`, `"name":""`, "steps[0].name is empty"},
		{`"steps":[{"pos":0,"name":"a","status":"done","output":1}]`, `"steps":[{"pos":0,"name":"a","status":"done"},{"pos":0,"name":"b","status":"done"}]`, "steps[1].pos 0 is recorded twice"},
		{`"app_version":"v"`, `"app_versions":"v"`, "unknown field"},
		{ok, `{`, "unexpected EOF"},
	} {
		in := strings.Replace(ok, c.from, c.to, 1)
		require.NotEqual(t, ok, in, c.from)
		_, err := durable.ReadHistory(strings.NewReader(in))
		require.ErrorIs(t, err, durable.ErrInvalidArgument, c.want)
		require.ErrorContains(t, err, c.want)
	}
	e := offlineEngine(t)
	err = durable.ReplayHistory(ctxT(t), e, history(durable.StatusPending, "1"))
	var re *durable.ReplayError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, durable.ErrNotRegistered)
	require.ErrorIs(t, durable.ReplayHistory(ctxT(t), e, nil), durable.ErrInvalidArgument)
	_, err = durable.Check(ctxT(t), e, &durable.CheckOpts{AllVersions: true, AppVersions: []string{"v"}})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = durable.Check(ctxT(t), e, &durable.CheckOpts{Workflows: []string{""}})
	require.ErrorContains(t, err, "CheckOpts.Workflows[0] is empty")
}
