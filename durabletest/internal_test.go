package durabletest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

// recordingTB records what the kit asks of a test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (t *recordingTB) Helper()                      {}
func (t *recordingTB) Skip(args ...any)             { t.skipped = fmt.Sprint(args...) }
func (t *recordingTB) Fatal(args ...any)            { t.failed = fmt.Sprint(args...) }
func (t *recordingTB) Fatalf(f string, args ...any) { t.failed = fmt.Sprintf(f, args...) }

// TestNoDatabase: without DATABASE_URL and without the server binaries,
// a test is skipped with one line saying what to install, or fails with
// DURABLE_TEST_REQUIRE_DB=1 or Options.RequireDB.
func TestNoDatabase(t *testing.T) {
	saved := cluster
	t.Cleanup(func() { cluster = saved })
	cluster = &clusterState{}
	cluster.once.Do(func() { cluster.err = errNoServer })
	t.Setenv(EnvURL, "")
	t.Setenv(EnvRequireDB, "")

	var rec recordingTB
	url(&rec, false)
	if rec.failed != "" || !strings.Contains(rec.skipped, "apt-get install postgresql") || strings.Contains(rec.skipped, "\n") {
		t.Fatalf("skipped %q, failed %q: want one line naming what to install, and a skip", rec.skipped, rec.failed)
	}
	rec = recordingTB{}
	url(&rec, true)
	if rec.skipped != "" || rec.failed == "" {
		t.Fatalf("with RequireDB: skipped %q, failed %q", rec.skipped, rec.failed)
	}
	t.Setenv(EnvRequireDB, "1")
	rec = recordingTB{}
	url(&rec, false)
	if rec.skipped != "" || rec.failed == "" {
		t.Fatalf("with %s=1: skipped %q, failed %q", EnvRequireDB, rec.skipped, rec.failed)
	}
}

// TestCrashResumedSleepWakesAtRecordedTime: a run whose process dies a
// day into a two-day sleep is resumed by a new engine on the same clock,
// and wakes at the wake-up time it recorded, not two days after the
// resume.
func TestCrashResumedSleepWakesAtRecordedTime(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	env := New(t, &Options{Start: start})
	register := func(e *durable.Engine) *durable.Workflow[int, time.Time] {
		return durable.Register(e, "sleeper", func(wctx durable.Context, _ int) (time.Time, error) {
			if err := durable.Sleep(wctx, 48*time.Hour); err != nil {
				return time.Time{}, err
			}
			return durable.Now(wctx)
		}, nil)
	}
	wf := register(env.Engine)
	env.Launch()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	env.Clock.Advance(24 * time.Hour)

	hard, stop := context.WithCancel(context.Background())
	stop()
	_ = env.Engine.Shutdown(hard) // a crash: the run stays owned by this executor ID
	e2 := env.newEngine(env.cfg, hooks.Knobs{Clock: env.Clock.f})
	wf2 := register(e2)
	launch(t, e2)
	t.Cleanup(func() { shutdown(e2) })
	if err := env.Clock.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	next, ok := env.Clock.Next()
	if want := start.Add(48 * time.Hour); !ok || !next.Equal(want) {
		t.Fatalf("the resumed sleep ends at %v, want its recorded wake-up %v", next, want)
	}
	if now, ok := env.Clock.Skip(); !ok || !now.Equal(start.Add(48*time.Hour)) {
		t.Fatalf("Skip moved the clock to %v (%v), want the wake-up %v", now, ok, start.Add(48*time.Hour))
	}
	h2, err := wf2.Handle(ctx, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	woke, err := h2.Result(ctx)
	if err != nil || !woke.Equal(start.Add(48*time.Hour)) {
		t.Fatalf("woke at %v (%v), want %v", woke, err, start.Add(48*time.Hour))
	}
}
