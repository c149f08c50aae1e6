package sysdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueQueries are the statements of queues, rendered for one schema.
type QueueQueries struct {
	declare     string
	settings    string
	update      string
	setPaused   string
	enqueue     string
	lockAndLoad string
	counts      string
	claimSimple string
	claimIDs    string
	requeue     string
	release     string
	ownStopping string
	stats       string
	byDedup     string
	list        string
}

// stopping is the condition of a cancelled queued run whose code may
// still run in its executor: it holds its queue slot until that executor
// clears executor_id (workflows_queue_stopping_idx).
const stopping = `status = 'cancelled' AND executor_id IS NOT NULL AND queue_name IS NOT NULL`

// claimSet is the SET clause of a claim by executor exec on app version
// version; rated (a bool) records the start for a rate limit.
func claimSet(exec, version, rated string) string {
	return `SET status = 'pending', executor_id = ` + exec + `, epoch = w.epoch + 1, started_at = now(), updated_at = now(),
	rate_start = CASE WHEN ` + rated + ` THEN now() END,
	app_version = ` + version + `, recovery_attempts = w.recovery_attempts + CASE WHEN w.epoch = 0 OR w.wake_at IS NOT NULL THEN 0 ELSE 1 END,
	wake_at = NULL, wait_topic = NULL, wait_any = NULL`
}

// readyRuns is the subquery of the IDs of the next ready runs of the
// queue named by queue, in dispatch order, at most limit, for an executor
// of application version version that runs the workflows names (a run
// that never started may run on any version, a re-queued one only on its
// own); each is locked, and one another transaction holds is skipped.
// The order is that of workflows_queue_claim_idx: the scan stops after
// limit entries.
func readyRuns(queue, names, version, limit string) string {
	return `SELECT id FROM {{schema}}.workflows
	WHERE queue_name = ` + queue + ` AND status = 'enqueued' AND (not_before IS NULL OR not_before <= now())
		AND name = ANY(` + names + `::text[]) AND (epoch = 0 OR app_version = ` + version + `)
	ORDER BY priority, created_at, id LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED`
}

// claimedColumns are what a claim returns of each run it claimed
// (ClaimedRow, collectClaimed).
const claimedColumns = `w.id, w.name, w.input, w.epoch, w.recovery_attempts, w.deadline, w.queue_name, w.trace_context,
	clock_timestamp() - w.created_at, w.cancel_requested IS TRUE`

// handOnQueue is the condition on a queue (q) whose finishing runs may
// hand their slots to its next runs (FinishHandOn): its limits are a
// global or per-executor concurrency only, and it is not paused. The
// running count is unchanged by such a swap, so a concurrent dispatch
// pass (whose counts see both halves or neither) cannot overfill it.
// Rates, limits per key and fair sharing go through the pass.
const handOnQueue = `NOT q.paused AND q.rate_limit = 0 AND NOT q.fair_share
			AND q.partition_concurrency = 0 AND q.partition_rate_limit = 0
			AND (q.global_concurrency > 0 OR q.worker_concurrency > 0)
			AND NOT EXISTS (SELECT 1 FROM {{schema}}.queue_partitions p WHERE p.queue_name = q.name)`

// running counts the runs of the queue named by the SQL expression name
// that hold a slot: pending ones and stopping ones, each from its own
// partial index (workflows_queue_running_idx, workflows_queue_stopping_idx).
func running(name string) string {
	return `(SELECT count(*) FROM {{schema}}.workflows WHERE queue_name = ` + name + ` AND status = 'pending')
	+ (SELECT count(*) FROM {{schema}}.workflows WHERE queue_name = ` + name + ` AND ` + stopping + `)`
}

