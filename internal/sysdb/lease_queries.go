package sysdb

import (
	"context"
	"time"
)

// LeaseQueries are the statements of this executor's lease (its row in
// the executors table) and of the fence check that tells whether a run is
// still this executor's.
type LeaseQueries struct {
	registerExecutor string
	heartbeat        string
	releaseLease     string
	ownershipCheck   string
}

// NewLeaseQueries renders the lease statements for schema.
func NewLeaseQueries(schema string) *LeaseQueries {
	r := func(s string) string { return Render(s, schema) }
	return &LeaseQueries{
		// Registers the executor at Launch. It also returns, for Launch's
		// hint (no round trip of its own), the collation of the run ID
		// column (C in an install made since migration 015) and the
		// database's default: its name and, from Postgres 15 on, its
		// provider (read through to_jsonb, so that the statement also runs
		// where pg_database has no such column).
		// $1 id, $2 incarnation, $3 app_version, $4 hostname, $5 pid, $6 lease (interval ms).
		registerExecutor: r(`INSERT INTO {{schema}}.executors (id, incarnation, app_version, hostname, pid, lease_expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE SET incarnation = EXCLUDED.incarnation, app_version = EXCLUDED.app_version,
	hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = now(), heartbeat_at = now(),
	lease_expires_at = EXCLUDED.lease_expires_at
RETURNING (SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = '{{schema}}.workflows'::regclass AND a.attname = 'id'),
	(SELECT datcollate FROM pg_database WHERE datname = current_database()),
	(SELECT to_jsonb(db) ->> 'datlocprovider' FROM pg_database db WHERE db.datname = current_database())`),

		// $1 id, $2 incarnation, $3 lease ms.
		heartbeat: r(`UPDATE {{schema}}.executors SET heartbeat_at = now(), lease_expires_at = now() + $3 * interval '1 millisecond'
WHERE id = $1 AND incarnation = $2`),

		releaseLease: r(`UPDATE {{schema}}.executors SET lease_expires_at = now() - interval '1 second'
WHERE id = $1 AND incarnation = $2`),

		// $1 workflow_id, $2 pos.
		ownershipCheck: r(`SELECT w.status, w.epoch, s.status FROM {{schema}}.workflows w
LEFT JOIN {{schema}}.steps s ON s.workflow_id = w.id AND s.pos = $2
WHERE w.id = $1`),
	}
}

// RegisterExecutorParams are the arguments of RegisterExecutor.
type RegisterExecutorParams struct {
	ExecutorID  string
	Incarnation string // this process's: a lease of another incarnation is not renewed by this one
	AppVersion  string
	Hostname    string
	PID         int
	LeaseTTL    time.Duration // sent in whole milliseconds
}

// RegisterExecutorRow is what RegisterExecutor returns besides the lease:
// the collations Launch's hint about run IDs reads.
type RegisterExecutorRow struct {
	IDCollation string  // collation of the run ID column ("C", or "default")
	DBCollate   string  // the database's default collation
	DBProvider  *string // its provider; nil before Postgres 15
}

// RegisterExecutor takes the lease of p.ExecutorID for this incarnation,
// expiring p.LeaseTTL from now, whoever held it before.
func (q *LeaseQueries) RegisterExecutor(ctx context.Context, db DBTX, p RegisterExecutorParams) (RegisterExecutorRow, error) {
	var row RegisterExecutorRow
	err := db.QueryRow(ctx, q.registerExecutor, p.ExecutorID, p.Incarnation, p.AppVersion, p.Hostname, p.PID,
		p.LeaseTTL.Milliseconds()).Scan(&row.IDCollation, &row.DBCollate, &row.DBProvider)
	return row, err
}

// HeartbeatParams are the arguments of Heartbeat.
type HeartbeatParams struct {
	ExecutorID  string
	Incarnation string
	LeaseTTL    time.Duration // sent in whole milliseconds
}

// Heartbeat renews the lease of p.ExecutorID held by p.Incarnation to
// expire p.LeaseTTL from now. renewed is false when there is no such
// lease: the row was deleted or another process registered the ID.
func (q *LeaseQueries) Heartbeat(ctx context.Context, db DBTX, p HeartbeatParams) (renewed bool, err error) {
	tag, err := db.Exec(ctx, q.heartbeat, p.ExecutorID, p.Incarnation, p.LeaseTTL.Milliseconds())
	return tag.RowsAffected() > 0, err
}

// ReleaseLeaseParams are the arguments of ReleaseLease.
type ReleaseLeaseParams struct {
	ExecutorID  string
	Incarnation string
}

// ReleaseLease expires the lease of p.ExecutorID held by p.Incarnation at
// once, so that peers may take over its pending runs.
func (q *LeaseQueries) ReleaseLease(ctx context.Context, db DBTX, p ReleaseLeaseParams) error {
	_, err := db.Exec(ctx, q.releaseLease, p.ExecutorID, p.Incarnation)
	return err
}

// OwnershipCheckParams are the arguments of OwnershipCheck.
type OwnershipCheckParams struct {
	WorkflowID string
	Pos        int
}

// OwnershipCheckRow is a run's status and epoch, with the status of its
// step at a position.
type OwnershipCheckRow struct {
	Status     string
	Epoch      int64
	StepStatus *string // nil: no step recorded at the position
}

// OwnershipCheck reads whose run p.WorkflowID is (its epoch) and whether
// its step at p.Pos is recorded: what a checkpoint that wrote nothing
// needs to know why. pgx.ErrNoRows: there is no such run.
func (q *LeaseQueries) OwnershipCheck(ctx context.Context, db DBTX, p OwnershipCheckParams) (OwnershipCheckRow, error) {
	var row OwnershipCheckRow
	err := db.QueryRow(ctx, q.ownershipCheck, p.WorkflowID, p.Pos).Scan(&row.Status, &row.Epoch, &row.StepStatus)
	return row, err
}
