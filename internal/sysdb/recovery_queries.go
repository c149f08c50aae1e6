package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// RecoveryQueries are the statements of recovery: this executor's own
// runs at Launch, the takeover of runs without a live owner, runs over
// their recovery limit, and runs of this executor left without an
// execution by an outage (strays).
type RecoveryQueries struct {
	claimOwn            string
	handBackOwn         string
	claimOrphans        string
	releaseUnrunnable   string
	countOtherVersions  string
	deleteDeadExecutors string
	deadLetter          string
	ownUnparked         string
	claimStray          string
	requeueStray        string
}

// NewRecoveryQueries renders the recovery statements for schema; channel
// is the schema's notification channel ("": none sent, see notifier).
func NewRecoveryQueries(schema, channel string) *RecoveryQueries {
	r := func(s string) string { return Render(s, schema) }
	n := notifier(channel)
	return &RecoveryQueries{
		// Boot recovery: take every pending run of this executor ID (left by a
		// previous incarnation) that this binary can run. The epoch bump fences
		// any zombie of the old incarnation. Batches walk (created_at, id)
		// forward from ($5, $6), so a run is claimed once. The topic of a
		// Recv it waited on in memory is cleared (a replay sets it again).
		// $1 executor_id, $2 app_version, $3 names, $4 limit, $5/$6 after.
		claimOwn: r(`UPDATE {{schema}}.workflows w
SET epoch = w.epoch + 1, recovery_attempts = w.recovery_attempts + 1, wait_topic = NULL, wait_any = NULL, updated_at = now()
WHERE w.id = ANY(ARRAY(SELECT id FROM {{schema}}.workflows
	WHERE status = 'pending' AND executor_id = $1 AND app_version = $2 AND name = ANY($3::text[])
		AND queue_name IS NULL AND (created_at, id) > ($5::timestamptz, $6::text)
	ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED))
RETURNING w.id, w.name, w.input, w.epoch, w.recovery_attempts, w.deadline, w.queue_name, w.trace_context,
	clock_timestamp() - w.created_at, w.cancel_requested IS TRUE, w.created_at`),

		// The rest of boot recovery: the pending runs of this executor ID
		// that it did not claim ($4) go back unowned, for any executor to
		// claim (ClaimOrphans) as it has room; one notification wakes the
		// sweepers. Returns how many. $1 executor_id, $2 app_version,
		// $3 names, $4 the IDs claimed.
		handBackOwn: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET executor_id = NULL, epoch = epoch + 1, updated_at = now()
	WHERE status = 'pending' AND executor_id = $1 AND app_version = $2 AND name = ANY($3::text[])
		AND queue_name IS NULL AND NOT (id = ANY($4::text[]))
	RETURNING 1)
SELECT c.n, (CASE WHEN c.n > 0 THEN ` + n("'n:'") + ` END)::text FROM (SELECT count(*) AS n FROM u) c`),

		// Takeover: pending runs whose owner has no live lease, or no owner.
		// A run that was never claimed (epoch 0, started by StartTx) does not
		// count as a recovery. Runs of executors whose lease expired are
		// taken only with $5.
		// The sweep runs every second or so on every executor, so it reads
		// no finished run: each kind of candidate comes from its own index
		// (unowned runs: workflows_unowned_idx; parked runs that are due:
		// workflows_parked_due_idx; owned runs: workflows_owned_idx, i.e.
		// the runs in flight). One condition over all pending runs had
		// no index to use and read the whole table, history included
		// (0.9 s per sweep with 300,000 finished runs).
		// $1 executor_id, $2 app_version, $3 names, $4 limit, $5 take expired.
		claimOrphans: r(`UPDATE {{schema}}.workflows w
SET executor_id = $1, epoch = w.epoch + 1,
	recovery_attempts = w.recovery_attempts + CASE WHEN w.epoch = 0 OR w.wake_at IS NOT NULL THEN 0 ELSE 1 END,
	wake_at = NULL, wait_topic = NULL, wait_any = NULL, updated_at = now()
WHERE w.id = ANY(ARRAY(SELECT c.id FROM (
	SELECT id, created_at FROM (SELECT o.id, o.created_at FROM {{schema}}.workflows o
		WHERE o.status = 'pending' AND o.executor_id IS NULL AND o.wake_at IS NULL AND o.queue_name IS NULL
			AND o.app_version = $2 AND o.name = ANY($3::text[])
		ORDER BY o.created_at LIMIT $4 FOR UPDATE SKIP LOCKED) unowned
	UNION ALL
	SELECT id, created_at FROM (SELECT o.id, o.created_at FROM {{schema}}.workflows o
		WHERE o.status = 'pending' AND o.executor_id IS NULL AND o.wake_at IS NOT NULL AND o.wake_at <= now()
			AND o.app_version = $2 AND o.name = ANY($3::text[])
		ORDER BY o.wake_at LIMIT $4 FOR UPDATE SKIP LOCKED) due
	UNION ALL
	SELECT id, created_at FROM (SELECT o.id, o.created_at FROM {{schema}}.workflows o
		WHERE $5::bool AND o.status = 'pending' AND o.executor_id IS NOT NULL AND o.executor_id <> $1
			AND (o.queue_name IS NULL OR o.wake_at IS NOT NULL)
			AND o.app_version = $2 AND o.name = ANY($3::text[])
			AND NOT EXISTS (SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())
		ORDER BY o.created_at LIMIT $4 FOR UPDATE SKIP LOCKED) orphaned
	) c ORDER BY c.created_at LIMIT $4))
RETURNING w.id, w.name, w.input, w.epoch, w.recovery_attempts, w.deadline, w.queue_name, w.trace_context,
	clock_timestamp() - w.created_at, w.cancel_requested IS TRUE,
	-- Whether this claim counted a recovery attempt: the subquery reads
	-- the row as it was before this statement (a statement does not see
	-- its own writes), i.e. the CASE of the SET above.
	COALESCE((SELECT o.epoch <> 0 AND o.wake_at IS NULL FROM {{schema}}.workflows o WHERE o.id = w.id), false)`),

		// Pending runs of this executor that this binary cannot run are
		// handed back (owner NULL) so a compatible executor claims them.
		// $1 executor_id, $2 app_version, $3 names.
		releaseUnrunnable: r(`UPDATE {{schema}}.workflows
SET executor_id = NULL, epoch = epoch + 1, updated_at = now()
WHERE status = 'pending' AND executor_id = $1 AND (app_version <> $2 OR NOT (name = ANY($3::text[])))
RETURNING id, name, app_version`),

		// Pending unowned or orphaned runs this executor will not claim,
		// read from the indexes of unowned, parked and owned runs (see
		// ClaimOrphans): never the finished ones, nor the parked runs not
		// due yet (they wait for their wake-up, not for an executor; there
		// can be millions).
		// $1 app_version, $2 names.
		countOtherVersions: r(`SELECT name, app_version, count(*) FROM (
	SELECT o.name, o.app_version FROM {{schema}}.workflows o
	WHERE o.status = 'pending' AND o.executor_id IS NULL AND o.wake_at IS NULL
	UNION ALL
	SELECT o.name, o.app_version FROM {{schema}}.workflows o
	WHERE o.status = 'pending' AND o.executor_id IS NULL AND o.wake_at IS NOT NULL AND o.wake_at <= now()
	UNION ALL
	SELECT o.name, o.app_version FROM {{schema}}.workflows o
	WHERE o.status = 'pending' AND o.executor_id IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())
) o
WHERE o.app_version <> $1 OR NOT (o.name = ANY($2::text[]))
GROUP BY name, app_version ORDER BY name, app_version`),

		// Executors whose lease expired long ago and who own nothing.
		deleteDeadExecutors: r(`DELETE FROM {{schema}}.executors e
