package durable

import (
	"context"
	"fmt"
	"math"

	"github.com/durable-go/durable/internal/sysdb"
)

// PartitionLimits are the limits of one partition key of a queue, set
// while the system runs (a customer's plan, a tenant that needs more or
// less), on top of the queue's [QueueOpts].
type PartitionLimits struct {
	// Concurrency bounds the runs of the key holding a slot at once, in
	// place of QueueOpts.PartitionConcurrency. Defaults to 0: the queue's.
	Concurrency int
	// Weight is the key's share of the queue under QueueOpts.FairShare: a
	// key of weight 3 holds three slots for each slot of a key of weight 1
	// while both have work. Defaults to 1 (0 means 1).
	Weight int
}

func (l PartitionLimits) validate(queue, key string) error {
	bad := func(field, msg string) error {
		return fmt.Errorf("%w: queue %q partition %q: PartitionLimits.%s %s", ErrInvalidArgument, queue, key, field, msg)
	}
	switch {
	case l.Concurrency < 0:
		return bad("Concurrency", "must not be negative")
	case l.Concurrency > math.MaxInt32:
		return bad("Concurrency", "must be at most 2147483647")
	case l.Weight < 0:
		return bad("Weight", "must not be negative")
	case l.Weight > 1_000_000:
		return bad("Weight", "must be at most 1000000")
	}
	return nil
}

// SetPartitionLimits sets the limits of partition key key of the queue, for
// every executor from its next dispatch; nil removes them, and the queue's
// apply to the key again. They are kept in the database: they hold across
// restarts and deploys until changed.
func (q *Queue) SetPartitionLimits(ctx context.Context, key string, l *PartitionLimits) error {
	if err := checkName("partition key", key); err != nil {
		return err
	}
	if l == nil {
		if err := checkName("queue name", q.name); err != nil {
			return err
		}
		if err := q.e.pq.DeleteLimits(ctx, q.e.pool, q.name, key); err != nil {
			return fmt.Errorf("durable: clear limits of partition %q of queue %q: %w", key, q.name, err)
		}
		return nil
	}
	if err := l.validate(q.name, key); err != nil {
		return err
	}
	return q.exec(ctx, "set partition limits of", func(ctx context.Context) (bool, error) {
		return q.e.pq.SetLimits(ctx, q.e.pool, sysdb.PartitionLimitsParams{Queue: q.name, Key: key,
			Concurrency: l.Concurrency, Weight: max(l.Weight, 1)})
	})
}

// PartitionLimits returns the partition keys of the queue that have limits
// of their own ([Queue.SetPartitionLimits]), with those limits.
func (q *Queue) PartitionLimits(ctx context.Context) (map[string]PartitionLimits, error) {
	if err := checkName("queue name", q.name); err != nil {
		return nil, err
	}
	rows, err := q.e.pq.Limits(ctx, q.e.pool, q.name)
	if err != nil {
		return nil, fmt.Errorf("durable: partition limits of queue %q: %w", q.name, err)
	}
	out := make(map[string]PartitionLimits, len(rows))
	for _, r := range rows {
		out[r.Key] = PartitionLimits{Concurrency: r.Concurrency, Weight: r.Weight}
	}
	return out, nil
}

// PartitionStats is a snapshot of one partition key of a queue.
type PartitionStats struct {
	Key     string // "": the runs enqueued without a key
	Ready   int    // enqueued and due
	Delayed int    // enqueued with a start time in the future
	Running int    // holding a slot of the queue
	// Limits are the key's own limits ([Queue.SetPartitionLimits]); nil:
	// the queue's apply.
	Limits *PartitionLimits
}

// DefaultPartitionStats is how many keys PartitionStats returns when
// asked for none in particular.
const DefaultPartitionStats = 100

// PartitionStats returns the partition keys of the queue with queued or
// running runs, or limits of their own, the busiest (running plus ready)
// first, at most limit of them (limit <= 0: DefaultPartitionStats). It
// counts every queued run of the queue: a look for operators, not for a
// hot path.
func (q *Queue) PartitionStats(ctx context.Context, limit int) ([]PartitionStats, error) {
	if err := checkName("queue name", q.name); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultPartitionStats
	}
	rows, err := q.e.pq.Stats(ctx, q.e.pool, q.name, limit)
	if err != nil {
		return nil, fmt.Errorf("durable: partition stats of queue %q: %w", q.name, err)
	}
	out := make([]PartitionStats, len(rows))
	for i, r := range rows {
		out[i] = PartitionStats{Key: r.Key, Ready: r.Ready, Delayed: r.Delayed, Running: r.Running}
		if r.Limited {
			out[i].Limits = &PartitionLimits{Concurrency: r.Concurrency, Weight: r.Weight}
		}
	}
	return out, nil
}
