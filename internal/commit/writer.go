package commit

import (
	"context"
	"log/slog"

	"github.com/durable-go/durable/internal/sysdb"
)

// Config is what a Writer needs from the engine.
type Config struct {
	DB                     sysdb.DBTX // the engine's pool
	Queries                *sysdb.Queries
	AppVersion, ExecutorID string // of the runs this executor starts
	// Alone writes everything with its own statement and commit, in the
	// caller's context, instead of coalescing concurrent writes (to measure
	// what group commit is worth). Defaults to false.
	Alone bool
	// Ctx bounds the statements of the batches, which several callers
	// share: the engine's hard stop, not a caller's context.
	Ctx context.Context
	// IsTransient reports whether an error is worth retrying (a lost
	// connection): a batch that fails so goes back to every caller, who
	// retries; any other failure is retried item by item.
	IsTransient func(error) bool
	// RetryBG runs op until it succeeds, fails for good or ctx ends.
	RetryBG func(ctx context.Context, what string, op func(ctx context.Context) error) error
	// WakeParentOfFinished wakes the parent parked on run id if id is
	// finished: for a finish that touched no row, whose earlier try may
	// have committed without its wake-up being sent.
	WakeParentOfFinished func(ctx context.Context, id string)
	Log                  *slog.Logger
	// HandOn, if not nil, prepares the hand-on of the slots of a finish
	// batch's runs of queues (those that name one in HandOn) to the next
	// runs of those queues, in the finish statement
	// (dispatch.Dispatcher.HandOn): ok false when none qualifies, else
	// the statement runs in stmtCtx and after is called once it ended.
	// Defaults to nil: no hand-on.
	HandOn func(ctx context.Context, queues map[string]bool) (stmtCtx context.Context, p sysdb.HandOnParams,
		after func(claimed []sysdb.ClaimedRow, committed bool), ok bool)
	// OnBatch, if not nil, is told the size of each batch a flush writes
	// (1: a write that went alone), with its kind (Starts, Steps or
	// Finishes). Defaults to nil.
	OnBatch func(kind string, n int)
}

// The kinds of batch OnBatch is told of.
const (
	Starts   = "start"
	Steps    = "step"
	Finishes = "finish"
)

// Writer writes the runs' starts, step checkpoints and finishes, each kind
// through its own Batcher.
type Writer struct {
	cfg      Config
	starts   *Batcher[*sysdb.OwnedRun]
	steps    *Batcher[*sysdb.InsertStepParams]
	finishes *Batcher[*sysdb.FinishOneStepsParams]
}

// New returns a Writer.
func New(cfg Config) *Writer {
	w := &Writer{cfg: cfg}
	w.starts = NewBatcher(w.flushStarts)
	w.steps = NewBatcher(w.flushSteps)
	w.finishes = NewBatcher(w.flushFinishes)
	return w
}

// WriteStep records a step checkpoint; ok is false when it was not written
// (fenced, or already recorded: see sysdb's InsertStep).
func (w *Writer) WriteStep(ctx context.Context, s *sysdb.InsertStepParams) (ok bool, err error) {
	if w.cfg.Alone {
		return w.cfg.Queries.InsertStep(ctx, w.cfg.DB, *s)
	}
	return w.steps.Do(s)
}

func (w *Writer) flushSteps(items []*Item[*sysdb.InsertStepParams]) {
	ctx := w.cfg.Ctx
	if w.cfg.OnBatch != nil {
		w.cfg.OnBatch(Steps, len(items))
	}
	if len(items) == 1 {
		items[0].OK, items[0].Err = w.cfg.Queries.InsertStep(ctx, w.cfg.DB, *items[0].V)
		return
	}
	steps := make([]*sysdb.InsertStepParams, len(items))
	for i, it := range items {
		steps[i] = it.V
	}
	written, err := w.cfg.Queries.InsertSteps(ctx, w.cfg.DB, steps)
	SetWritten(items, written)
	if err != nil { // a row already recorded (see InsertSteps), a bad row, the connection
		WriteSingly(items, err, w.cfg.IsTransient, func(it *Item[*sysdb.InsertStepParams]) {
			it.OK, it.Err = w.cfg.Queries.InsertStep(ctx, w.cfg.DB, *it.V)
		})
	}
}

