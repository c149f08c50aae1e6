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
)

// Knobs are the test and measurement knobs of one engine.
type Knobs struct {
	// Now replaces time.Now for the engine's schedules, so tests move time
	// without waiting. Defaults to time.Now.
	Now func() time.Time

	// NoGroupCommit writes every checkpoint, start and finish with its own
	// statement and commit instead of coalescing concurrent ones, to
	// measure what group commit is worth.
	NoGroupCommit bool

	// ResumeLoadBytes replaces the budget of recorded step outputs and
	// errors one query loads when claimed runs are resumed. Defaults to
	// 0: the engine's (16 MiB).
	ResumeLoadBytes int
	// OnResumeLoad, when set, is called after each load of claimed runs'
	// recorded steps with how many runs and bytes it read.
	OnResumeLoad func(runs, bytes int)
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
