package durable

import (
	"context"
	"fmt"
	"sync"

	"github.com/durable-go/durable/internal/sysdb"
)

// resumeWindow is how many recorded steps of a run an execution holds at
// once: a resumed run reads its history one window at a time as its
// replay reaches it, so its memory is one window's, not the whole run's.
const resumeWindow = 512

// recorded is the history an execution of a run replays: the steps
// recorded before it started, held one window at a time. Positions are
// taken and looked up under its lock, in order, so the window only moves
// forward: reaching the end of the window with more recorded beyond it
// reads the next window, from that position, in place of the last one.
type recorded struct {
	mu   sync.Mutex
	recs map[int]*stepRecord // the window
	hi   int                 // positions below hi were read
	more bool                // steps are recorded from hi on, not read yet
	// count is how many steps were recorded before this execution (steps
	// cut off by a window included).
	count int
	// intents holds the positions of intent records read (a step that
	// began and never recorded its outcome): its execution now is a resumed
	// one (StepInfo.Resumed), looked up after the window may have moved,
	// under imu (mu is held across reads of the database). There are few:
	// only the steps in flight when an execution stopped.
	imu     sync.Mutex
	intents map[int]bool
	// read reads the window from position from on; nil for a history
	// read whole.
	read func(from int) (window, error)
	held func(n int) // if set, called with each window's size (hooks.Knobs.OnResumeWindow)
}

// window is one read of a run's recorded steps.
type window struct {
	recs  map[int]*stepRecord
	hi    int  // one past the last position read (0: none)
	more  bool // steps are recorded beyond it
	count int  // a first window's: steps the run has recorded (else the window's)
}

// wholeHistory is a history held in full (a replay of a history read for
// inspection, or a run with nothing recorded).
func wholeHistory(steps map[int]*stepRecord) *recorded {
	h := &recorded{count: len(steps)}
	h.set(window{recs: steps})
	return h
}

func (h *recorded) set(w window) {
	h.recs, h.hi, h.more = w.recs, w.hi, w.more
	if h.held != nil {
		h.held(len(h.recs))
	}
	h.imu.Lock()
	defer h.imu.Unlock()
	for pos, rec := range w.recs {
		if rec.status == stepIntent {
			if h.intents == nil {
				h.intents = map[int]bool{}
			}
			h.intents[pos] = true
		}
	}
}

// take assigns the next position of run r to a durable call and returns
// the record at it, if any.
func (h *recorded) take(r *run) (int, *stepRecord, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pos := int(r.next.Add(1)) - 1
	rec, err := h.atLocked(pos)
	return pos, rec, err
}

// at returns the record at pos, if any, without taking the position.
func (h *recorded) at(pos int) (*stepRecord, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.atLocked(pos)
}

func (h *recorded) atLocked(pos int) (*stepRecord, error) {
	if pos >= h.hi && h.more {
		w, err := h.read(pos)
		if err != nil {
			return nil, err
		}
		h.set(w)
	}
	return h.recs[pos], nil
}

// intent reports whether the record at pos was an intent.
func (h *recorded) intent(pos int) bool {
	h.imu.Lock()
	defer h.imu.Unlock()
	return h.intents[pos]
}

// replayed is how many steps were recorded before this execution.
func (h *recorded) replayed() int { return h.count }

// add adds a row LoadStepsMany read to w.
func (w *window) add(s sysdb.LoadStepsManyRow) {
	w.more, w.count = s.More, s.Recorded
	if !s.HasStep {
		return
	}
	if w.recs == nil {
		w.recs = map[int]*stepRecord{}
	}
	w.recs[s.Pos] = &stepRecord{pos: s.Pos, name: s.Name, status: s.Status, output: s.Output, err: s.Error, attempts: s.Attempts}
	w.hi = s.Pos + 1
}

// windowed is a history read one window at a time: first, then the next
// ones by read as the replay reaches them. held is the OnResumeWindow knob.
func windowed(first window, read func(from int) (window, error), held func(int)) *recorded {
	h := &recorded{count: first.count, read: read, held: held}
	h.set(first)
	return h
}

// readWindows reads with db one window of recorded steps, from position
// from on, of each of the first runs of ids whose windows fit the load
// budget (at least the first run): n is how many runs it read, bytes the
// outputs and errors it read.
func readWindows(ctx context.Context, e *Engine, db sysdb.DBTX, ids []string, from int) (out map[string]window, n, bytes int, err error) {
	out = make(map[string]window, len(ids))
	err = e.q.LoadStepsMany(ctx, db, windowParams(e, ids, from), func(s sysdb.LoadStepsManyRow) {
		n = max(n, s.Run+1)
		w := out[ids[s.Run]]
		w.add(s)
		out[ids[s.Run]] = w
		bytes += len(s.Output) + len(s.Error)
	})
	if err == nil && n == 0 && len(ids) > 0 {
		err = fmt.Errorf("load steps: no run read of %d", len(ids)) // the first is always read
	}
	return out, n, bytes, err
}

// readWindow reads with db the window of run id's recorded steps from
// position from on.
func readWindow(ctx context.Context, e *Engine, db sysdb.DBTX, id string, from int) (window, error) {
	ws, _, _, err := readWindows(ctx, e, db, []string{id}, from)
	return ws[id], err
}

// resumedHistory is the history of run r, resumed with its first window
// read: the next windows are read as its replay reaches them, riding out
// an outage as a checkpoint does.
func (rn *runner) resumedHistory(r *run, first window) *recorded {
	return windowed(first, func(from int) (window, error) {
		var w window
		err := r.retryDB("read recorded steps", func(ctx context.Context) (err error) {
			w, err = readWindow(ctx, rn.e, rn.e.pool, r.id, from)
			return err
		})
		if err != nil {
			return window{}, r.halt(fmt.Errorf("workflow %q: read recorded steps from position %d: %w", r.id, from, err))
		}
		return w, nil
	}, rn.e.knobs.OnResumeWindow)
}

// windowParams are the arguments of a read of one window of the recorded
// steps of ids from position from on.
func windowParams(e *Engine, ids []string, from int) sysdb.LoadStepsManyParams {
	budget, size := e.knobs.ResumeLoadBytes, e.knobs.ResumeWindow
	if budget == 0 {
		budget = resumeLoadBytes
	}
	if size == 0 {
		size = resumeWindow
	}
	return sysdb.LoadStepsManyParams{WorkflowIDs: ids, Budget: budget, Window: size, From: from}
}
