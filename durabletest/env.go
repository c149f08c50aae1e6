package durabletest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/hooks"
)

// Options configure [New]. The zero value works.
type Options struct {
	// Config is the engine's configuration. New fills Schema (a new
	// schema of the test's) and, when unset, ExecutorID (a new one) and
	// Logger (one that discards). Defaults to nil: the engine's defaults.
	Config *durable.Config

	// Start is the time the test's clock starts at.
	// Defaults to the time New is called.
	Start time.Time

	// AutoSkip makes the clock move on its own: as soon as every run
	// executing waits on the clock (a sleep, a Recv or GetEvent timeout,
	// a retry's backoff, a deadline), it jumps to the earliest end of
	// those waits, so a run that sleeps two days ends at once. A Recv
	// then times out at once unless its message was sent before, so
	// a test that sends messages to a waiting run moves the clock itself
	// (Clock.Advance). Defaults to false: the clock moves only when told.
	AutoSkip bool

	// RealClock gives the engine the system clock instead of the test's:
	// Env.Clock is nil, and long waits park runs as in production.
	// Defaults to false.
	RealClock bool

	// RequireDB fails the test instead of skipping it when no Postgres
	// can be had (see URL); DURABLE_TEST_REQUIRE_DB=1 does the same for
	// every test. Defaults to false.
	RequireDB bool
}

// Env is an engine on a schema of its own, with a clock the test moves.
// Register the workflows on Env.Engine, then call Launch; the engine is
// shut down and the schema dropped when the test ends.
type Env struct {
	// Engine is the engine, not launched yet by New.
	Engine *durable.Engine
	// Clock is the engine's clock; nil with Options.RealClock.
	Clock *Clock
	// Pool is the pool the engine uses, closed when the test ends.
	Pool *pgxpool.Pool
	// Schema is the engine's schema, dropped when the test ends.
	Schema string

	t     testing.TB
	cfg   durable.Config // the engine's, for the engines of the crash matrix
	start time.Time      // the clock's start
	real  bool
}

// New returns an engine on a new schema of the test's Postgres (see
// URL: without one, the test is skipped or fails), with a clock that
// moves only when the test says so (see Options). opts may be nil.
//
// Under the test's clock, sleeps, Recv and GetEvent timeouts, run
// deadlines (StartOpts.Timeout, EnqueueOpts.Timeout), the backoff of step
// retries and schedules follow Env.Clock. Waits are kept in memory
// (Config.ParkThreshold does not apply): a parked run would be woken by
// the database's time, which the test does not move. A run resumed after
// a crash still wakes at the wake-up time it recorded, on the test's
// clock.
func New(t testing.TB, opts *Options) *Env {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	url := url(t, o.RequireDB)
	env := &Env{t: t, Schema: schemaOn(t, url), real: o.RealClock}
	env.Pool = poolOn(t, url)
	if o.Config != nil {
		env.cfg = *o.Config
	}
	env.cfg.Schema = env.Schema
	if env.cfg.ExecutorID == "" {
		env.cfg.ExecutorID = "durabletest-" + randomHex(4)
	}
	if env.cfg.Logger == nil {
		env.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	env.start = o.Start
	if env.start.IsZero() {
		env.start = time.Now()
	}
	var fake *clock.Fake
	if !o.RealClock {
		fake = clock.NewFake(env.start)
		fake.SetAuto(o.AutoSkip)
		env.Clock = &Clock{f: fake}
	}
	env.Engine = env.newEngine(env.cfg, hooks.Knobs{Clock: fake})
	t.Cleanup(func() { shutdown(env.Engine) })
	return env
}

// newEngine makes an engine of cfg with knobs, failing the test on an
// error.
func (env *Env) newEngine(cfg durable.Config, k hooks.Knobs) *durable.Engine {
	env.t.Helper()
	c := cfg
	hooks.Set(&c, k)
	e, err := durable.New(env.Pool, &c)
	if err != nil {
		env.t.Fatalf("durabletest: %v", err)
	}
	return e
}

// Launch launches the engine (register the workflows first), failing the
// test on an error.
func (env *Env) Launch() {
	env.t.Helper()
	launch(env.t, env.Engine)
}

func launch(t testing.TB, e *durable.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Launch(ctx); err != nil {
		t.Fatalf("durabletest: launch: %v", err)
	}
}

// shutdown stops e, waiting up to 10s for its runs to reach a step
// boundary.
func shutdown(e *durable.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
}

// Clock is the clock of a test's engine. It moves only when the test says
// so (Advance, Skip), or on its own with Options.AutoSkip. It is safe
// for concurrent use.
type Clock struct{ f *clock.Fake }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.f.Now() }

// Advance moves the clock forward by d, ends the waits (sleeps, timeouts,
// backoffs) and deadlines whose time came, wakes the schedules, and
// returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time { return c.f.Advance(d) }

// Skip moves the clock to the earliest end of the pending waits and
// returns the new time; ok is false (and the clock stays) when no wait
// is pending.
func (c *Clock) Skip() (now time.Time, ok bool) {
	next, ok := c.f.Next()
	if !ok {
		return c.f.Now(), false
	}
	c.f.Set(later(next, c.f.Now()))
	return c.f.Now(), true
}

// Next returns the earliest end of the pending waits (a sleep's wake-up,
// a timeout, a deadline); ok is false when no wait has one.
func (c *Clock) Next() (t time.Time, ok bool) { return c.f.Next() }

// Waiting returns how many waits on the clock are pending: runs sleeping,
// waiting for a message or a child, or backing off before a retry, and
// callers of GetEvent.
func (c *Clock) Waiting() int { return c.f.Waiting() }

// BlockUntil returns once at least n waits are pending on the clock
// (typically: the run under test reached its Sleep), or ctx's error.
// Advance the clock after it, not before: a Sleep records its wake-up
// time from the clock when it begins.
func (c *Clock) BlockUntil(ctx context.Context, n int) error { return c.f.BlockUntil(ctx, n) }

// SetAutoSkip turns Options.AutoSkip on or off.
func (c *Clock) SetAutoSkip(on bool) { c.f.SetAuto(on) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
