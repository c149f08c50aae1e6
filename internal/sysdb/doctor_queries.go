package sysdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// DoctorQueries are the statements of the doctor (durable doctor): what
// endangers a busy install, read from the server's statistics and
// catalogs and from the engine's tables. Every one only reads, and reads
// the engine's tables through their partial indexes of live runs, never
// the history. Ages are in seconds, measured by the server's clock.
type DoctorQueries struct {
	tableHealth      string
	statsVisibility  string
	xminHolders      string
	preparedXacts    string
	replicationSlots string
	databaseXIDAge   string
	longPending      string
	strayRuns        string
	queueBacklog     string
	deadExecutors    string
	liveVersions     string
}

// NewDoctorQueries renders the doctor's statements for schema.
func NewDoctorQueries(schema string) *DoctorQueries {
	r := func(s string) string { return Render(s, schema) }
	return &DoctorQueries{
		// The engine's tables as vacuum sees them. $1 schema name.
		tableHealth: `SELECT s.relname, s.n_live_tup, s.n_dead_tup,
	extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8,
	coalesce((SELECT o.option_value FROM pg_options_to_table(c.reloptions) o WHERE o.option_name = 'autovacuum_enabled'), 'true')
		NOT IN ('false', 'off', 'no', '0')
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = $1
ORDER BY s.relname`,

		// Whether this role sees the sessions of other roles in
		// pg_stat_activity (superuser, or pg_read_all_stats through
		// pg_monitor): without it their columns are NULL.
		statsVisibility: `SELECT r.rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
FROM pg_roles r WHERE r.rolname = current_user`,

		// Sessions whose transaction began more than $1 ms ago and holds
		// back the xmin horizon of this database's tables (a snapshot, or
		// a transaction ID of its own), oldest first, at most $2; this
		// session excluded. Sessions of other databases hold back only
		// the shared catalogs; those of none (replication) count.
		xminHolders: `SELECT a.pid, coalesce(a.datname, ''), coalesce(a.usename, ''), coalesce(a.application_name, ''),
	coalesce(a.state, ''), extract(epoch FROM now() - a.xact_start)::float8,
	greatest(age(a.backend_xmin), age(a.backend_xid))::bigint, left(coalesce(a.query, ''), 200)
FROM pg_stat_activity a
WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) AND a.pid <> pg_backend_pid()
	AND (a.datid IS NULL OR a.datname = current_database())
	AND a.xact_start < now() - $1 * interval '1 millisecond'
ORDER BY a.xact_start
LIMIT $2`,

		// Prepared transactions older than $1 ms: each holds the xmin
		// horizon and its locks until someone commits or rolls it back.
		preparedXacts: `SELECT p.gid, extract(epoch FROM now() - p.prepared)::float8, p.owner::text, p.database::text,
	age(p.transaction)::bigint
FROM pg_prepared_xacts p
WHERE p.prepared < now() - $1 * interval '1 millisecond'
ORDER BY p.prepared`,

		// Replication slots that hold back the xmin horizon.
		replicationSlots: `SELECT s.slot_name::text, s.slot_type, s.active, coalesce(s.database::text, ''),
	greatest(age(s.xmin), age(s.catalog_xmin))::bigint
FROM pg_replication_slots s
WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
ORDER BY 5 DESC`,

		// How far this database is from transaction ID wraparound.
		databaseXIDAge: `SELECT age(d.datfrozenxid)::bigint, current_setting('autovacuum_freeze_max_age')::bigint
FROM pg_database d WHERE d.datname = current_database()`,

		// Pending runs that are not parked, created more than $1 ms ago,
		// oldest first, at most $2, with how many there are in all: from
		// the index of owned runs and that of unowned ones.
		longPending: r(`SELECT p.id, p.name, coalesce(p.executor_id, ''), extract(epoch FROM now() - p.created_at)::float8,
	count(*) OVER ()
FROM (
	SELECT w.id, w.name, w.executor_id, w.created_at FROM {{schema}}.workflows w
	WHERE w.status = 'pending' AND w.executor_id IS NOT NULL AND w.wake_at IS NULL
		AND w.created_at < now() - $1 * interval '1 millisecond'
	UNION ALL
	SELECT w.id, w.name, w.executor_id, w.created_at FROM {{schema}}.workflows w
	WHERE w.status = 'pending' AND w.executor_id IS NULL AND w.wake_at IS NULL
		AND w.created_at < now() - $1 * interval '1 millisecond') p
ORDER BY p.created_at, p.id
LIMIT $2`),

		// Pending runs no executor has claimed though they could run: by
		// workflow and version, those unowned (not parked) for more than
		// $1 ms since their last change (kind unowned), and those parked
		// whose wake-up time passed more than $1 ms ago (kind overdue).
		// From the indexes of unowned and of parked runs.
		strayRuns: r(`SELECT 'unowned', w.name, w.app_version, count(*), min(w.id),
	extract(epoch FROM now() - min(w.updated_at))::float8
FROM {{schema}}.workflows w
WHERE w.status = 'pending' AND w.executor_id IS NULL AND w.wake_at IS NULL
	AND w.updated_at < now() - $1 * interval '1 millisecond'
GROUP BY w.name, w.app_version
UNION ALL
SELECT 'overdue', w.name, w.app_version, count(*), min(w.id), extract(epoch FROM now() - min(w.wake_at))::float8
FROM {{schema}}.workflows w
WHERE w.status = 'pending' AND w.executor_id IS NULL AND w.wake_at IS NOT NULL
	AND w.wake_at < now() - $1 * interval '1 millisecond'
GROUP BY w.name, w.app_version
ORDER BY 1, 2, 3`),

		// Queues whose runs have been ready to start for more than $1 ms:
		// how many, and the longest wait, from the index of queued runs.
		queueBacklog: r(`SELECT q.name, q.paused, b.n, b.longest
FROM {{schema}}.queues q
CROSS JOIN LATERAL (SELECT count(*) AS n,
		extract(epoch FROM now() - min(greatest(w.created_at, coalesce(w.not_before, w.created_at))))::float8 AS longest
	FROM {{schema}}.workflows w
	WHERE w.queue_name = q.name AND w.status = 'enqueued'
		AND greatest(w.created_at, coalesce(w.not_before, w.created_at)) < now() - $1 * interval '1 millisecond') b
WHERE b.n > 0
ORDER BY q.name`),

		// Executors whose lease expired more than $1 ms ago and that still
		// own pending runs, and owners of pending runs with no executor row
		// at all (a lease age of NULL).
		deadExecutors: r(`SELECT e.id, e.app_version, e.hostname, e.pid,
	extract(epoch FROM now() - e.lease_expires_at)::float8, o.n
FROM {{schema}}.executors e
CROSS JOIN LATERAL (SELECT count(*) AS n FROM {{schema}}.workflows w WHERE w.status = 'pending' AND w.executor_id = e.id) o
WHERE e.lease_expires_at < now() - $1 * interval '1 millisecond' AND o.n > 0
UNION ALL
SELECT w.executor_id, '', '', 0, NULL, count(*)
FROM {{schema}}.workflows w
WHERE w.status = 'pending' AND w.executor_id IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM {{schema}}.executors e WHERE e.id = w.executor_id)
GROUP BY w.executor_id
ORDER BY 1`),

		// The application versions of the executors with a live lease.
		liveVersions: r(`SELECT app_version, count(*) FROM {{schema}}.executors
WHERE lease_expires_at > now() GROUP BY app_version ORDER BY app_version`),
	}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// TableHealthRow is one table of the engine's schema as vacuum sees it.
type TableHealthRow struct {
	Table       string
	Live, Dead  int64
	SinceVacuum *float64 // seconds since its last vacuum, manual or auto; nil: never
	Autovacuum  bool     // autovacuum_enabled is not off for the table
}

// TableHealth reads the statistics of the tables of schema.
func (q *DoctorQueries) TableHealth(ctx context.Context, db DBTX, schema string) ([]TableHealthRow, error) {
	rows, err := db.Query(ctx, q.tableHealth, schema)
	return collectRows(rows, err, func(r pgx.CollectableRow) (TableHealthRow, error) {
		var t TableHealthRow
		err := r.Scan(&t.Table, &t.Live, &t.Dead, &t.SinceVacuum, &t.Autovacuum)
		return t, err
	})
}

// StatsVisibility reports whether this role sees other roles' sessions.
func (q *DoctorQueries) StatsVisibility(ctx context.Context, db DBTX) (bool, error) {
	var all bool
	err := db.QueryRow(ctx, q.statsVisibility).Scan(&all)
	return all, err
}

// XminHoldersParams are the arguments of XminHolders.
type XminHoldersParams struct {
	OlderThan time.Duration // transactions that began longer ago
	Limit     int
}

// XminHolderRow is a session whose transaction holds the xmin horizon.
type XminHolderRow struct {
	PID                        int
	Database, User, App, State string
	Seconds                    float64 // since its transaction began
	XIDAge                     int64   // transactions since its xmin
	Query                      string  // its current or last statement, at most 200 bytes
}

// XminHolders reads the sessions whose old transactions hold back vacuum.
func (q *DoctorQueries) XminHolders(ctx context.Context, db DBTX, p XminHoldersParams) ([]XminHolderRow, error) {
	rows, err := db.Query(ctx, q.xminHolders, ms(p.OlderThan), p.Limit)
	return collectRows(rows, err, func(r pgx.CollectableRow) (XminHolderRow, error) {
		var x XminHolderRow
		err := r.Scan(&x.PID, &x.Database, &x.User, &x.App, &x.State, &x.Seconds, &x.XIDAge, &x.Query)
		return x, err
	})
}

// PreparedXactRow is a prepared transaction.
type PreparedXactRow struct {
	GID             string
	Seconds         float64 // since it was prepared
	Owner, Database string
	XIDAge          int64
}

// PreparedXacts reads the prepared transactions older than olderThan.
func (q *DoctorQueries) PreparedXacts(ctx context.Context, db DBTX, olderThan time.Duration) ([]PreparedXactRow, error) {
	rows, err := db.Query(ctx, q.preparedXacts, ms(olderThan))
	return collectRows(rows, err, func(r pgx.CollectableRow) (PreparedXactRow, error) {
		var x PreparedXactRow
		err := r.Scan(&x.GID, &x.Seconds, &x.Owner, &x.Database, &x.XIDAge)
		return x, err
	})
}

// ReplicationSlotRow is a replication slot holding the xmin horizon.
type ReplicationSlotRow struct {
	Name, Type string
	Active     bool
	Database   string // "" for a physical slot
	XIDAge     int64  // of its xmin or catalog_xmin, the older
}

// ReplicationSlots reads the slots that hold back the xmin horizon.
func (q *DoctorQueries) ReplicationSlots(ctx context.Context, db DBTX) ([]ReplicationSlotRow, error) {
	rows, err := db.Query(ctx, q.replicationSlots)
	return collectRows(rows, err, func(r pgx.CollectableRow) (ReplicationSlotRow, error) {
		var s ReplicationSlotRow
		err := r.Scan(&s.Name, &s.Type, &s.Active, &s.Database, &s.XIDAge)
		return s, err
	})
}

// DatabaseXIDAgeRow is the age of this database's oldest unfrozen
// transaction ID, and the server's autovacuum_freeze_max_age.
type DatabaseXIDAgeRow struct {
	Age, FreezeMaxAge int64
}

// DatabaseXIDAge reads how far the database is from wraparound.
func (q *DoctorQueries) DatabaseXIDAge(ctx context.Context, db DBTX) (DatabaseXIDAgeRow, error) {
	var d DatabaseXIDAgeRow
	err := db.QueryRow(ctx, q.databaseXIDAge).Scan(&d.Age, &d.FreezeMaxAge)
	return d, err
}

// LongPendingParams are the arguments of LongPending.
type LongPendingParams struct {
	OlderThan time.Duration // runs created longer ago
	Limit     int
}

// LongPendingRow is a pending run that is not parked.
type LongPendingRow struct {
	ID, Name, ExecutorID string // ExecutorID "": unowned
	Seconds              float64
	Total                int64 // such runs in all, beyond Limit too
}

// LongPending reads the oldest pending runs that are not parked.
func (q *DoctorQueries) LongPending(ctx context.Context, db DBTX, p LongPendingParams) ([]LongPendingRow, error) {
	rows, err := db.Query(ctx, q.longPending, ms(p.OlderThan), p.Limit)
	return collectRows(rows, err, func(r pgx.CollectableRow) (LongPendingRow, error) {
		var l LongPendingRow
		err := r.Scan(&l.ID, &l.Name, &l.ExecutorID, &l.Seconds, &l.Total)
		return l, err
	})
}

// StrayRunsRow is a group of pending runs of one workflow and version
// that no executor claims: Kind "unowned" or "overdue" (parked, due).
type StrayRunsRow struct {
	Kind, Name, AppVersion string
	Count                  int64
	ExampleID              string
	Seconds                float64 // the longest wait
}

// StrayRuns reads the runs left unclaimed for longer than olderThan.
func (q *DoctorQueries) StrayRuns(ctx context.Context, db DBTX, olderThan time.Duration) ([]StrayRunsRow, error) {
	rows, err := db.Query(ctx, q.strayRuns, ms(olderThan))
	return collectRows(rows, err, func(r pgx.CollectableRow) (StrayRunsRow, error) {
		var s StrayRunsRow
		err := r.Scan(&s.Kind, &s.Name, &s.AppVersion, &s.Count, &s.ExampleID, &s.Seconds)
		return s, err
	})
}

// QueueBacklogRow is a queue with runs ready for long.
type QueueBacklogRow struct {
	Queue   string
	Paused  bool
	Count   int64
	Seconds float64 // the longest wait
}

// QueueBacklog reads the queues whose runs have waited longer than
// olderThan since they could start.
func (q *DoctorQueries) QueueBacklog(ctx context.Context, db DBTX, olderThan time.Duration) ([]QueueBacklogRow, error) {
	rows, err := db.Query(ctx, q.queueBacklog, ms(olderThan))
	return collectRows(rows, err, func(r pgx.CollectableRow) (QueueBacklogRow, error) {
		var b QueueBacklogRow
		err := r.Scan(&b.Queue, &b.Paused, &b.Count, &b.Seconds)
		return b, err
	})
}

// DeadExecutorRow is an executor without a live lease that owns pending
// runs.
type DeadExecutorRow struct {
	ID, AppVersion, Hostname string
	PID                      int
	SinceExpiry              *float64 // seconds since its lease expired; nil: no executor row
	Owned                    int64
}

// DeadExecutors reads the executors whose lease expired more than grace
// ago and still own pending runs.
func (q *DoctorQueries) DeadExecutors(ctx context.Context, db DBTX, grace time.Duration) ([]DeadExecutorRow, error) {
	rows, err := db.Query(ctx, q.deadExecutors, ms(grace))
	return collectRows(rows, err, func(r pgx.CollectableRow) (DeadExecutorRow, error) {
		var d DeadExecutorRow
		err := r.Scan(&d.ID, &d.AppVersion, &d.Hostname, &d.PID, &d.SinceExpiry, &d.Owned)
		return d, err
	})
}

// LiveVersionRow counts the live executors of an application version.
type LiveVersionRow struct {
	AppVersion string
	Executors  int64
}

// LiveVersions reads the versions of the executors with a live lease.
func (q *DoctorQueries) LiveVersions(ctx context.Context, db DBTX) ([]LiveVersionRow, error) {
	rows, err := db.Query(ctx, q.liveVersions)
	return collectRows(rows, err, func(r pgx.CollectableRow) (LiveVersionRow, error) {
		var l LiveVersionRow
		err := r.Scan(&l.AppVersion, &l.Executors)
		return l, err
	})
}

// collectRows reads every row of a query with scan.
func collectRows[T any](rows pgx.Rows, err error, scan func(pgx.CollectableRow) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}
