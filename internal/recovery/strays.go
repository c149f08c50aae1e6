package recovery

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// Strays. A database outage can cut a connection after a claim or a start
// committed but before its answer arrived: the run is this executor's, its
// lease is live, so no peer takes it over, and nothing executes it here.
// The engine notes such trouble (Config.NoteTrouble) and the next sweep
// looks for those runs; it also looks every strayCheckEvery, whatever
// happened.

// strayCheckEvery is how often the sweep looks for strays without being
// asked.
const strayCheckEvery = 5 * time.Minute

// launchGate tracks the places that make a run owned by this executor and
// then execute it (start, claim, dispatch): between the two, the run is
// neither in the database's past nor executing here. adoptStrays waits
// for the launches that may have written what it read, so it never
// mistakes a run about to be launched here for a stray.
type launchGate struct {
	mu       sync.Mutex
	last     int64
	inflight map[int64]struct{}
}

// enter marks a launch in flight; call the returned func when it is over.
func (g *launchGate) enter() func() {
	g.mu.Lock()
	g.last++
	n := g.last
	if g.inflight == nil {
		g.inflight = map[int64]struct{}{}
	}
	g.inflight[n] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.inflight, n)
		g.mu.Unlock()
	}
}

// mark returns the number of the last launch entered so far.
func (g *launchGate) mark() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// settled reports whether every launch up to mark is over.
func (g *launchGate) settled(mark int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for n := range g.inflight {
		if n <= mark {
			return false
		}
	}
	return true
}

// EnterLaunch marks a launch in flight: code that makes a run this
// executor's and then executes it calls it first, and the returned func
// once the run executes (or will not).
func (s *Service) EnterLaunch() func() { return s.launches.enter() }

// adoptStrays, when a stray check was asked for, resumes the pending runs
// owned by this executor that are not executing here and not parked. A
// queued one goes back to its queue (its slot must be taken through the
// queue's limits); any other is claimed again, with a new epoch, and
// executed in a recovery slot. It returns how many it found.
func (s *Service) adoptStrays(ctx context.Context) (int, error) {
	if !s.cfg.TakeStrayCheck() {
		return 0, nil
	}
	// Runs executing here before the read are not strays, even if they
	// finish before the check below: the read may still have seen them
	// pending. One that halts on a database error later marks the trouble
	// again, and the next sweep looks at it.
	executing := s.cfg.Executing()
	if err := s.cfg.ReleaseStopped(ctx, executing); err != nil {
		s.cfg.NoteTrouble()
		return 0, err
	}
	candidates, err := s.cfg.Queries.OwnUnparked(ctx, s.cfg.Pool, sysdb.OwnUnparkedParams{
		ExecutorID: s.cfg.ExecutorID, AppVersion: s.cfg.AppVersion, Names: s.cfg.Names()})
	if err != nil {
		s.cfg.NoteTrouble()
		return 0, err
	}
	if len(candidates) == 0 {
		return 0, nil
	}
	// A launch that wrote a row we read entered the gate before our read
	// ended: once those are over, their runs execute here (or are done).
	mark := s.launches.mark()
	for giveUp := time.Now().Add(5 * time.Second); !s.launches.settled(mark); {
		if time.Now().After(giveUp) {
			s.cfg.NoteTrouble()
			return 0, nil // a launch is slow (the database is away?): next sweep
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	var found []sysdb.OwnUnparkedRow
	for _, c := range candidates {
		if !executing[c.ID] && !s.cfg.IsExecuting(c.ID) {
			found = append(found, c)
		}
	}
	for _, c := range found {
		p := sysdb.StrayParams{ID: c.ID, Epoch: c.Epoch, ExecutorID: s.cfg.ExecutorID}
		if c.Queued {
			queue, ok, err := s.cfg.Queries.RequeueStray(ctx, s.cfg.Pool, p)
			if err != nil {
				s.cfg.NoteTrouble() // look again on the next sweep
			}
			if !ok {
				continue
			}
			s.cfg.Logger.Info("durable: stray run of this executor returned to its queue", "workflow_id", c.ID, "queue", queue)
			s.cfg.WakeQueue(queue)
			continue
		}
		if s.slots.take(1) == 0 {
			s.cfg.NoteTrouble() // no recovery slot free: look again on the next sweep
			continue
		}
		got, err := s.cfg.Queries.ClaimStray(ctx, s.cfg.Pool, p)
		if err != nil {
			s.cfg.NoteTrouble()
		}
		if err != nil || len(got) == 0 {
			s.slots.give(1)
			continue
		}
		s.cfg.Logger.Info("durable: resuming a stray run of this executor", "workflow_id", c.ID)
		if err := s.cfg.Launch(ctx, got); err != nil {
			return len(found), err
		}
	}
	return len(found), nil
}