// NewQueueQueries renders the queue statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewQueueQueries(schema, channel string) *QueueQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &QueueQueries{
		// Code declares a queue at Launch. A declaration different from the
		// last one (a deploy changed the code) overwrites the live settings;
		// the same declaration keeps changes made at run time. A queue
		// declared by the schema (DeclaredBySchema) keeps its settings at its
		// first declaration by code, which only records itself (adopt).
		// $1 name, $2-$10 settings (settingsArgs), $11 declared.
		declare: r(`WITH adopt AS (
	UPDATE {{schema}}.queues SET declared = $11, updated_at = now()
	WHERE name = $1 AND declared = '` + DeclaredBySchema + `'
	RETURNING 1)
INSERT INTO {{schema}}.queues AS q (name, ` + settingsColumns + `, declared)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 WHERE NOT EXISTS (SELECT 1 FROM adopt)
ON CONFLICT (name) DO UPDATE SET global_concurrency = EXCLUDED.global_concurrency,
	worker_concurrency = EXCLUDED.worker_concurrency, partition_concurrency = EXCLUDED.partition_concurrency,
	rate_limit = EXCLUDED.rate_limit, rate_period_ms = EXCLUDED.rate_period_ms,
	release_parked = EXCLUDED.release_parked, fair_share = EXCLUDED.fair_share,
	partition_rate_limit = EXCLUDED.partition_rate_limit, partition_rate_period_ms = EXCLUDED.partition_rate_period_ms,
	declared = EXCLUDED.declared, updated_at = now()
WHERE q.declared IS DISTINCT FROM EXCLUDED.declared`),

		settings: r(`SELECT ` + settingsColumns + `, paused FROM {{schema}}.queues WHERE name = $1`),

		// $1 name, $2-$10 settings (settingsArgs).
		update: r(`WITH u AS (
	UPDATE {{schema}}.queues SET global_concurrency = $2, worker_concurrency = $3, partition_concurrency = $4,
		rate_limit = $5, rate_period_ms = $6, release_parked = $7, fair_share = $8,
		partition_rate_limit = $9, partition_rate_period_ms = $10, updated_at = now()
	WHERE name = $1 RETURNING name)
SELECT ` + n(`'q:' || name`) + ` FROM u`),

		setPaused: r(`WITH u AS (
	UPDATE {{schema}}.queues SET paused = $2, updated_at = now() WHERE name = $1 RETURNING name)
SELECT ` + n(`'q:' || name`) + ` FROM u`),

		// One statement: it checks the queue exists, inserts the run unless
		// its ID or its dedup ID is taken, and wakes the dispatchers on commit.
		// $1 id, $2 name, $3 app_version, $4 input, $5 queue, $6 priority,
		// $7 partition_key, $8 dedup_id, $9 not_before, $10 deadline, $11 notify (bool),
		// $12 trace_context, $13 tags.
		enqueue: r(`WITH q AS (SELECT name FROM {{schema}}.queues WHERE name = $5),
ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input,
		queue_name, priority, partition_key, dedup_id, not_before, deadline, trace_context, tags)
	SELECT $1, $2, 'enqueued', $3, NULL, 0, $4, q.name, $6, $7, $8, $9, $10, $12, $13::jsonb FROM q
	ON CONFLICT DO NOTHING
	RETURNING id)
SELECT (SELECT count(*) FROM q), (SELECT count(*) FROM ins),
	(SELECT CASE WHEN $11::bool AND count(*) > 0 THEN ` + n(`'q:' || $5::text`) + ` END FROM ins)::text`),

		// The dispatch transaction of one queue starts here. The row lock
		// on the queue serialises dispatchers of this queue across all
		// executors, so the counts below stay true until commit; Pause and
		// Update wait for it, and a dispatch that waited reads the row as
		// they left it (a row lock re-reads the latest version, an advisory
		// lock would not).
		// $1 name.
		// The pass also reads where the last fair pass stopped and whether
		// any partition key has limits of its own.
		lockAndLoad: r(`SELECT ` + settingsColumns + `, paused, fair_cursor,
	EXISTS (SELECT 1 FROM {{schema}}.queue_partitions p WHERE p.queue_name = q.name)
FROM {{schema}}.queues q WHERE name = $1 FOR NO KEY UPDATE OF q`),

		// What the limits of the queue depend on, as its row sets them:
		// the runs holding a slot (with a global limit), the starts within
		// the rate period and when the oldest leaves it (with a rate
		// limit: rate_start is set by the claims only while the queue has
		// one), and when the next delayed run is due. The settings are read
		// from the row, not passed, so the statement has one shape, planned
		// once per connection; each subquery runs only when its CASE asks.
		// $1 name.
		counts: r(`SELECT
	CASE WHEN q.global_concurrency > 0 THEN ` + running("q.name") + ` ELSE 0 END,
	CASE WHEN q.rate_period_ms > 0 THEN (SELECT count(*) FROM {{schema}}.workflows
		WHERE queue_name = q.name AND rate_start > now() - q.rate_period_ms * interval '1 millisecond') ELSE 0 END,
	CASE WHEN q.rate_period_ms > 0 THEN (SELECT min(rate_start) + q.rate_period_ms * interval '1 millisecond' - now()
		FROM {{schema}}.workflows
		WHERE queue_name = q.name AND rate_start > now() - q.rate_period_ms * interval '1 millisecond') END,
	(SELECT min(not_before) - now() FROM {{schema}}.workflows
		WHERE queue_name = q.name AND status = 'enqueued' AND not_before > now())
FROM {{schema}}.queues q WHERE q.name = $1`),

		// Claims up to $5 ready runs in priority order. A run that never
		// started may run on any application version; a re-queued one only
		// on its own. The IDs come as an array so the update finds each row
		// by its key (a join may scan the whole table when the queue is most
		// of it), and the order is the index order of
		// workflows_queue_claim_idx, so the scan stops after $5 entries.
		// $1 name, $2 executor, $3 app_version, $4 names, $5 limit,
		// $6 rate limited (bool: record rate_start).
		claimSimple: r(`UPDATE {{schema}}.workflows w
` + claimSet("$2", "$3", "$6::bool") + `
WHERE w.id = ANY(ARRAY(` + readyRuns("$1", "$4", "$3", "$5") + `))
RETURNING ` + claimedColumns),

		// $1 ids, $2 executor, $3 app_version, $4 rate limited.
		claimIDs: r(`UPDATE {{schema}}.workflows w
` + claimSet("$2", "$3", "$4::bool") + `
WHERE w.id = ANY($1::text[]) AND w.status = 'enqueued'
RETURNING ` + claimedColumns),

		// Queued runs whose executor died (or, at boot, this executor's own
		// previous incarnation) go back to their queue, keeping their place
		// and their recorded steps, and pass through the limits again. The
		// epoch bump fences the old owner.
		// $1 executor_id, $2 include own runs (bool), $3 include runs of
		// executors whose lease expired (bool).
		// Cancelled runs such an executor was stopping give their slots
		// back. Columns: queue, runs requeued, (notify).
		requeue: r(`WITH r AS (
	UPDATE {{schema}}.workflows o SET status = 'enqueued', executor_id = NULL, epoch = o.epoch + 1, updated_at = now()
	WHERE o.status = 'pending' AND o.queue_name IS NOT NULL AND o.wake_at IS NULL
	AND ((o.executor_id = $1 AND $2::bool) OR o.executor_id IS NULL OR (o.executor_id <> $1 AND $3::bool AND NOT EXISTS (
		SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())))
	RETURNING o.queue_name),
c AS (
	UPDATE {{schema}}.workflows o SET executor_id = NULL
	WHERE ` + stopping + `
	AND ((o.executor_id = $1 AND $2::bool) OR (o.executor_id <> $1 AND $3::bool AND NOT EXISTS (
		SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())))
	RETURNING o.queue_name)
SELECT queue_name, count(*) FILTER (WHERE requeued), ` + n(`'q:' || queue_name`) + `::text
FROM (SELECT queue_name, true AS requeued FROM r UNION ALL SELECT queue_name, false FROM c) x GROUP BY queue_name`),

		// Release gives back the slot of a cancelled run whose code has
		// stopped in this executor. $1 id, $2 epoch.
		release: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET executor_id = NULL
	WHERE id = $1 AND epoch = $2 AND ` + stopping + `
	RETURNING queue_name)
