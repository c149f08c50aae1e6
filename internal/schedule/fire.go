package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/sysdb"
)

// errChanged: the row changed since it was read (another executor
// advanced it, or a change at run time); read it again.
var errChanged = errors.New("schedule changed concurrently")

// fire starts the due ticks of one schedule and moves its cursor past
// each. It returns the next tick to wait for (zero: none).
func (s *Service) fire(ctx context.Context, d *Def, row *sysdb.ScheduleRow, ts *Spec) (time.Time, error) {
	ticks, skipped := ts.due(row.Cursor, s.now(), row.CatchUp+1)
	version := row.Version
	if len(ticks) > 0 {
		// The row was read at the start of the pass, maybe before a change
		// that committed before the clock reached these ticks: read it again
		// (after the clock), so no run starts under a spec already replaced.
		fresh, err := s.get(ctx, row.Name)
		if err != nil {
			return time.Time{}, err
		}
		if fresh.Version != version {
			return time.Time{}, errChanged
		}
	}
	for i, tick := range ticks {
		if err := s.cfg.CanStart(); err != nil {
			return time.Time{}, err
		}
		id := tickID(row.Name, tick)
		runID, err := s.start(ctx, d, id, tick, ts.loc)
		if err != nil {
			return time.Time{}, err
		}
		var ok bool
		version, ok, err = s.cfg.Queries.Advance(ctx, s.cfg.DB, sysdb.ScheduleAdvanceParams{Name: row.Name, Version: version,
			Tick: tick, NextTick: ts.next(tick), RunID: runID})
		if err != nil {
			return time.Time{}, fmt.Errorf("advance schedule %q past %v: %w", row.Name, tick, err)
		}
		if !ok {
			return time.Time{}, errChanged
		}
		s.signals.TickFired.Signal(id)
		if i == 0 && skipped {
			// Logged by the executor whose compare-and-set won, only.
			s.cfg.Log.Warn("durable: schedule skipped missed ticks (ScheduleOpts.CatchUp)",
				"schedule", row.Name, "after", row.Cursor, "resumed_at", tick, "catch_up", row.CatchUp)
		}
	}
	cursor := row.Cursor
	if len(ticks) > 0 {
		cursor = ticks[len(ticks)-1]
	}
	return ts.next(cursor), nil
}

// start starts the run of one tick and returns its workflow ID, or "" when
// the tick is given up (its input cannot be made, or its ID belongs to a
// run of another workflow): both would fail the same way on every try.
// An error is worth retrying.
func (s *Service) start(ctx context.Context, d *Def, id string, tick time.Time, loc *time.Location) (string, error) {
	log := s.cfg.Log
	input, err := d.Input(tick.In(loc))
	if err != nil {
		log.Error("durable: schedule tick skipped: its input cannot be made", "schedule", d.Name, "tick", tick, "err", err)
		return "", nil
	}
	var created bool
	if d.Queue != "" {
		created, err = s.cfg.Enqueue(ctx, d.Workflow, d.Queue, id, input, d.Tags)
	} else {
		created, err = s.cfg.Start(ctx, d.Workflow, id, input, d.Tags)
	}
	if errors.Is(err, errs.WorkflowConflict) {
		log.Error("durable: schedule tick skipped: its workflow ID is taken by a run of another workflow", "schedule", d.Name, "workflow_id", id, "err", err)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if created {
		log.Debug("durable: scheduled run started", "schedule", d.Name, "workflow_id", id)
	}
	return id, nil
}

// fireTriggers starts the manual ticks stored for schedule row, declared
// here as d, and removes them. Two executors may both start one: its
// workflow ID makes that one run.
func (s *Service) fireTriggers(ctx context.Context, d *Def, row *sysdb.ScheduleRow) {
	if len(row.Triggers) == 0 {
		return
	}
	ts, err := s.specs.spec(row.Spec, row.Location)
	if err != nil {
		return // reported by the caller's pass
	}
	for _, tick := range row.Triggers {
		if s.cfg.CanStart() != nil {
			return
		}
		if _, err := s.start(ctx, d, manualID(row.Name, tick), tick, ts.loc); err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("durable: manual schedule tick not started; retrying", "schedule", row.Name, "tick", tick, "err", err)
			}
			continue
		}
		if err := s.cfg.Queries.TriggerDone(ctx, s.cfg.DB, sysdb.ScheduleTriggerParams{Name: row.Name, Tick: tick}); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("durable: clear manual schedule tick", "schedule", row.Name, "tick", tick, "err", err)
		}
	}
}