WHERE e.lease_expires_at < now() - interval '1 hour'
AND NOT EXISTS (SELECT 1 FROM {{schema}}.workflows w WHERE w.status = 'pending' AND w.executor_id = e.id)`),

		// $1 id, $2 epoch, $3 error.
		deadLetter: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET status = 'dead', error = $3, updated_at = now()
	WHERE id = $1 AND epoch = $2 AND status = 'pending'
	RETURNING id, notify)
SELECT CASE WHEN notify THEN ` + n(`'d:' || id`) + ` END FROM u`),

		// Pending, unparked runs owned by this executor that it can run
		// (adoptStrays keeps those not executing). $1 executor_id,
		// $2 app_version, $3 names.
		ownUnparked: r(`SELECT id, epoch, queue_name IS NOT NULL FROM {{schema}}.workflows
WHERE status = 'pending' AND executor_id = $1 AND wake_at IS NULL AND app_version = $2 AND name = ANY($3::text[])`),

		// Claim again a stray run of this executor (new epoch, same owner).
		// $1 id, $2 epoch seen, $3 executor_id.
		claimStray: r(`UPDATE {{schema}}.workflows SET epoch = epoch + 1, updated_at = now()
WHERE id = $1 AND epoch = $2 AND executor_id = $3 AND status = 'pending' AND wake_at IS NULL
RETURNING id, name, input, epoch, recovery_attempts, deadline, queue_name, trace_context,
	clock_timestamp() - created_at, cancel_requested IS TRUE`),

		// Hand a stray queued run of this executor back to its queue.
		// $1 id, $2 epoch seen, $3 executor_id.
		requeueStray: r(`UPDATE {{schema}}.workflows SET status = 'enqueued', executor_id = NULL, epoch = epoch + 1, updated_at = now()
WHERE id = $1 AND epoch = $2 AND executor_id = $3 AND status = 'pending' AND wake_at IS NULL AND queue_name IS NOT NULL
RETURNING queue_name`),
	}
}