// WriteFinish records a run's outcome, with the checkpoints of its last
// steps; ok is false when the fenced update touched no row.
func (w *Writer) WriteFinish(ctx context.Context, f *sysdb.FinishOneStepsParams) (ok bool, err error) {
	if w.cfg.Alone {
		return w.finishOne(ctx, f)
	}
	return w.finishes.Do(f)
}

func (w *Writer) finishOne(ctx context.Context, f *sysdb.FinishOneStepsParams) (bool, error) {
	var row sysdb.FinishOneRow
	var finished bool
	var err error
	if len(f.Steps) == 0 {
		row, finished, err = w.cfg.Queries.FinishOne(ctx, w.cfg.DB, f.FinishOneParams)
	} else {
		row, finished, err = w.cfg.Queries.FinishOneSteps(ctx, w.cfg.DB, *f)
	}
	if err != nil {
		return false, err
	}
	if !finished {
		w.cfg.WakeParentOfFinished(ctx, f.ID)
		return false, nil
	}
	if row.Notify { // a waiter in another process asked; the finish is committed
		if err := w.cfg.Queries.NotifyDone(ctx, w.cfg.DB, f.ID); err != nil {
			w.cfg.Log.Warn("durable: notify finish", "workflow_id", f.ID, "err", err) // its poll will see it
		}
	}
	if row.Watched { // a Select may be parked on this run's finish
		w.wakeWatchers(ctx, []string{f.ID})
	}
	if row.ParentID != "" { // a parent parked in Await on this run wakes up
		// The finish is committed: a lost wake-up would leave the parent
		// parked for good, so ride out an outage here.
		err := w.cfg.RetryBG(ctx, "wake parent", func(ctx context.Context) error {
			_, err := w.cfg.Queries.WakeParent(ctx, w.cfg.DB, sysdb.WakeParentParams{ChildID: f.ID, ParentID: row.ParentID})
			return err
		})
		if err != nil {
			w.cfg.Log.Warn("durable: wake parent", "workflow_id", f.ID, "parent", row.ParentID, "err", err)
		}
	}
	return true, nil
}

func (w *Writer) flushFinishes(items []*Item[*sysdb.FinishOneStepsParams]) {
	ctx := w.cfg.Ctx
	if w.cfg.OnBatch != nil {
		w.cfg.OnBatch(Finishes, len(items))
	}
	handOn := w.handOnQueues(items)
	if len(items) == 1 && handOn == nil {
		items[0].OK, items[0].Err = w.finishOne(ctx, items[0].V)
		return
	}
	runs := make([]*sysdb.FinishOneParams, len(items))
	var steps []*sysdb.InsertStepParams
	for i, it := range items {
		runs[i] = &it.V.FinishOneParams
		steps = append(steps, it.V.Steps...)
	}
	var written []bool
	var watched []string
	var err error
	handedOn := false
	if handOn != nil {
		written, watched, handedOn = w.finishHandingOn(ctx, items, handOn, runs, steps)
	}
	switch {
	case handedOn:
	case steps == nil:
		written, watched, err = w.cfg.Queries.FinishWorkflows(ctx, w.cfg.DB, runs)
	default:
		written, watched, err = w.cfg.Queries.FinishStepsMany(ctx, w.cfg.DB, sysdb.FinishStepsManyParams{Runs: runs, Steps: steps})
	}
	SetWritten(items, written)
	if err != nil {
		WriteSingly(items, err, w.cfg.IsTransient, func(it *Item[*sysdb.FinishOneStepsParams]) {
			it.OK, it.Err = w.finishOne(ctx, it.V)
		})
		return
	}
	for _, it := range items {
		if !it.OK {
			w.cfg.WakeParentOfFinished(ctx, it.V.ID)
		}
	}
	if watched != nil {
		w.wakeWatchers(ctx, watched)
	}
}

