package recovery

import "sync"

// Bounded resume. A run claimed by recovery (its own at Launch, taken over
// from a dead executor, unowned, or parked and due) replays its recorded
// steps, so it holds them in memory while it executes. Recovery slots
// (Config.Slots) keep a large backlog from loading everything at once: a
// claim takes at most as many runs as slots are free, and each run gives
// its slot back when its execution here ends. The sweeper claims more
// then; at Launch, the own runs beyond the slots are handed back unowned,
// for any executor to claim.

// slots are the free recovery slots.
type slots struct {
	mu      sync.Mutex
	free    int
	starved bool // a claim was held back by the slots: the next slot given back wakes the sweeper
}

// take takes up to n free slots and returns how many it took.
func (s *slots) take(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(n, s.free)
	s.free -= k
	if k == 0 {
		s.starved = true
	}
	return k
}

// give gives n slots back; wake reports that the sweeper was held back by
// the slots and should look again.
func (s *slots) give(n int) (wake bool) {
	if n == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free += n
	wake, s.starved = s.starved, false
	return wake
}

// starve notes that a claim took all the slots it had: more runs may be
// waiting for one.
func (s *slots) starve() {
	s.mu.Lock()
	s.starved = true
	s.mu.Unlock()
}

// TakeSlots takes up to n free recovery slots and returns how many it
// took; each must be given back (GiveSlots) when its run's execution here
// ends, or at once if the run does not start.
func (s *Service) TakeSlots(n int) int { return s.slots.take(n) }

// GiveSlots gives n recovery slots back, waking the sweeper if it waits
// for them.
func (s *Service) GiveSlots(n int) {
	if s.slots.give(n) {
		s.Wake()
	}
	s.signals.SlotsFreed.Signal(n)
}