// ClaimOwnParams are the arguments of ClaimOwn.
type ClaimOwnParams struct {
	ExecutorID string
	AppVersion string
	Names      []string // the workflows this binary registers
	Limit      int
	// The batch starts after the run (AfterCreated, AfterID): the last
	// one of the previous batch (the zero values for the first).
	AfterCreated time.Time
	AfterID      string
}

// ClaimOwnRow is a run ClaimOwn claimed, with its creation time (the
// position of the next batch).
type ClaimOwnRow struct {
	ClaimedRow
	Created time.Time
}

// ClaimOwn claims, with a new epoch and one more recovery attempt, up to
// p.Limit pending runs of p.ExecutorID (left by an earlier incarnation)
// that this binary can run and that are not queued, in (created_at, id)
// order after the position of p.
func (q *RecoveryQueries) ClaimOwn(ctx context.Context, db DBTX, p ClaimOwnParams) ([]ClaimOwnRow, error) {
	rows, err := queryIndexPlanned(ctx, db, q.claimOwn, p.ExecutorID, p.AppVersion, p.Names, p.Limit, p.AfterCreated, p.AfterID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ClaimOwnRow, error) {
		c := ClaimOwnRow{ClaimedRow: ClaimedRow{Recovered: true}} // every one counts an attempt
		err := row.Scan(append(c.dest(), &c.Created)...)
		return c, err
	})
}

// HandBackOwnParams are the arguments of HandBackOwn.
type HandBackOwnParams struct {
	ExecutorID string
	AppVersion string
	Names      []string
	Claimed    []string // the IDs ClaimOwn claimed, kept
}

// HandBackOwn hands the pending runs of p.ExecutorID that this binary can
// run, are not queued and were not claimed back unowned, for any executor
// to claim, and wakes the sweepers. It returns how many.
func (q *RecoveryQueries) HandBackOwn(ctx context.Context, db DBTX, p HandBackOwnParams) (int64, error) {
	var n int64
	var notified *string
	err := db.QueryRow(ctx, q.handBackOwn, p.ExecutorID, p.AppVersion, p.Names, p.Claimed).Scan(&n, &notified)
	return n, err
}

// ClaimOrphansParams are the arguments of ClaimOrphans.
type ClaimOrphansParams struct {
	ExecutorID string
	AppVersion string
	Names      []string
	Limit      int
	// TakeExpired also takes the runs of executors whose lease expired
	// (only an executor that judges leases may).
	TakeExpired bool
}

// ClaimOrphans claims for p.ExecutorID, oldest first, up to p.Limit
// pending runs of p.AppVersion and p.Names that have no live owner:
// unowned runs that are not queued, parked runs that are due and, with
// p.TakeExpired, runs of other executors whose lease expired.
// Recovered is set on the runs whose claim counted a recovery attempt
// (their executor died).
func (q *RecoveryQueries) ClaimOrphans(ctx context.Context, db DBTX, p ClaimOrphansParams) ([]ClaimedRow, error) {
	rows, err := queryIndexPlanned(ctx, db, q.claimOrphans, p.ExecutorID, p.AppVersion, p.Names, p.Limit, p.TakeExpired)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ClaimedRow, error) {
		var c ClaimedRow
		err := row.Scan(append(c.dest(), &c.Recovered)...)
		return c, err
	})
}

// ReleaseUnrunnableParams are the arguments of ReleaseUnrunnable.
type ReleaseUnrunnableParams struct {
	ExecutorID string
	AppVersion string
	Names      []string
}

// ReleaseUnrunnableRow is a run ReleaseUnrunnable handed back.
type ReleaseUnrunnableRow struct {
	ID         string
	Name       string
	AppVersion string
}

