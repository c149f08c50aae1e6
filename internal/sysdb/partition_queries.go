package sysdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PartitionQueries are the statements of a queue's partition keys: the
// keyed dispatch (a queue with fair sharing or limits per key) and the
// limits of single keys. The runs without a partition key form the key ""
// throughout.
type PartitionQueries struct {
	keys       string
	state      string
	candidates string
	setCursor  string
	setLimits  string
	delLimits  string
	limits     string
	stats      string
}

// readyHere is the condition that a queued run is ready and may run on the
// executor with app version $av and workflows $wf (see ClaimSimple).
func readyHere(av, wf string) string {
	return `status = 'enqueued' AND (not_before IS NULL OR not_before <= now())
	AND name = ANY(` + wf + `::text[]) AND (epoch = 0 OR app_version = ` + av + `)`
}

// NewPartitionQueries renders the partition statements for schema.
func NewPartitionQueries(schema string) *PartitionQueries {
	r := func(s string) string { return Render(s, schema) }
	// inKeys: the run's key is one of the array $2 ("" for none).
	const inKeys = `(partition_key = ANY($2::text[]) OR (partition_key IS NULL AND '' = ANY($2::text[])))`
	return &PartitionQueries{
		// The keys with queued runs, in key order after $2 and up to $3
		// (NULL: no bound), at most $4: a skip scan along
		// workflows_queue_fair_idx, one index probe per key however many
		// runs each has. The key "" (runs without one) comes first when
		// $5 and such runs are queued.
		// $1 queue, $2 after, $3 up to, $4 limit, $5 with "".
		keys: r(`WITH RECURSIVE k(key) AS (
	(SELECT partition_key FROM {{schema}}.workflows
	WHERE queue_name = $1 AND status = 'enqueued' AND partition_key > $2 AND ($3::text IS NULL OR partition_key <= $3)
	ORDER BY partition_key LIMIT 1)
	UNION ALL
	SELECT (SELECT w.partition_key FROM {{schema}}.workflows w
		WHERE w.queue_name = $1 AND w.status = 'enqueued' AND w.partition_key > k.key
			AND ($3::text IS NULL OR w.partition_key <= $3)
		ORDER BY w.partition_key LIMIT 1)
	FROM k WHERE k.key IS NOT NULL)
SELECT '' WHERE $5::bool AND EXISTS (SELECT 1 FROM {{schema}}.workflows
	WHERE queue_name = $1 AND status = 'enqueued' AND partition_key IS NULL)
UNION ALL
(SELECT key FROM k WHERE key IS NOT NULL LIMIT $4)`),

		// Per key of $2: the runs holding a slot (pending, and cancelled
		// ones still stopping), the starts within the key's rate period $3
		// (ms, 0: none) and when the oldest of them leaves it, and the
		// key's own limits.
		// $1 queue, $2 keys, $3 partition rate period ms.
		state: r(`WITH run AS (
	SELECT coalesce(partition_key, '') AS k, count(*) AS n FROM (
		SELECT partition_key FROM {{schema}}.workflows
		WHERE queue_name = $1 AND status = 'pending' AND ` + inKeys + `
		UNION ALL
		SELECT partition_key FROM {{schema}}.workflows
		WHERE queue_name = $1 AND ` + stopping + ` AND ` + inKeys + `) s
	GROUP BY 1),
rate AS (
	SELECT coalesce(partition_key, '') AS k, count(*) AS n,
		min(rate_start) + $3 * interval '1 millisecond' - now() AS free
	FROM {{schema}}.workflows
	WHERE $3::bigint > 0 AND queue_name = $1 AND rate_start > now() - $3 * interval '1 millisecond' AND ` + inKeys + `
	GROUP BY 1)
SELECT keys.k, coalesce(run.n, 0), coalesce(rate.n, 0), rate.free, coalesce(p.concurrency, 0), coalesce(p.weight, 1)
FROM unnest($2::text[]) WITH ORDINALITY AS keys(k, i)
LEFT JOIN run ON run.k = keys.k
LEFT JOIN rate ON rate.k = keys.k
LEFT JOIN {{schema}}.queue_partitions p ON p.queue_name = $1 AND p.partition_key = keys.k
ORDER BY keys.i`),

		// Locks and returns up to $3[i] ready runs of key $2[i], each key's
		// in priority order (its part of workflows_queue_fair_idx), skipping
		// locked ones. $1 queue, $2 keys, $3 quotas, $4 app version,
		// $5 workflows.
		candidates: r(`SELECT c.id, q.k, c.priority, c.created_at
FROM unnest($2::text[], $3::int[]) AS q(k, n)
CROSS JOIN LATERAL (SELECT id, priority, created_at FROM {{schema}}.workflows
	WHERE q.k <> '' AND queue_name = $1 AND partition_key = q.k AND ` + readyHere("$4", "$5") + `
	ORDER BY priority, created_at, id LIMIT q.n FOR UPDATE SKIP LOCKED) c
UNION ALL
SELECT c.id, '', c.priority, c.created_at
FROM (SELECT id, priority, created_at FROM {{schema}}.workflows
	WHERE queue_name = $1 AND partition_key IS NULL AND ` + readyHere("$4", "$5") + `
	ORDER BY priority, created_at, id
	LIMIT coalesce((SELECT n FROM unnest($2::text[], $3::int[]) AS q(k, n) WHERE k = ''), 0)
	FOR UPDATE SKIP LOCKED) c`),

		// $1 queue, $2 cursor (NULL: none).
		setCursor: r(`UPDATE {{schema}}.queues SET fair_cursor = $2 WHERE name = $1`),

		// $1 queue, $2 key, $3 concurrency, $4 weight. Returns a row when
		// the queue exists.
		setLimits: r(`INSERT INTO {{schema}}.queue_partitions (queue_name, partition_key, concurrency, weight)
SELECT name, $2, $3, $4 FROM {{schema}}.queues WHERE name = $1
ON CONFLICT (queue_name, partition_key) DO UPDATE SET concurrency = EXCLUDED.concurrency,
	weight = EXCLUDED.weight, updated_at = now()
RETURNING 1`),

		// $1 queue, $2 key.
		delLimits: r(`DELETE FROM {{schema}}.queue_partitions WHERE queue_name = $1 AND partition_key = $2`),

		// $1 queue.
		limits: r(`SELECT partition_key, concurrency, weight FROM {{schema}}.queue_partitions
WHERE queue_name = $1 ORDER BY partition_key`),

		// The keys of queue $1 with queued or running runs, or limits of
		// their own, the busiest first, at most $2. It counts every queued
		// run of the queue: an operator's look, not a dispatch's.
		stats: r(`SELECT s.k, sum(s.ready)::int, sum(s.delayed)::int, sum(s.running)::int,
	coalesce(p.concurrency, 0), coalesce(p.weight, 1), p.queue_name IS NOT NULL
FROM (
	SELECT coalesce(partition_key, '') AS k, count(*) FILTER (WHERE not_before IS NULL OR not_before <= now()) AS ready,
		count(*) FILTER (WHERE not_before > now()) AS delayed, 0 AS running
	FROM {{schema}}.workflows WHERE queue_name = $1 AND status = 'enqueued' GROUP BY 1
	UNION ALL
	SELECT coalesce(partition_key, ''), 0, 0, count(*) FROM {{schema}}.workflows
	WHERE queue_name = $1 AND status = 'pending' GROUP BY 1
	UNION ALL
	SELECT coalesce(partition_key, ''), 0, 0, count(*) FROM {{schema}}.workflows
	WHERE queue_name = $1 AND ` + stopping + ` GROUP BY 1
	UNION ALL
	SELECT partition_key, 0, 0, 0 FROM {{schema}}.queue_partitions WHERE queue_name = $1) s
LEFT JOIN {{schema}}.queue_partitions p ON p.queue_name = $1 AND p.partition_key = s.k
GROUP BY s.k, p.queue_name, p.concurrency, p.weight
ORDER BY sum(s.running) + sum(s.ready) DESC, s.k
LIMIT $2`),
	}
}