SELECT ` + n(`'q:' || queue_name`) + `::text FROM u`),

		// Cancelled runs holding a slot for this executor (adoptStrays
		// releases those not executing). $1 executor_id.
		ownStopping: r(`SELECT id, epoch FROM {{schema}}.workflows WHERE ` + stopping + ` AND executor_id = $1`),

		// See queueCounts. $1 name.
		stats: r(`SELECT e.ready, e.delayed, r.running FROM ` + queueCounts("$1")),

		// Every declared queue with its settings and counts, by name.
		list: r(listQueues),

		// $1 queue, $2 dedup_id.
		byDedup: r(`SELECT id FROM {{schema}}.workflows
WHERE queue_name = $1 AND dedup_id = $2 AND status IN ('enqueued', 'pending')`),
	}
}

// QueueSettings are a queue's limits as its row stores them; zero means
// unlimited for each.
type QueueSettings struct {
	GlobalConcurrency    int
	WorkerConcurrency    int
	PartitionConcurrency int
	RateLimit            int
	RatePeriod           time.Duration // stored in whole milliseconds
	ReleaseParked        bool          // a parked run gives its slot back
	FairShare            bool          // share the capacity among partition keys
	PartitionRateLimit   int           // starts of each partition key per PartitionRatePeriod
	PartitionRatePeriod  time.Duration // stored in whole milliseconds
}

// settingsColumns are the columns of a queue's settings, in the order of
// settingsArgs and scanSettings.
const settingsColumns = `global_concurrency, worker_concurrency, partition_concurrency, rate_limit, rate_period_ms,
	release_parked, fair_share, partition_rate_limit, partition_rate_period_ms`

// settingsArgs are s as the arguments of settingsColumns.
func settingsArgs(s QueueSettings) []any {
	return []any{s.GlobalConcurrency, s.WorkerConcurrency, s.PartitionConcurrency, s.RateLimit,
		s.RatePeriod.Milliseconds(), s.ReleaseParked, s.FairShare, s.PartitionRateLimit,
		s.PartitionRatePeriod.Milliseconds()}
}

// settingsDest are the scan destinations of settingsColumns into s, with
// the two periods read as milliseconds into ms; ms.set stores them.
func settingsDest(s *QueueSettings, ms *periodsMs) []any {
	return []any{&s.GlobalConcurrency, &s.WorkerConcurrency, &s.PartitionConcurrency, &s.RateLimit,
		&ms.rate, &s.ReleaseParked, &s.FairShare, &s.PartitionRateLimit, &ms.partitionRate}
}

// periodsMs are a queue's periods as stored, in milliseconds.
type periodsMs struct{ rate, partitionRate int64 }

func (ms periodsMs) set(s *QueueSettings) {
	s.RatePeriod = time.Duration(ms.rate) * time.Millisecond
	s.PartitionRatePeriod = time.Duration(ms.partitionRate) * time.Millisecond
}

// QueueDeclareParams are a queue's settings as code declares them.
type QueueDeclareParams struct {
	Name     string
	Settings QueueSettings
	// Declared identifies the declaration (the encoded settings): a
	// declaration equal to the stored one leaves the live settings alone.
	Declared string
}

// Declare inserts queue p.Name or, when its declaration differs from the
// stored one, overwrites its live settings with the declared ones; a queue
// declared by the schema (DeclaredBySchema) keeps its settings and takes
// p.Declared as its declaration.
func (q *QueueQueries) Declare(ctx context.Context, db DBTX, p QueueDeclareParams) error {
	args := append(append([]any{p.Name}, settingsArgs(p.Settings)...), p.Declared)
	_, err := db.Exec(ctx, q.declare, args...)
	return err
}

// QueueSettingsRow is a queue's live settings and whether it is paused.
type QueueSettingsRow struct {
	Settings QueueSettings
	Paused   bool
}

func scanSettings(row pgx.Row) (QueueSettingsRow, error) {
	var r QueueSettingsRow
	var ms periodsMs
	err := row.Scan(append(settingsDest(&r.Settings, &ms), &r.Paused)...)
	ms.set(&r.Settings)
	return r, err
}

// Settings returns the live settings of queue name; pgx.ErrNoRows when no
// queue has that name.
func (q *QueueQueries) Settings(ctx context.Context, db DBTX, name string) (QueueSettingsRow, error) {
	return scanSettings(db.QueryRow(ctx, q.settings, name))
}

// DispatchRow is what a dispatch pass reads from its queue's row.
type DispatchRow struct {
	QueueSettingsRow
	// FairCursor is the last partition key a fair pass looked at; "": none.
	FairCursor string
	// PartitionLimits reports whether some partition key of the queue has
	// limits of its own (SetPartitionLimits).
	PartitionLimits bool
}

// scan reads the row of lockAndLoad (see LockAndCount) into r.
func (r *DispatchRow) scan(row pgx.Row) error {
	var ms periodsMs
	var cursor *string
	err := row.Scan(append(settingsDest(&r.Settings, &ms), &r.Paused, &cursor, &r.PartitionLimits)...)
	ms.set(&r.Settings)
	if cursor != nil {
		r.FairCursor = *cursor
	}
	return err
}

// QueueUpdateParams are the new live settings of a queue.
type QueueUpdateParams struct {
	Name     string
	Settings QueueSettings
}

// Update sets the live settings of queue p.Name, waking its dispatchers,
// and reports whether the queue exists.
func (q *QueueQueries) Update(ctx context.Context, db DBTX, p QueueUpdateParams) (bool, error) {
	return someRow(db.Query(ctx, q.update, append([]any{p.Name}, settingsArgs(p.Settings)...)...))
}

// QueuePausedParams pause or resume a queue.
type QueuePausedParams struct {
	Name   string
	Paused bool
}

// SetPaused pauses or resumes queue p.Name, waking its dispatchers, and
// reports whether the queue exists.
func (q *QueueQueries) SetPaused(ctx context.Context, db DBTX, p QueuePausedParams) (bool, error) {
	return someRow(db.Query(ctx, q.setPaused, p.Name, p.Paused))
}

// someRow reports whether rows has a row, and closes it.
func someRow(rows pgx.Rows, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	found := rows.Next()
	rows.Close()
	return found, rows.Err()
}

// EnqueueParams are a run to put on a queue.
type EnqueueParams struct {
	ID           string
	Workflow     string
	AppVersion   string
	Input        []byte // JSON
	Queue        string
	Priority     int
	PartitionKey string     // "": none
	DedupID      string     // "": none
	NotBefore    *time.Time // nil: ready at once
	Deadline     *time.Time // nil: none
	// Notify makes the commit wake the queue's dispatchers; an enqueue
	// outside the caller's transaction wakes them itself, and coalesces.
	Notify       bool
	TraceContext string          // W3C traceparent; "": none
	Tags         json.RawMessage // a JSON object of strings; nil: none
}

// EnqueueRow says what Enqueue did.
type EnqueueRow struct {
	QueueFound bool // the queue exists
	Inserted   bool // false: the ID or the dedup ID is taken
}

// Enqueue inserts run p, queued, unless its queue does not exist or its ID
// or its dedup ID is taken.
func (q *QueueQueries) Enqueue(ctx context.Context, db DBTX, p EnqueueParams) (EnqueueRow, error) {
	var queueFound, inserted int
	var note *string
	err := db.QueryRow(ctx, q.enqueue, p.ID, p.Workflow, p.AppVersion, json.RawMessage(p.Input), p.Queue, p.Priority,
		orNull(p.PartitionKey), orNull(p.DedupID), p.NotBefore, p.Deadline, p.Notify, orNull(p.TraceContext), p.Tags).
		Scan(&queueFound, &inserted, &note)
	return EnqueueRow{QueueFound: queueFound > 0, Inserted: inserted > 0}, err
}

// orNull is s, or SQL NULL for "".
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// QueueCountsRow is what a dispatch counted in its queue.
type QueueCountsRow struct {
	Running     int            // runs holding a slot, in any executor (0 without a global limit)
	Recent      int            // starts within the rate period (0 without one)
	RateFree    *time.Duration // with Recent > 0: when the oldest of them leaves the period
	NextDelayed *time.Duration // when the next delayed run is due; nil: none
}

// scan reads the row of counts into r.
func (r *QueueCountsRow) scan(row pgx.Row) error {
	return row.Scan(&r.Running, &r.Recent, &r.RateFree, &r.NextDelayed)
}

// Counts counts the runs of queue name that its limits depend on, as the
// queue's row sets them; pgx.ErrNoRows when no queue has that name.
func (q *QueueQueries) Counts(ctx context.Context, db DBTX, name string) (QueueCountsRow, error) {
	var r QueueCountsRow
	err := r.scan(db.QueryRow(ctx, q.counts, name))
	return r, err
}

// BatchSender is what sends statements pipelined: a transaction.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// LockAndCount locks the row of queue name until the end of the
// transaction tx, serialising the dispatches of the queue across
// executors, and returns its live settings and what its limits depend on
// (Counts), in one round trip; pgx.ErrNoRows when no queue has that name.
// The counts statement starts once the lock is held, so it reads what the
// previous holder committed: its runs claimed count as running.
func (q *QueueQueries) LockAndCount(ctx context.Context, tx BatchSender, name string) (DispatchRow, QueueCountsRow, error) {
	var r DispatchRow
	var c QueueCountsRow
	b := &pgx.Batch{}
	b.Queue(q.lockAndLoad, name).QueryRow(r.scan)
	b.Queue(q.counts, name).QueryRow(c.scan)
	err := tx.SendBatch(ctx, b).Close()
	return r, c, err
}

// ClaimSimpleParams claim the first ready runs of a queue.
type ClaimSimpleParams struct {
	Queue      string
	ExecutorID string
	AppVersion string
	Workflows  []string // the workflows the executor runs
	Limit      int
	Rated      bool // the queue has a rate limit: record each start
}

// ClaimSimple claims up to p.Limit ready runs of p.Queue, in priority
// order, for executor p.ExecutorID; locked ones are skipped. A run that
// never started may run on any application version, a re-queued one only
// on its own.
func (q *QueueQueries) ClaimSimple(ctx context.Context, tx DBTX, p ClaimSimpleParams) ([]ClaimedRow, error) {
	return collectClaimed(queryIndexPlanned(ctx, tx, q.claimSimple, p.Queue, p.ExecutorID, p.AppVersion, p.Workflows, p.Limit, p.Rated))
}

// ClaimIDsParams claim chosen queued runs.
type ClaimIDsParams struct {
	IDs        []string
	ExecutorID string
	AppVersion string
	Rated      bool // the queue has a rate limit: record each start
}

// ClaimIDs claims the runs of p.IDs that are still queued, for executor
// p.ExecutorID.
func (q *QueueQueries) ClaimIDs(ctx context.Context, tx DBTX, p ClaimIDsParams) ([]ClaimedRow, error) {
	return collectClaimed(queryIndexPlanned(ctx, tx, q.claimIDs, p.IDs, p.ExecutorID, p.AppVersion, p.Rated))
}

// RequeueParams say whose queued runs go back to their queue.
type RequeueParams struct {
	ExecutorID string
	Own        bool // the executor's own runs (left by its previous incarnation)
	// ExpiredLeases: the runs of other executors whose lease expired.
	// Runs without an owner always go back.
	ExpiredLeases bool
}

// RequeueRow is a queue that got runs or slots back.
type RequeueRow struct {
	Queue    string
	Requeued int64 // runs back in the queue (0: only slots of cancelled runs came back)
}

// Requeue returns the pending queued runs p selects to their queue,
// keeping their place and recorded steps, at a new epoch; cancelled runs
// those executors were stopping give their slots back. It wakes the
// queues' dispatchers.
func (q *QueueQueries) Requeue(ctx context.Context, db DBTX, p RequeueParams) ([]RequeueRow, error) {
	rows, err := db.Query(ctx, q.requeue, p.ExecutorID, p.Own, p.ExpiredLeases)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RequeueRow, error) {
		var r RequeueRow
		var note *string
		err := row.Scan(&r.Queue, &r.Requeued, &note)
		return r, err
	})
}

// ReleaseParams name a run at an epoch.
type ReleaseParams struct {
	ID    string
	Epoch int64
}

// Release gives back the queue slot of run p.ID, cancelled at epoch
// p.Epoch and still held by an executor, waking its queue's dispatchers,
// and reports whether it did.
func (q *QueueQueries) Release(ctx context.Context, db DBTX, p ReleaseParams) (bool, error) {
	tag, err := db.Exec(ctx, q.release, p.ID, p.Epoch)
	return tag.RowsAffected() > 0, err
}

// OwnStoppingRow is a cancelled run whose slot an executor holds.
type OwnStoppingRow struct {
	ID    string
	Epoch int64
}

// OwnStopping returns the cancelled runs whose slot executor holds.
func (q *QueueQueries) OwnStopping(ctx context.Context, db DBTX, executor string) ([]OwnStoppingRow, error) {
	rows, err := db.Query(ctx, q.ownStopping, executor)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[OwnStoppingRow])
}

// QueueStatsRow counts a queue's runs.
type QueueStatsRow struct {
	Ready   int // queued and due
	Delayed int // queued with a start time in the future
	Running int // holding a slot: claimed and not finished, or cancelled and still stopping
}

// Stats counts the runs of queue name (see queueCounts).
func (q *QueueQueries) Stats(ctx context.Context, db DBTX, name string) (QueueStatsRow, error) {
	var r QueueStatsRow
	err := db.QueryRow(ctx, q.stats, name).Scan(&r.Ready, &r.Delayed, &r.Running)
	return r, err
}

// ByDedupParams name a dedup ID in a queue.
type ByDedupParams struct {
	Queue   string
	DedupID string
}

// ByDedup returns the ID of the queued or running run that holds dedup ID
// p.DedupID in p.Queue; pgx.ErrNoRows when none does.
func (q *QueueQueries) ByDedup(ctx context.Context, db DBTX, p ByDedupParams) (string, error) {
	var id string
	err := db.QueryRow(ctx, q.byDedup, p.Queue, p.DedupID).Scan(&id)
	return id, err
}

// QueueListRow is a declared queue with its settings and counts.
type QueueListRow struct {
	Name string
	QueueSettingsRow
	QueueStatsRow
}

// List returns every declared queue with its live settings and counts, by
// name.
func (q *QueueQueries) List(ctx context.Context, db DBTX) ([]QueueListRow, error) {
	rows, err := db.Query(ctx, q.list)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueListRow, error) {
		var r QueueListRow
		var ms periodsMs
		err := row.Scan(append(append([]any{&r.Name}, settingsDest(&r.Settings, &ms)...), &r.Paused, &r.Ready, &r.Delayed, &r.Running)...)
		ms.set(&r.Settings)
		return r, err
	})
}
