package durabletest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/internal/pgtest"
)

// fatalT records what Replay, ReplayFile and Check report instead of
// failing the test.
type fatalT struct {
	testing.TB
	msgs []string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// offline is an engine whose database nothing listens on: a replay that
// used it would fail.
func offline(t *testing.T) *durable.Engine {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e, err := durable.New(pool, &durable.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return e
}

// TestReplayFile: the committed history replays against the code that
// recorded it and against a build that added a step after it; each way a
// build or a file can fail is reported with what went wrong and where.
func TestReplayFile(t *testing.T) {
	t.Parallel()
	const file = "testdata/replay/onboard.json"
	// register registers a build of onboard that takes steps in order
	// ("sleep" is the trial's sleep); no step function may run.
	register := func(steps ...string) func(e *durable.Engine) {
		return func(e *durable.Engine) {
			durable.Register(e, "onboard", func(wctx durable.Context, in replaySignup) (string, error) {
				for _, s := range steps {
					if s == "sleep" {
						if err := durable.Sleep(wctx, 14*24*time.Hour); err != nil {
							return "", err
						}
						continue
					}
					if _, err := durable.Step(wctx, s, func(context.Context) (string, error) { panic("a step ran during a replay") }, nil); err != nil {
						return "", err
					}
				}
				return "", nil
			}, nil)
		}
	}
	// provisionInt is a build whose provision step now returns an int.
	provisionInt := func(e *durable.Engine) {
		durable.Register(e, "onboard", func(wctx durable.Context, in replaySignup) (string, error) {
			_, err := durable.Step(wctx, "provision", func(context.Context) (int, error) { panic("a step ran during a replay") }, nil)
			return "", err
		}, nil)
	}
	for _, c := range []struct {
		name     string
		register func(e *durable.Engine)
		file     string
		want     string // "" when the replay passes
	}{
		{"the code that recorded it", register("provision", "sleep", "charge"), file, ""},
		{"a step added after the recorded ones", register("provision", "sleep", "welcome", "charge"), file, ""},
		{"a renamed step", register("create-workspace", "sleep", "charge"), file,
			`testdata/replay/onboard.json: run "signup-42" of workflow "onboard" diverges at step 0: the history records "provision", the code calls "create-workspace"`},
		{"the sleep moved first", register("sleep", "provision", "charge"), file,
			`diverges at step 0: the history records "provision", the code calls "durable.sleep"`},
		{"an output type changed", provisionInt, file,
			`run "signup-42" of workflow "onboard" fails at step 0: durable: workflow "signup-42": cannot decode stored output of step 0 "provision"`},
		{"the workflow dropped", func(e *durable.Engine) {}, file, `workflow "onboard" is not registered on this engine`},
		{"a missing file", register(), "testdata/replay/nope.json", "no such file"},
		{"a malformed file", register(), "", `testdata/bad.json: durable: invalid argument: history: steps[0].status "ok" is not done, error or intent`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := offline(t)
			c.register(e)
			path := c.file
			if path == "" {
				dir := t.TempDir()
				path = filepath.Join(dir, "testdata", "bad.json")
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				b, err := os.ReadFile(file)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), `"status": "done"`, `"status": "ok"`, 1)), 0o644))
			}
			ft := &fatalT{TB: t}
			durabletest.ReplayFile(ft, e, path)
			if c.want == "" {
				require.Empty(t, ft.msgs)
				return
			}
			require.Len(t, ft.msgs, 1)
			require.Contains(t, ft.msgs[0], c.want)
			require.True(t, strings.HasPrefix(ft.msgs[0], "durabletest: "), ft.msgs[0])
		})
	}
}

// TestCheck: durabletest.Check fails the test with each in-flight run the
// build would stop, and passes a build that resumes them.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	cfg := &durable.Config{Schema: pgtest.Schema(t), AppVersion: "v1", Logger: slog.New(slog.DiscardHandler)}
	old, err := durable.New(pool, cfg)
	require.NoError(t, err)
	wf := durable.Register(old, "onboard", func(wctx durable.Context, in replaySignup) (string, error) {
		if _, err := durable.Step(wctx, "provision", func(context.Context) (string, error) { return "ws", nil }, nil); err != nil {
			return "", err
		}
		return "", durable.Sleep(wctx, time.Hour)
	}, nil)
	require.NoError(t, old.Launch(ctx))
	_, err = wf.Start(ctx, replaySignup{Email: "ada@example.com"}, &durable.StartOpts{ID: "signup-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := old.Inspect(ctx, "signup-1")
		require.NoError(t, err)
		return info.Executor == ""
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, old.Shutdown(ctx))

	for _, checkEmailFirst := range []bool{false, true} {
		e, err := durable.New(pool, cfg)
		require.NoError(t, err)
		registerReplayOnboard(e, checkEmailFirst)
		ft := &fatalT{TB: t}
		rep := durabletest.Check(ft, e, nil)
		if !checkEmailFirst {
			require.Empty(t, ft.msgs)
			require.Equal(t, 1, rep.Checked)
			continue
		}
		require.Len(t, ft.msgs, 1)
		require.Contains(t, ft.msgs[0], "durabletest: the build would stop 1 of 1 in-flight runs:")
		require.Contains(t, ft.msgs[0], `run "signup-1" of workflow "onboard" (app version v1): durable: non-deterministic workflow "signup-1": step 0 is recorded as "provision" but the code called "check-email"`)
	}
}