// PartitionKeysParams select keys with queued runs.
type PartitionKeysParams struct {
	Queue string
	After string  // keys after this one ("": from the first)
	UpTo  *string // and up to this one; nil: no bound
	Limit int
	// WithKeyless puts "" first when runs without a key are queued.
	WithKeyless bool
}

// Keys returns the partition keys of p.Queue with queued runs (ready or
// delayed), in key order after p.After, up to p.Limit of them; "" (the
// runs without a key) first when p.WithKeyless and such runs are queued.
func (q *PartitionQueries) Keys(ctx context.Context, tx DBTX, p PartitionKeysParams) ([]string, error) {
	rows, err := tx.Query(ctx, q.keys, p.Queue, p.After, p.UpTo, p.Limit, p.WithKeyless)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// PartitionStateParams name keys of a queue.
type PartitionStateParams struct {
	Queue      string
	Keys       []string
	RatePeriod time.Duration // the rate period of each key; 0: no rate limit per key
}

// PartitionStateRow is the load and the limits of one partition key.
type PartitionStateRow struct {
	Key      string
	Running  int            // runs holding a slot
	Recent   int            // starts within the rate period
	RateFree *time.Duration // with Recent > 0: when the oldest of them leaves the period
	// Concurrency is the key's own concurrency limit (0: the queue's), and
	// Weight its share under fair sharing (1 unless set).
	Concurrency int
	Weight      int
}

// State returns the load and limits of every key of p.Keys, in that order.
func (q *PartitionQueries) State(ctx context.Context, tx DBTX, p PartitionStateParams) ([]PartitionStateRow, error) {
	rows, err := tx.Query(ctx, q.state, p.Queue, p.Keys, p.RatePeriod.Milliseconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PartitionStateRow])
}

