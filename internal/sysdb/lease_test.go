package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// leaseLeft returns how long the lease of executor id has left (negative:
// expired) and its incarnation.
func leaseLeft(tb testing.TB, pool *pgxpool.Pool, schema, id string) (time.Duration, string) {
	tb.Helper()
	var left time.Duration
	var inc string
	require.NoError(tb, pool.QueryRow(context.Background(), Render(
		`SELECT lease_expires_at - now(), incarnation FROM {{schema}}.executors WHERE id = $1`, schema), id).Scan(&left, &inc))
	return left, inc
}

func TestRegisterExecutor(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewLeaseQueries(schema)
	p := RegisterExecutorParams{ExecutorID: "ex", Incarnation: "a", AppVersion: "v", Hostname: "h", PID: 7, LeaseTTL: time.Hour}
	row, err := q.RegisterExecutor(ctx, pool, p)
	require.NoError(t, err)
	require.Equal(t, "C", row.IDCollation, "the run ID column of a fresh install compares in C")
	require.NotEmpty(t, row.DBCollate)
	left, inc := leaseLeft(t, pool, schema, "ex")
	require.Equal(t, "a", inc)
	require.Greater(t, left, 59*time.Minute)

	// A new incarnation takes the ID over, whatever the lease held.
	p.Incarnation, p.LeaseTTL = "b", time.Minute
	_, err = q.RegisterExecutor(ctx, pool, p)
	require.NoError(t, err)
	left, inc = leaseLeft(t, pool, schema, "ex")
	require.Equal(t, "b", inc)
	require.Less(t, left, 2*time.Minute)
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewLeaseQueries(schema)
	_, err := q.RegisterExecutor(ctx, pool, RegisterExecutorParams{ExecutorID: "ex", Incarnation: "a", AppVersion: "v", LeaseTTL: time.Second})
	require.NoError(t, err)

	renewed, err := q.Heartbeat(ctx, pool, HeartbeatParams{ExecutorID: "ex", Incarnation: "a", LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.True(t, renewed)
	left, _ := leaseLeft(t, pool, schema, "ex")
	require.Greater(t, left, 59*time.Minute, "the lease runs LeaseTTL from now")

	// Another incarnation's heartbeat (the ID was taken over) renews nothing.
	renewed, err = q.Heartbeat(ctx, pool, HeartbeatParams{ExecutorID: "ex", Incarnation: "old", LeaseTTL: 2 * time.Hour})
	require.NoError(t, err)
	require.False(t, renewed)
	left, _ = leaseLeft(t, pool, schema, "ex")
	require.Less(t, left, 61*time.Minute)
	renewed, err = q.Heartbeat(ctx, pool, HeartbeatParams{ExecutorID: "gone", Incarnation: "a", LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.False(t, renewed, "no row: nothing renewed")
}

func TestReleaseLease(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewLeaseQueries(schema)
	_, err := q.RegisterExecutor(ctx, pool, RegisterExecutorParams{ExecutorID: "ex", Incarnation: "a", AppVersion: "v", LeaseTTL: time.Hour})
	require.NoError(t, err)

	require.NoError(t, q.ReleaseLease(ctx, pool, ReleaseLeaseParams{ExecutorID: "ex", Incarnation: "other"}))
	left, _ := leaseLeft(t, pool, schema, "ex")
	require.Positive(t, left, "another incarnation's release leaves the lease alone")

	require.NoError(t, q.ReleaseLease(ctx, pool, ReleaseLeaseParams{ExecutorID: "ex", Incarnation: "a"}))
	left, _ = leaseLeft(t, pool, schema, "ex")
	require.Negative(t, left, "released: expired at once")
}

// TestOwnershipCheck: the check a fenced write makes to learn why it
// wrote nothing. An executor whose lease was lost and whose run a peer
// took over reads a new epoch.
func TestOwnershipCheck(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewLeaseQueries(schema)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ('r', 'w', 'pending', 'v', 'ex', 2)`)
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status) VALUES ('r', 0, 's', 'done')`)

	row, err := q.OwnershipCheck(ctx, pool, OwnershipCheckParams{WorkflowID: "r", Pos: 0})
	require.NoError(t, err)
	require.Equal(t, "pending", row.Status)
	require.Equal(t, int64(2), row.Epoch)
	require.NotNil(t, row.StepStatus)
	require.Equal(t, "done", *row.StepStatus)

	row, err = q.OwnershipCheck(ctx, pool, OwnershipCheckParams{WorkflowID: "r", Pos: 1})
	require.NoError(t, err)
	require.Nil(t, row.StepStatus, "no step recorded at 1")

	_, err = q.OwnershipCheck(ctx, pool, OwnershipCheckParams{WorkflowID: "none", Pos: 0})
	require.ErrorIs(t, err, pgx.ErrNoRows)

	// ex's lease is lost (it has no executor row): a peer takes the run
	// over, and ex's check then sees an epoch that is not its own.
	got, err := NewRecoveryQueries(schema, "").ClaimOrphans(ctx, pool, ClaimOrphansParams{ExecutorID: "peer", AppVersion: "v",
		Names: []string{"w"}, Limit: 10, TakeExpired: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	row, err = q.OwnershipCheck(ctx, pool, OwnershipCheckParams{WorkflowID: "r", Pos: 1})
	require.NoError(t, err)
	require.Equal(t, int64(3), row.Epoch)
}
