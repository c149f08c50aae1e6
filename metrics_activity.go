package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// Activity is the recent work of every executor sharing the database, as
// the dashboard charts it: what [ReadActivity] returns.
type Activity struct {
	Since    time.Time       // the start of the window: a whole minute
	Finished []FinishedCount // runs finished per minute and status, oldest minute first
	Steps    StepLatency     // the steps of the newest runs finished in the window
	Queues   []QueueStats    // every declared queue, by name
	Parked   int64           // runs parked now (a long sleep or wait)
}

// FinishedCount is how many runs finished with Status in the minute that
// starts at Minute.
type FinishedCount struct {
	Minute time.Time
	Status Status
	Count  int64
}

// StepLatency is the median and 99th percentile of the durations of the
// recorded steps (from the first attempt's start to the record) of the
// newest runs finished in a window ([ActivityStepRuns] at most).
type StepLatency struct {
	Steps    int64 // how many steps they are
	P50, P99 time.Duration
}

// ActivityStepRuns bounds the runs whose steps [ReadActivity] reads for
// the step latency: the newest finished ones.
const ActivityStepRuns = 1000

// ReadActivity reads the activity of the last window (at least a minute):
// the runs finished per minute by status, the step latency, the queues'
// depth and the parked runs. It works from any process, launched or not,
// and reads only indexed recent rows, never the whole history.
func ReadActivity(ctx context.Context, e *Engine, window time.Duration) (Activity, error) {
	if e == nil {
		return Activity{}, fmt.Errorf("%w: ReadActivity needs an engine", ErrInvalidArgument)
	}
	window = max(window, time.Minute)
	var a Activity
	mq := sysdb.NewMetricsQueries(e.cfg.Schema)
	// Whole minutes: the last one is the minute under way.
	a.Since = time.Now().Truncate(time.Minute).Add(time.Minute - window.Truncate(time.Minute))
	rows, err := mq.FinishedPerMinute(ctx, e.pool, a.Since)
	if err != nil {
		return a, fmt.Errorf("durable: read activity: runs finished: %w", err)
	}
	for _, r := range rows {
		a.Finished = append(a.Finished, FinishedCount{Minute: r.Minute, Status: Status(r.Status), Count: r.Count})
	}
	lat, err := mq.StepLatency(ctx, e.pool, sysdb.StepLatencyParams{Since: a.Since, Runs: ActivityStepRuns})
	if err != nil {
		return a, fmt.Errorf("durable: read activity: step latency: %w", err)
	}
	a.Steps = StepLatency{Steps: lat.Steps, P50: seconds(lat.P50), P99: seconds(lat.P99)}
	if a.Queues, err = e.ListQueues(ctx); err != nil {
		return a, err
	}
	if a.Parked, err = mq.CountParked(ctx, e.pool); err != nil {
		return a, fmt.Errorf("durable: read activity: parked runs: %w", err)
	}
	return a, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