// PartitionCandidatesParams ask for the first ready runs of keys.
type PartitionCandidatesParams struct {
	Queue      string
	Keys       []string
	Quotas     []int // at most this many runs of the key at the same index
	AppVersion string
	Workflows  []string
}

// PartitionCandidateRow is a ready run locked for the dispatch.
type PartitionCandidateRow struct {
	ID        string
	Key       string
	Priority  int
	CreatedAt time.Time
}

// Candidates locks and returns up to p.Quotas[i] ready runs of key
// p.Keys[i] that the executor may run, each key's in priority order;
// runs locked by another transaction are skipped.
func (q *PartitionQueries) Candidates(ctx context.Context, tx DBTX, p PartitionCandidatesParams) ([]PartitionCandidateRow, error) {
	quotas := make([]int32, len(p.Quotas))
	for i, n := range p.Quotas {
		quotas[i] = int32(n)
	}
	rows, err := tx.Query(ctx, q.candidates, p.Queue, p.Keys, quotas, p.AppVersion, p.Workflows)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PartitionCandidateRow])
}

// SetCursor records where the next fair dispatch of queue goes on: after
// key cursor; "" starts from the first key.
func (q *PartitionQueries) SetCursor(ctx context.Context, tx DBTX, queue, cursor string) error {
	_, err := tx.Exec(ctx, q.setCursor, queue, orNull(cursor))
	return err
}

// PartitionLimitsParams are the limits of one key of a queue.
type PartitionLimitsParams struct {
	Queue       string
	Key         string
	Concurrency int // 0: the queue's partition limit
	Weight      int // at least 1
}

// SetLimits sets the limits of key p.Key of queue p.Queue and reports
// whether the queue exists.
func (q *PartitionQueries) SetLimits(ctx context.Context, db DBTX, p PartitionLimitsParams) (bool, error) {
	return someRow(db.Query(ctx, q.setLimits, p.Queue, p.Key, p.Concurrency, p.Weight))
}

// DeleteLimits removes the limits of key of queue; the queue's apply to
// it again.
func (q *PartitionQueries) DeleteLimits(ctx context.Context, db DBTX, queue, key string) error {
	_, err := db.Exec(ctx, q.delLimits, queue, key)
	return err
}

// PartitionLimitsRow is a key with limits of its own.
type PartitionLimitsRow struct {
	Key         string
	Concurrency int
	Weight      int
}

// Limits returns the keys of queue with limits of their own, by key.
func (q *PartitionQueries) Limits(ctx context.Context, db DBTX, queue string) ([]PartitionLimitsRow, error) {
	rows, err := db.Query(ctx, q.limits, queue)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PartitionLimitsRow])
}

// PartitionStatsRow counts the runs of one partition key of a queue.
type PartitionStatsRow struct {
	Key         string // "": the runs without a key
	Ready       int
	Delayed     int
	Running     int // holding a slot
	Concurrency int // the key's own limits (Limited), else 0 and 1
	Weight      int
	Limited     bool // the key has limits of its own
}

// Stats returns the keys of queue with queued or running runs, or limits
// of their own, the busiest (running plus ready) first, at most limit.
func (q *PartitionQueries) Stats(ctx context.Context, db DBTX, queue string, limit int) ([]PartitionStatsRow, error) {
	rows, err := db.Query(ctx, q.stats, queue, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PartitionStatsRow])
}