// ReleaseUnrunnable hands back unowned, with a new epoch, the pending
// runs of p.ExecutorID that this binary cannot run (another application
// version, or a workflow it does not register), and returns them.
func (q *RecoveryQueries) ReleaseUnrunnable(ctx context.Context, db DBTX, p ReleaseUnrunnableParams) ([]ReleaseUnrunnableRow, error) {
	rows, err := db.Query(ctx, q.releaseUnrunnable, p.ExecutorID, p.AppVersion, p.Names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReleaseUnrunnableRow, error) {
		var r ReleaseUnrunnableRow
		err := row.Scan(&r.ID, &r.Name, &r.AppVersion)
		return r, err
	})
}

// CountOtherVersionsParams are the arguments of CountOtherVersions.
type CountOtherVersionsParams struct {
	AppVersion string
	Names      []string
}

// CountOtherVersionsRow counts the runs of one workflow and version.
type CountOtherVersionsRow struct {
	Name       string
	AppVersion string
	Count      int64
}

// CountOtherVersions counts, per workflow and version, the pending runs
// without a live owner that an executor of p.AppVersion registering
// p.Names cannot run, ordered by name and version.
func (q *RecoveryQueries) CountOtherVersions(ctx context.Context, db DBTX, p CountOtherVersionsParams) ([]CountOtherVersionsRow, error) {
	rows, err := db.Query(ctx, q.countOtherVersions, p.AppVersion, p.Names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (CountOtherVersionsRow, error) {
		var r CountOtherVersionsRow
		err := row.Scan(&r.Name, &r.AppVersion, &r.Count)
		return r, err
	})
}

// DeleteDeadExecutors deletes the executors whose lease expired over an
// hour ago and that own no pending run, and returns how many.
func (q *RecoveryQueries) DeleteDeadExecutors(ctx context.Context, db DBTX) (int64, error) {
	tag, err := db.Exec(ctx, q.deleteDeadExecutors)
	return tag.RowsAffected(), err
}

// DeadLetterParams are the arguments of DeadLetter.
type DeadLetterParams struct {
	ID    string
	Epoch int64  // the claim's: a run claimed since is left alone
	Error []byte // the run's error, encoded JSON
}

// DeadLetter moves run p.ID, pending at p.Epoch, to the dead status with
// p.Error, and notifies its remote waiters. dead is false when the run
// was not pending at that epoch.
func (q *RecoveryQueries) DeadLetter(ctx context.Context, db DBTX, p DeadLetterParams) (dead bool, err error) {
	rows, err := db.Query(ctx, q.deadLetter, p.ID, p.Epoch, json.RawMessage(p.Error))
	if err != nil {
		return false, err
	}
	for rows.Next() {
		dead = true
	}
	return dead, rows.Err()
}

// OwnUnparkedParams are the arguments of OwnUnparked.
type OwnUnparkedParams struct {
	ExecutorID string
	AppVersion string
	Names      []string
}

// OwnUnparkedRow is a pending run of this executor that is not parked.
type OwnUnparkedRow struct {
	ID     string
	Epoch  int64
	Queued bool // it holds a slot of its queue
}

// OwnUnparked returns the pending runs owned by p.ExecutorID that are not
// parked and that this binary can run: those executing here, and strays.
func (q *RecoveryQueries) OwnUnparked(ctx context.Context, db DBTX, p OwnUnparkedParams) ([]OwnUnparkedRow, error) {
	rows, err := db.Query(ctx, q.ownUnparked, p.ExecutorID, p.AppVersion, p.Names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OwnUnparkedRow, error) {
		var r OwnUnparkedRow
		err := row.Scan(&r.ID, &r.Epoch, &r.Queued)
		return r, err
	})
}

// StrayParams name a stray run: pending, owned by ExecutorID at Epoch.
type StrayParams struct {
	ID         string
	Epoch      int64 // as OwnUnparked read it: a run that changed since is left alone
	ExecutorID string
}

// ClaimStray claims stray run p again (a new epoch, the same owner) and
// returns it; nothing when it is no longer pending, unparked and ours at
// p.Epoch.
func (q *RecoveryQueries) ClaimStray(ctx context.Context, db DBTX, p StrayParams) ([]ClaimedRow, error) {
	return collectClaimed(db.Query(ctx, q.claimStray, p.ID, p.Epoch, p.ExecutorID))
}

// RequeueStray hands queued stray run p back to its queue (enqueued,
// unowned, a new epoch) and returns the queue's name; ok is false when
// the run is no longer pending, unparked, queued and ours at p.Epoch.
func (q *RecoveryQueries) RequeueStray(ctx context.Context, db DBTX, p StrayParams) (queue string, ok bool, err error) {
	err = db.QueryRow(ctx, q.requeueStray, p.ID, p.Epoch, p.ExecutorID).Scan(&queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return queue, err == nil, err
}
