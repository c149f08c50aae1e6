package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/sysdb"
)

// The changes and reads asked for at run time. Schedule names are checked
// by the caller.

// List returns the stored schedules, by name, those of every binary
// sharing the database.
func (s *Service) List(ctx context.Context) ([]sysdb.ScheduleRow, error) {
	return s.cfg.Queries.List(ctx, s.cfg.DB)
}

// Pause stops the ticks of schedule name on every executor until Resume.
func (s *Service) Pause(ctx context.Context, name string) error {
	return s.update(ctx, name, "pause", func(r *sysdb.ScheduleRow) (bool, error) {
		if r.Paused {
			return false, nil
		}
		r.Paused, r.NextTick = true, time.Time{}
		return true, nil
	})
}

// Resume resumes a paused schedule; ticks count from now.
func (s *Service) Resume(ctx context.Context, name string) error {
	return s.update(ctx, name, "resume", func(r *sysdb.ScheduleRow) (bool, error) {
		if !r.Paused {
			return false, nil
		}
		ts, err := s.specs.spec(r.Spec, r.Location)
		if err != nil {
			return false, err
		}
		r.Paused, r.Cursor = false, s.cursorNow()
		r.NextTick = ts.next(r.Cursor)
		return true, nil
	})
}

// SetSpec changes the spec of schedule name, read in loc (nil: the zone
// of spec's prefix, else the schedule's); ticks count from now. A bad
// spec or zone fails with errs.InvalidArgument and changes nothing.
func (s *Service) SetSpec(ctx context.Context, name, spec string, loc *time.Location) error {
	return s.update(ctx, name, "set spec", func(r *sysdb.ScheduleRow) (bool, error) {
		l := loc
		if l == nil && !HasZonePrefix(spec) {
			var err error
			if l, err = s.specs.location(r.Location); err != nil {
				return false, err
			}
		}
		ts, err := ParseSpec(spec, l)
		if err != nil {
			return false, fmt.Errorf("%w: schedule %q: %v", errs.InvalidArgument, name, err)
		}
		r.Spec, r.Location, r.Cursor = spec, ts.loc.String(), s.cursorNow()
		r.NextTick = time.Time{}
		if !r.Paused {
			r.NextTick = ts.next(r.Cursor)
		}
		return true, nil
	})
}

// Delete deletes schedule name.
func (s *Service) Delete(ctx context.Context, name string) error {
	found, err := s.cfg.Queries.Delete(ctx, s.cfg.DB, name)
	if err != nil {
		return fmt.Errorf("durable: delete schedule %q: %w", name, err)
	}
	if !found {
		return fmt.Errorf("%w: %q", errs.ScheduleNotFound, name)
	}
	s.Wake()
	return nil
}

// Trigger starts a run of schedule name by hand for tick (zero: now) and
// returns its workflow ID. When this binary declares the schedule and runs
// may start, the run starts here; otherwise the tick is stored for an
// executor that declares it.
func (s *Service) Trigger(ctx context.Context, name string, tick time.Time) (string, error) {
	if tick.IsZero() {
		tick = s.now()
	}
	if s.def(name) == nil || s.cfg.CanStart() != nil {
		return s.requestTrigger(ctx, name, tick)
	}
	d, _, ts, err := s.resolve(ctx, name)
	if err != nil {
		return "", err
	}
	id := manualID(name, tick)
	input, err := d.Input(tick.In(ts.loc))
	if err != nil {
		return "", err
	}
	if _, err := s.cfg.Start(ctx, d.Workflow, id, input, d.Tags); err != nil {
		return "", err
	}
	return id, nil
}

// requestTrigger stores a manual tick for an executor that declares
// schedule name to start.
func (s *Service) requestTrigger(ctx context.Context, name string, tick time.Time) (string, error) {
	tick = tick.UTC().Truncate(time.Microsecond) // as stored
	found, err := s.cfg.Queries.RequestTrigger(ctx, s.cfg.DB, sysdb.ScheduleTriggerParams{Name: name, Tick: tick})
	if err != nil {
		return "", fmt.Errorf("durable: trigger schedule %q: %w", name, err)
	}
	if !found {
		return "", fmt.Errorf("%w: %q", errs.ScheduleNotFound, name)
	}
	return manualID(name, tick), nil
}

// Run is a tick started by Backfill.
type Run struct {
	Tick       time.Time // in UTC
	WorkflowID string
	Started    bool // false: the tick's run existed already
}

// Backfill starts, in this process, the runs of the ticks of schedule
// name in [from, to), at most limit of them, by the spec in force, each
// under the workflow ID of its tick. The caller checks that runs may
// start and that from is before to.
func (s *Service) Backfill(ctx context.Context, name string, from, to time.Time, limit int) ([]Run, error) {
	d, row, ts, err := s.resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	ticks, err := ts.between(row.Cursor, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: backfill of schedule %q: %v", errs.InvalidArgument, name, err)
	}
	out := make([]Run, 0, len(ticks))
	for _, tick := range ticks {
		id := tickID(name, tick)
		input, err := d.Input(tick.In(ts.loc))
		if err != nil {
			return out, err
		}
		created, err := s.cfg.Start(ctx, d.Workflow, id, input, d.Tags)
		if err != nil {
			return out, err
		}
		out = append(out, Run{Tick: tick, WorkflowID: id, Started: created})
	}
	return out, nil
}

// resolve reads schedule name for a manual start: it must be stored,
// declared here, and run the declared workflow.
func (s *Service) resolve(ctx context.Context, name string) (*Def, *sysdb.ScheduleRow, *Spec, error) {
	row, err := s.get(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	d := s.def(name)
	if d == nil {
		return nil, nil, nil, fmt.Errorf("%w: schedule %q (workflow %q) is not declared in this binary", errs.NotRegistered, name, row.Workflow)
	}
	if row.Workflow != d.Workflow {
		return nil, nil, nil, fmt.Errorf("%w: schedule %q runs workflow %q in the database but %q in this binary", errs.NotRegistered, name, row.Workflow, d.Workflow)
	}
	ts, err := s.specs.spec(row.Spec, row.Location)
	if err != nil {
		return nil, nil, nil, err
	}
	return d, row, ts, nil
}

// update applies change to the stored row of schedule name with a
// compare-and-set, reading again if the row changed meanwhile.
func (s *Service) update(ctx context.Context, name, what string, change func(r *sysdb.ScheduleRow) (bool, error)) error {
	for {
		row, err := s.get(ctx, name)
		if err != nil {
			return err
		}
		changed, err := change(row)
		if err != nil || !changed {
			return err
		}
		ok, err := s.cfg.Queries.Update(ctx, s.cfg.DB, sysdb.ScheduleUpdateParams{Name: row.Name, Version: row.Version,
			Spec: row.Spec, Location: row.Location, Paused: row.Paused, Cursor: row.Cursor, NextTick: row.NextTick})
		if err != nil {
			return fmt.Errorf("durable: %s schedule %q: %w", what, name, err)
		}
		if ok {
			s.Wake()
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (s *Service) get(ctx context.Context, name string) (*sysdb.ScheduleRow, error) {
	r, found, err := s.cfg.Queries.Get(ctx, s.cfg.DB, name)
	if err != nil {
		return nil, fmt.Errorf("durable: read schedule %q: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", errs.ScheduleNotFound, name)
	}
	return &r, nil
}