// handOnQueues returns the queues named by the items that may hand their
// slots on (HandOn), or nil: none, or no Config.HandOn.
func (w *Writer) handOnQueues(items []*Item[*sysdb.FinishOneStepsParams]) map[string]bool {
	if w.cfg.HandOn == nil {
		return nil
	}
	var queues map[string]bool
	for _, it := range items {
		if it.V.HandOn != "" {
			if queues == nil {
				queues = map[string]bool{}
			}
			queues[it.V.HandOn] = true
		}
	}
	return queues
}

// finishHandingOn writes the finishes runs (with steps) of items with the
// hand-on of the slots of queues (Config.HandOn) in one statement, and
// reports whether it did; on an error it did not, and the caller writes
// them without one.
func (w *Writer) finishHandingOn(ctx context.Context, items []*Item[*sysdb.FinishOneStepsParams], queues map[string]bool,
	runs []*sysdb.FinishOneParams, steps []*sysdb.InsertStepParams) (written []bool, watched []string, ok bool) {
	stmtCtx, p, after, ok := w.cfg.HandOn(ctx, queues)
	if !ok {
		return nil, nil, false
	}
	for _, it := range items {
		if it.V.HandOn != "" {
			p.IDs = append(p.IDs, it.V.ID)
		}
	}
	written, watched, claimed, err := w.cfg.Queries.FinishHandOn(stmtCtx, w.cfg.DB, runs, steps, p)
	after(claimed, err == nil)
	return written, watched, err == nil
}

// wakeWatchers wakes the runs parked in a Select on the finish of runs
// ids, whose finish committed: a lost wake-up would leave such a run
// parked until its timer, so ride out an outage here.
func (w *Writer) wakeWatchers(ctx context.Context, ids []string) {
	err := w.cfg.RetryBG(ctx, "wake watchers", func(ctx context.Context) error {
		return w.cfg.Queries.WakeWatchers(ctx, w.cfg.DB, ids)
	})
	if err != nil {
		w.cfg.Log.Warn("durable: wake the runs waiting for a finish", "workflow_ids", ids, "err", err)
	}
}

// WriteStart inserts a run owned by this executor; ok is false when its ID
// already exists.
func (w *Writer) WriteStart(ctx context.Context, r *sysdb.OwnedRun) (ok bool, err error) {
	if w.cfg.Alone {
		return w.startOne(ctx, r)
	}
	return w.starts.Do(r)
}

func (w *Writer) startOne(ctx context.Context, r *sysdb.OwnedRun) (bool, error) {
	return w.cfg.Queries.InsertOwned(ctx, w.cfg.DB, sysdb.InsertOwnedParams{AppVersion: w.cfg.AppVersion, ExecutorID: w.cfg.ExecutorID, Run: r})
}

func (w *Writer) flushStarts(items []*Item[*sysdb.OwnedRun]) {
	ctx := w.cfg.Ctx
	if w.cfg.OnBatch != nil {
		w.cfg.OnBatch(Starts, len(items))
	}
	if len(items) == 1 {
		items[0].OK, items[0].Err = w.startOne(ctx, items[0].V)
		return
	}
	runs := make([]*sysdb.OwnedRun, len(items))
	for i, it := range items {
		runs[i] = it.V
	}
	written, err := w.cfg.Queries.InsertWorkflows(ctx, w.cfg.DB,
		sysdb.InsertWorkflowsParams{AppVersion: w.cfg.AppVersion, ExecutorID: w.cfg.ExecutorID, Runs: runs})
	SetWritten(items, written)
	if err != nil {
		WriteSingly(items, err, w.cfg.IsTransient, func(it *Item[*sysdb.OwnedRun]) { it.OK, it.Err = w.startOne(ctx, it.V) })
	}
}
