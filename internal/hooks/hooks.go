// Package hooks holds the engine's test and measurement knobs, which stay
// out of the public Config: a test (or bench/) attaches them to the
// *durable.Config it passes to New, and New takes them.
//
//	cfg := &durable.Config{Schema: schema}
//	hooks.Set(cfg, hooks.Knobs{NoGroupCommit: true})
//	e, err := durable.New(pool, cfg)
package hooks

import (
	"sync"
	"time"

	"github.com/durable-go/durable/internal/clock"
)

// Knobs are the test and measurement knobs of one engine.
type Knobs struct {
	// Now replaces time.Now for the engine's schedules, so tests move time
	// without waiting. Defaults to time.Now.
	Now func() time.Time

	// Clock is the engine's clock (durabletest): it tells the time of
	// sleeps, Recv and GetEvent timeouts, run deadlines, the backoff of
	// step retries and schedules, and ends those waits when it moves.
	// Every run executing counts as a party of the clock (Enter, Leave),
	// idle while it waits on it. Waits never park a run on this clock:
	// the engine's ParkThreshold is ignored (a parked run is woken by the
	// database's time). Defaults to nil: the system clock.
	Clock *clock.Fake

	// Boundary, when set, is called by every run at its step boundaries
	// (see Boundary); a non-nil error halts the run there with that error
	// (the crash matrix of durabletest returns one wrapping ErrShutdown
	// after the engine was stopped hard: the run stops as in a crash).
	// Defaults to nil.
	Boundary func(Boundary) error

	// NoGroupCommit writes every checkpoint, start and finish with its own
	// statement and commit instead of coalescing concurrent ones, to
	// measure what group commit is worth.
	NoGroupCommit bool

	// ResumeLoadBytes replaces the budget of recorded step outputs and
	// errors one query loads when claimed runs are resumed. Defaults to
	// 0: the engine's (16 MiB).
	ResumeLoadBytes int
	// ResumeWindow replaces the number of recorded steps of a run an
	// execution holds at once. Defaults to 0: the engine's (512).
	ResumeWindow int
	// OnResumeWindow, when set, is called each time a resumed run's
	// execution holds a window of its recorded steps (its first one
	// included) with how many steps it holds.
	OnResumeWindow func(held int)
	// OnResumeLoad, when set, is called after each load of claimed runs'
	// recorded steps with how many runs and bytes it read.
	OnResumeLoad func(runs, bytes int)
	// OnHandOn, when set, is called once a finish statement that handed
	// queue slots on committed, with how many runs it claimed, before they
	// are launched (a crash test kills the process there).
	OnHandOn func(claimed int)
}

var attached sync.Map // config pointer -> Knobs

// Set attaches k to cfg, a *durable.Config, for the New call it is passed
// to.
func Set(cfg any, k Knobs) { attached.Store(cfg, k) }

// Take returns the knobs attached to cfg and detaches them; the zero
// Knobs when there are none.
func Take(cfg any) Knobs {
	if cfg == nil {
		return Knobs{}
	}
	k, _ := attached.LoadAndDelete(cfg)
	out, _ := k.(Knobs)
	return out
}

// Point is where at a step boundary a run calls Knobs.Boundary.
type Point int

const (
	// BeforeStep: the run is about to execute a position that has no
	// record (every earlier step of a sequential run is recorded).
	BeforeStep Point = iota
	// Call: a step function is about to be called (each attempt; for
	// counting executions).
	Call
	// BeforeCheckpoint: a plain step's function returned and its
	// checkpoint is not written yet.
	BeforeCheckpoint
	// BeforeFinish: the workflow function returned and the run's finish
	// is not written yet.
	BeforeFinish
	// Diverged: replay found another step recorded at Pos than the one
	// the code called (Name); the run fails with a NonDeterminismError.
	// The error Boundary returns is ignored.
	Diverged
)

// Boundary is one step boundary of a run.
type Boundary struct {
	RunID string
	Pos   int    // the step's position; for BeforeFinish, the next free one
	Name  string // the step's name; "" for BeforeFinish
	Point Point
}
