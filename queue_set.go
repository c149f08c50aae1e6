package durable

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/internal/dispatch"
	"github.com/durable-go/durable/internal/sysdb"
)

// queueSet holds the queues this engine works, the dispatcher that starts
// their runs, and the notifier that tells other processes of new work.
type queueSet struct {
	e          *Engine
	byName     map[string]*Queue    // registered before Launch (under e.mu), fixed after
	notifier   *dispatch.Notifier   // wakes the queues' dispatchers in other processes
	dispatcher *dispatch.Dispatcher // the queues' dispatch loops; set at Launch
}

func newQueueSet(e *Engine) *queueSet {
	qs := &queueSet{e: e, byName: map[string]*Queue{}}
	qs.notifier = dispatch.NewNotifier(qs.sendNotify)
	return qs
}

// wake makes the dispatcher of the queue named name look for work, if
// this process works that queue.
func (qs *queueSet) wake(name string) {
	if q := qs.byName[name]; q != nil {
		q.wake()
	}
}

// ready tells dispatchers that q has new work, after an enqueue has
// committed: this process's own dispatcher directly, the others by a
// notification (coalesced: see dispatch.Notifier).
func (qs *queueSet) ready(q *Queue) {
	if q.e == qs.e {
		q.wake()
	}
	if qs.e.cfg.PollOnly {
		return
	}
	qs.notifier.Notify(q.name)
}

func (qs *queueSet) sendNotify(name string) {
	if err := qs.e.q.Notify(qs.e.hardCtx, qs.e.pool, "q:"+name); err != nil && qs.e.hardCtx.Err() == nil {
		qs.e.log.Warn("durable: notify queue", "queue", name, "err", err)
	}
}

// declare writes the declared settings of every queue worked here.
func (qs *queueSet) declare(ctx context.Context) error {
	for _, q := range qs.byName {
		declared, _ := json.Marshal(q.opts)
		if err := qs.e.qq.Declare(ctx, qs.e.pool, sysdb.QueueDeclareParams{Name: q.name, Settings: q.opts.settings(),
			Declared: string(declared)}); err != nil {
			return fmt.Errorf("declare queue %q: %w", q.name, err)
		}
	}
	return nil
}

// newDispatcher returns the dispatcher of the queues worked here, at
// Launch once the workflows are registered.
func (qs *queueSet) newDispatcher() *dispatch.Dispatcher {
	var lanes []*dispatch.Queue
	for _, q := range qs.byName {
		lanes = append(lanes, q.lane)
	}
	return dispatch.New(dispatch.Config{
		Pool:         qs.e.pool,
		Queries:      qs.e.qq,
		Partitions:   qs.e.pq,
		ExecutorID:   qs.e.cfg.ExecutorID,
		AppVersion:   qs.e.cfg.AppVersion,
		Workflows:    qs.e.names,
		Queues:       lanes,
		PollInterval: qs.e.listener.interval,
		Launch: func(ctx context.Context, lane *dispatch.Queue, got []sysdb.ClaimedRow) error {
			return qs.e.runner.startClaimed(ctx, got, qs.byName[lane.Name()])
		},
		Launching:    qs.e.recov.EnterLaunch,
		DBTrouble:    qs.e.lease.NoteTrouble,
		JudgesLeases: qs.e.lease.JudgesLeases,
		Requeued:     qs.e.met.requeuedFunc(),
		Logger:       qs.e.log,
	})
}

// handOn prepares the hand-on of a finish batch's queue slots
// (dispatch.Dispatcher.HandOn).
func (qs *queueSet) handOn(ctx context.Context, queues map[string]bool) (context.Context, sysdb.HandOnParams, func([]sysdb.ClaimedRow, bool), bool) {
	if qs.dispatcher == nil {
		return ctx, sysdb.HandOnParams{}, nil, false
	}
	stmtCtx, p, after, ok := qs.dispatcher.HandOn(ctx, queues)
	if on := qs.e.knobs.OnHandOn; ok && on != nil {
		launch := after
		after = func(claimed []sysdb.ClaimedRow, committed bool) {
			if committed && len(claimed) > 0 {
				on(len(claimed))
			}
			launch(claimed, committed)
		}
	}
	return stmtCtx, p, after, ok
}

// requeue returns queued runs without a live owner to their queues (with
// own, also this executor's runs left by its previous incarnation; see
// dispatch.Dispatcher.Requeue).
func (qs *queueSet) requeue(ctx context.Context, own bool) error {
	return qs.dispatcher.Requeue(ctx, own)
}

// enqueue enqueues a run of def on q under id, unless the ID exists
// (created false); a run of another workflow under id is a
// [*ConflictError]. It is the untyped path used by schedules.
func (qs *queueSet) enqueue(ctx context.Context, def *wfDef, q *Queue, id string, input, tags []byte) (created bool, err error) {
	sp := qs.e.tr.enqueue(ctx, def.name, id, q.name)
	defer func() { sp.end(err) }()
	res, err := qs.e.qq.Enqueue(ctx, qs.e.pool, sysdb.EnqueueParams{ID: id, Workflow: def.name, AppVersion: qs.e.cfg.AppVersion,
		Input: input, Queue: q.name, TraceContext: sp.traceparent(), Tags: tags})
	if err != nil {
		return false, fmt.Errorf("durable: enqueue workflow %q id %q on queue %q: %w", def.name, id, q.name, err)
	}
	if !res.QueueFound {
		return false, fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	if res.Inserted {
		qs.e.met.started(ctx, def.name, startSchedule)
		qs.ready(q)
		return true, nil
	}
	return false, checkExisting(ctx, qs.e.q, qs.e.pool, id, def.name, nil, "")
}
