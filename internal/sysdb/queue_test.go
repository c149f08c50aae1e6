package sysdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// queueFix is a migrated schema with its queue statements, which send
// notifications on the schema's channel.
type queueFix struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	q      *QueueQueries
}

func newQueueFix(t *testing.T) *queueFix {
	t.Parallel()
	pool, schema := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &queueFix{t: t, ctx: ctx, pool: pool, schema: schema, q: NewQueueQueries(schema, ChannelName(schema))}
}

// exec runs sql, with the schema marker, on the pool.
func (f *queueFix) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, Render(sql, f.schema), args...)
	require.NoError(f.t, err, sql)
}

// value reads one value of sql, with the schema marker.
func value[T any](f *queueFix, sql string, args ...any) T {
	f.t.Helper()
	var v T
	require.NoError(f.t, f.pool.QueryRow(f.ctx, Render(sql, f.schema), args...).Scan(&v), sql)
	return v
}

// declare declares queue name with settings s.
func (f *queueFix) declare(name string, s QueueSettings) {
	f.t.Helper()
	require.NoError(f.t, f.q.Declare(f.ctx, f.pool, QueueDeclareParams{Name: name, Settings: s, Declared: fmt.Sprint(s)}))
}

// listen returns a connection listening on the schema's channel.
func (f *queueFix) listen() *pgx.Conn {
	f.t.Helper()
	conn, err := pgx.Connect(f.ctx, f.pool.Config().ConnConfig.ConnString())
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(f.ctx, "LISTEN "+pgx.Identifier{ChannelName(f.schema)}.Sanitize())
	require.NoError(f.t, err)
	return conn
}

// notified returns the payload of the next notification conn receives.
func (f *queueFix) notified(conn *pgx.Conn) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(f.t, err, "no notification")
	return n.Payload
}

// status returns status, executor_id (or "-") and epoch of run id.
func (f *queueFix) status(id string) string {
	f.t.Helper()
	return value[string](f, `SELECT status || ' ' || coalesce(executor_id, '-') || ' ' || epoch FROM {{schema}}.workflows WHERE id = $1`, id)
}

func TestQueueDeclare(t *testing.T) {
	f := newQueueFix(t)
	code := QueueSettings{GlobalConcurrency: 1, WorkerConcurrency: 2, PartitionConcurrency: 3, RateLimit: 4,
		RatePeriod: 5 * time.Second, ReleaseParked: true}
	declare := func(s QueueSettings, declared string) {
		require.NoError(t, f.q.Declare(f.ctx, f.pool, QueueDeclareParams{Name: "q", Settings: s, Declared: declared}))
	}
	declare(code, "v1")
	row, err := f.q.Settings(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, QueueSettingsRow{Settings: code}, row)

	live := QueueSettings{GlobalConcurrency: 9}
	found, err := f.q.Update(f.ctx, f.pool, QueueUpdateParams{Name: "q", Settings: live})
	require.NoError(t, err)
	require.True(t, found)
	declare(code, "v1") // a restart with the same code keeps the live settings
	row, err = f.q.Settings(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, live, row.Settings)

	deployed := QueueSettings{WorkerConcurrency: 7}
	declare(deployed, "v2") // a deploy with other settings overwrites them
	row, err = f.q.Settings(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, deployed, row.Settings)
}

func TestQueueSettingsAndLockAndCount(t *testing.T) {
	f := newQueueFix(t)
	_, err := f.q.Settings(f.ctx, f.pool, "q")
	require.ErrorIs(t, err, pgx.ErrNoRows)
	s := QueueSettings{GlobalConcurrency: 3, RateLimit: 2, RatePeriod: time.Minute, FairShare: true,
		PartitionRateLimit: 4, PartitionRatePeriod: 2 * time.Second}
	f.declare("q", s)
	f.exec(`UPDATE {{schema}}.queues SET paused = true`)
	row, err := f.q.Settings(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, QueueSettingsRow{Settings: s, Paused: true}, row)

	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, _, err = f.q.LockAndCount(f.ctx, tx, "nope")
	require.ErrorIs(t, err, pgx.ErrNoRows)
	locked, _, err := f.q.LockAndCount(f.ctx, tx, "q")
	require.NoError(t, err)
	require.Equal(t, DispatchRow{QueueSettingsRow: QueueSettingsRow{Settings: s, Paused: true}}, locked)
	// The queue's row stays locked until tx ends: another dispatch, a
	// pause or an update of the queue waits for it.
	_, err = f.pool.Exec(f.ctx, Render(`SELECT 1 FROM {{schema}}.queues WHERE name = 'q' FOR NO KEY UPDATE NOWAIT`, f.schema))
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "55P03", "the row is not locked: %v", err)
	require.NoError(t, tx.Rollback(f.ctx))
	_, err = f.pool.Exec(f.ctx, Render(`SELECT 1 FROM {{schema}}.queues WHERE name = 'q' FOR NO KEY UPDATE NOWAIT`, f.schema))
	require.NoError(t, err)
}

func TestQueueUpdateAndSetPaused(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{})
	conn := f.listen()

	found, err := f.q.Update(f.ctx, f.pool, QueueUpdateParams{Name: "nope", Settings: QueueSettings{GlobalConcurrency: 1}})
	require.NoError(t, err)
	require.False(t, found)
	s := QueueSettings{GlobalConcurrency: 1, WorkerConcurrency: 2, PartitionConcurrency: 3, RateLimit: 4,
		RatePeriod: 1500 * time.Millisecond, ReleaseParked: true}
	found, err = f.q.Update(f.ctx, f.pool, QueueUpdateParams{Name: "q", Settings: s})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "q:q", f.notified(conn), "an update wakes the queue's dispatchers")
	row, err := f.q.Settings(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, QueueSettingsRow{Settings: s}, row)

	found, err = f.q.SetPaused(f.ctx, f.pool, QueuePausedParams{Name: "nope", Paused: true})
	require.NoError(t, err)
	require.False(t, found)
	for _, paused := range []bool{true, false} {
		found, err = f.q.SetPaused(f.ctx, f.pool, QueuePausedParams{Name: "q", Paused: paused})
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "q:q", f.notified(conn))
		row, err = f.q.Settings(f.ctx, f.pool, "q")
		require.NoError(t, err)
		require.Equal(t, paused, row.Paused)
		require.Equal(t, s, row.Settings, "pausing leaves the limits alone")
	}
}

func TestQueueEnqueue(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{})
	f.declare("quiet", QueueSettings{})
	conn := f.listen()
	notBefore := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	deadline := notBefore.Add(time.Hour)
	p := EnqueueParams{ID: "r1", Workflow: "w", AppVersion: "v1", Input: []byte(`{"a":1}`), Queue: "q", Priority: -3,
		PartitionKey: "k", DedupID: "d", NotBefore: &notBefore, Deadline: &deadline, TraceContext: "tc"}

	res, err := f.q.Enqueue(f.ctx, f.pool, EnqueueParams{ID: "r0", Workflow: "w", AppVersion: "v1", Queue: "nope", Input: []byte(`1`)})
	require.NoError(t, err)
	require.Equal(t, EnqueueRow{}, res, "no queue, no run")
	require.Zero(t, value[int](f, `SELECT count(*) FROM {{schema}}.workflows`))

	res, err = f.q.Enqueue(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, EnqueueRow{QueueFound: true, Inserted: true}, res)
	require.Equal(t, "w enqueued v1 - 0 {\"a\":1} q -3 k d tc",
		value[string](f, `SELECT concat_ws(' ', name, status, app_version, coalesce(executor_id, '-'), epoch, input::text,
			queue_name, priority, partition_key, dedup_id, trace_context) FROM {{schema}}.workflows WHERE id = 'r1'`))
	var nb, dl time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, Render(`SELECT not_before, deadline FROM {{schema}}.workflows WHERE id = 'r1'`, f.schema)).Scan(&nb, &dl))
	require.True(t, nb.Equal(notBefore) && dl.Equal(deadline), "not_before %v deadline %v", nb, dl)

	// Neither the same ID nor the same dedup ID is inserted again.
	res, err = f.q.Enqueue(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, EnqueueRow{QueueFound: true}, res)
	p2 := p
	p2.ID = "r2"
	res, err = f.q.Enqueue(f.ctx, f.pool, p2)
	require.NoError(t, err)
	require.Equal(t, EnqueueRow{QueueFound: true}, res)
	p2.DedupID = ""
	res, err = f.q.Enqueue(f.ctx, f.pool, p2)
	require.NoError(t, err)
	require.Equal(t, EnqueueRow{QueueFound: true, Inserted: true}, res)
	require.Equal(t, "-", value[string](f, `SELECT coalesce(dedup_id, '-') FROM {{schema}}.workflows WHERE id = 'r2'`))

	// Only an enqueue with Notify wakes the dispatchers on its commit:
	// the first notification is the second enqueue's.
	res, err = f.q.Enqueue(f.ctx, f.pool, EnqueueParams{ID: "r3", Workflow: "w", AppVersion: "v1", Input: []byte(`1`), Queue: "quiet"})
	require.NoError(t, err)
	require.True(t, res.Inserted)
	res, err = f.q.Enqueue(f.ctx, f.pool, EnqueueParams{ID: "r4", Workflow: "w", AppVersion: "v1", Input: []byte(`1`), Queue: "q", Notify: true})
	require.NoError(t, err)
	require.True(t, res.Inserted)
	require.Equal(t, "q:q", f.notified(conn))
	require.Equal(t, "- - -", value[string](f, `SELECT concat_ws(' ', coalesce(dedup_id, '-'), coalesce(partition_key, '-'),
		coalesce(trace_context, '-')) FROM {{schema}}.workflows WHERE id = 'r4'`), "empty strings are NULL")
}

func TestQueueCounts(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{GlobalConcurrency: 10, RateLimit: 5, RatePeriod: time.Minute})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, rate_start, not_before) VALUES
		('p1', 'w', 'pending', 'v', 'x', 'q', now() - interval '10 seconds', NULL),
		('p2', 'w', 'pending', 'v', 'y', 'q', now() - interval '2 hours', NULL),
		('c1', 'w', 'cancelled', 'v', 'x', 'q', now() - interval '20 seconds', NULL),
		('c2', 'w', 'cancelled', 'v', NULL, 'q', NULL, NULL),
		('s1', 'w', 'success', 'v', NULL, 'q', now() - interval '30 seconds', NULL),
		('e1', 'w', 'enqueued', 'v', NULL, 'q', NULL, now() + interval '1 hour'),
		('e2', 'w', 'enqueued', 'v', NULL, 'q', NULL, now() + interval '2 hours'),
		('e3', 'w', 'enqueued', 'v', NULL, 'q', NULL, now() - interval '1 hour'),
		('o1', 'w', 'pending', 'v', 'x', 'other', now(), now() + interval '1 minute')`)

	c, err := f.q.Counts(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, 3, c.Running, "pending runs and a cancelled one still stopping hold slots")
	require.Equal(t, 3, c.Recent, "starts within the period, whatever the run's status")
	require.NotNil(t, c.RateFree)
	require.InDelta(t, 30*time.Second, *c.RateFree, float64(20*time.Second), "the oldest start in the period leaves it in ~30s")
	require.NotNil(t, c.NextDelayed)
	require.InDelta(t, time.Hour, *c.NextDelayed, float64(time.Minute))

	_, err = f.q.Update(f.ctx, f.pool, QueueUpdateParams{Name: "q", Settings: QueueSettings{}})
	require.NoError(t, err)
	c, err = f.q.Counts(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, 0, c.Running, "not counted without a global limit")
	require.Equal(t, 0, c.Recent, "not counted without a rate limit")
	require.Nil(t, c.RateFree)
	require.NotNil(t, c.NextDelayed)

	f.declare("empty", QueueSettings{GlobalConcurrency: 1, RateLimit: 1, RatePeriod: time.Minute})
	c, err = f.q.Counts(f.ctx, f.pool, "empty")
	require.NoError(t, err)
	require.Equal(t, QueueCountsRow{}, c)

	_, err = f.q.Counts(f.ctx, f.pool, "nosuch")
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

// TestQueueLockAndCountSeesTheHolder: a dispatch that waited for the
// queue's lock counts the runs the holder claimed before it committed.
// Read in the statement that waited, the counts would come from a
// snapshot taken before the wait, and two executors could each fill a
// global limit.
func TestQueueLockAndCountSeesTheHolder(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{GlobalConcurrency: 10})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name)
		SELECT 'e' || i, 'w', 'enqueued', 'v', 'q' FROM generate_series(1, 5) i`)

	holder, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(f.ctx) }()
	row, c, err := f.q.LockAndCount(f.ctx, holder, "q")
	require.NoError(t, err)
	require.Equal(t, 10, row.Settings.GlobalConcurrency)
	require.Equal(t, 0, c.Running)

	type result struct {
		c   QueueCountsRow
		err error
	}
	waited := make(chan result, 1)
	go func() {
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			waited <- result{err: err}
			return
		}
		defer func() { _ = tx.Rollback(f.ctx) }()
		_, c, err := f.q.LockAndCount(f.ctx, tx, "q")
		waited <- result{c, err}
	}()
	// The second dispatch waits for the lock; meanwhile the holder claims.
	require.Eventually(t, func() bool {
		return value[int64](f, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`,
			holder.Conn().PgConn().PID()) > 0
	}, 10*time.Second, 5*time.Millisecond, "the second dispatch never waited for the queue's lock")
	got, err := f.q.ClaimSimple(f.ctx, holder, ClaimSimpleParams{Queue: "q", ExecutorID: "x", AppVersion: "v", Workflows: []string{"w"}, Limit: 3})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.NoError(t, holder.Commit(f.ctx))
	r := <-waited
	require.NoError(t, r.err)
	require.Equal(t, 3, r.c.Running, "the counts of a dispatch that waited for the lock include what the holder claimed")
}

// claimFixture adds queue q's runs: a..e ready in this priority order
// (e of workflow "x"), f delayed, g re-queued under app version v0, h
// re-queued under v1 after a crash, i never started under v0.
func claimFixture(f *queueFix) {
	f.declare("q", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, queue_name, priority, partition_key,
			not_before, input, deadline, trace_context, created_at, recovery_attempts, wake_at) VALUES
		('a', 'w', 'enqueued', 'v1', 0, 'q', -1, 'k1', NULL, '"in"', now() + interval '1 day', 'tc', now() - interval '1 minute', 0, NULL),
		('b', 'w', 'enqueued', 'v1', 0, 'q', 0, 'k1', NULL, NULL, NULL, NULL, now() - interval '50 seconds', 0, NULL),
		('c', 'w', 'enqueued', 'v1', 0, 'q', 0, 'k2', now() - interval '1 minute', NULL, NULL, NULL, now() - interval '40 seconds', 0, NULL),
		('d', 'w', 'enqueued', 'v1', 0, 'q', 0, NULL, NULL, NULL, NULL, NULL, now() - interval '30 seconds', 0, NULL),
		('e', 'x', 'enqueued', 'v1', 0, 'q', 0, NULL, NULL, NULL, NULL, NULL, now() - interval '20 seconds', 0, NULL),
		('f', 'w', 'enqueued', 'v1', 0, 'q', 0, NULL, now() + interval '1 hour', NULL, NULL, NULL, now() - interval '10 seconds', 0, NULL),
		('g', 'w', 'enqueued', 'v0', 2, 'q', 0, NULL, NULL, NULL, NULL, NULL, now() - interval '9 seconds', 0, NULL),
		('h', 'w', 'enqueued', 'v1', 2, 'q', 0, NULL, NULL, NULL, NULL, NULL, now() - interval '8 seconds', 1, NULL),
		('i', 'w', 'enqueued', 'v0', 0, 'q', 0, NULL, NULL, NULL, NULL, NULL, now() - interval '7 seconds', 0, NULL),
		('z', 'w', 'enqueued', 'v1', 0, 'other', -9, NULL, NULL, NULL, NULL, NULL, now() - interval '1 hour', 0, NULL)`)
}

func sortClaimed(rows []ClaimedRow) {
	slices.SortFunc(rows, func(x, y ClaimedRow) int { return cmp.Compare(x.ID, y.ID) })
}

func claimedIDs(rows []ClaimedRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

func TestQueueClaimSimple(t *testing.T) {
	f := newQueueFix(t)
	claimFixture(f)
	p := ClaimSimpleParams{Queue: "q", ExecutorID: "ex", AppVersion: "v1", Workflows: []string{"w"}, Limit: 2}
	got, err := f.q.ClaimSimple(f.ctx, f.pool, p)
	require.NoError(t, err)
	sortClaimed(got)
	require.Equal(t, []string{"a", "b"}, claimedIDs(got), "the first runs in priority order, up to the limit")
	a := got[0]
	require.Equal(t, "w", a.Name)
	require.JSONEq(t, `"in"`, string(a.Input))
	require.Equal(t, int64(1), a.Epoch)
	require.Zero(t, a.Attempts)
	require.NotNil(t, a.Deadline)
	require.Equal(t, "q", *a.Queue)
	require.Equal(t, "tc", *a.Trace)
	require.NotNil(t, a.Queued)
	require.Greater(t, *a.Queued, 50*time.Second)
	require.Equal(t, "pending ex 1", f.status("a"))
	require.Zero(t, value[int](f, `SELECT count(*) FROM {{schema}}.workflows WHERE rate_start IS NOT NULL`), "no rate limit, no start recorded")

	// A run locked by another transaction is skipped, not waited for.
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = tx.Exec(f.ctx, Render(`SELECT 1 FROM {{schema}}.workflows WHERE id = 'c' FOR UPDATE`, f.schema))
	require.NoError(t, err)
	p.Limit, p.Rated = 100, true
	bounded, cancel := context.WithTimeout(f.ctx, 10*time.Second) // a claim that waits fails
	defer cancel()
	got, err = f.q.ClaimSimple(bounded, f.pool, p)
	require.NoError(t, err)
	sortClaimed(got)
	// Not: c (locked), e (workflow x), f (delayed), g (re-queued under v0),
	// z (another queue). i never started: any version runs it.
	require.Equal(t, []string{"d", "h", "i"}, claimedIDs(got))
	require.Equal(t, 2, got[1].Attempts, "a re-queued run that had started counts a recovery")
	require.Equal(t, "v1", value[string](f, `SELECT app_version FROM {{schema}}.workflows WHERE id = 'i'`))
	require.Equal(t, 3, value[int](f, `SELECT count(*) FROM {{schema}}.workflows WHERE rate_start IS NOT NULL`), "rated: starts recorded")
	require.NoError(t, tx.Rollback(f.ctx))
	require.Equal(t, "enqueued - 0", f.status("c"))
}

func TestQueueClaimIDs(t *testing.T) {
	f := newQueueFix(t)
	claimFixture(f)
	f.exec(`UPDATE {{schema}}.workflows SET status = 'pending', executor_id = 'x' WHERE id = 'b'`)
	got, err := f.q.ClaimIDs(f.ctx, f.pool, ClaimIDsParams{IDs: []string{"a", "b", "h", "nope"}, ExecutorID: "ex", AppVersion: "v1", Rated: true})
	require.NoError(t, err)
	sortClaimed(got)
	require.Equal(t, []string{"a", "h"}, claimedIDs(got), "only the runs still queued")
	require.Equal(t, "pending ex 1", f.status("a"))
	require.Equal(t, "pending ex 3", f.status("h"))
	require.Equal(t, 2, got[1].Attempts)
	require.Equal(t, "pending x 0", f.status("b"))
	require.Equal(t, 2, value[int](f, `SELECT count(*) FROM {{schema}}.workflows WHERE rate_start IS NOT NULL`))
}

func TestQueueRequeue(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{})
	f.declare("r", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.executors (id, incarnation, app_version, lease_expires_at) VALUES
		('live', 'i', 'v', now() + interval '1 hour'), ('dead', 'i', 'v', now() - interval '1 second')`)
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name, wake_at) VALUES
		('own', 'w', 'pending', 'v', 'me', 1, 'q', NULL),
		('ownparked', 'w', 'pending', 'v', 'me', 1, 'q', now() + interval '1 hour'),
		('unowned', 'w', 'pending', 'v', NULL, 1, 'q', NULL),
		('ofdead', 'w', 'pending', 'v', 'dead', 1, 'q', NULL),
		('ofgone', 'w', 'pending', 'v', 'gone', 1, 'q', NULL),
		('oflive', 'w', 'pending', 'v', 'live', 1, 'q', NULL),
		('notqueued', 'w', 'pending', 'v', 'dead', 1, NULL, NULL),
		('stopping', 'w', 'cancelled', 'v', 'dead', 1, 'r', NULL),
		('stoppinglive', 'w', 'cancelled', 'v', 'live', 1, 'r', NULL)`)
	conn := f.listen()

	back, err := f.q.Requeue(f.ctx, f.pool, RequeueParams{ExecutorID: "me"})
	require.NoError(t, err)
	require.Equal(t, []RequeueRow{{Queue: "q", Requeued: 1}}, back, "without a judgement of leases, only unowned runs")
	require.Equal(t, "enqueued - 2", f.status("unowned"))
	require.Equal(t, "q:q", f.notified(conn))

	back, err = f.q.Requeue(f.ctx, f.pool, RequeueParams{ExecutorID: "me", ExpiredLeases: true})
	require.NoError(t, err)
	slices.SortFunc(back, func(x, y RequeueRow) int { return cmp.Compare(x.Queue, y.Queue) })
	require.Equal(t, []RequeueRow{{Queue: "q", Requeued: 2}, {Queue: "r", Requeued: 0}}, back)
	require.Equal(t, "enqueued - 2", f.status("ofdead"))
	require.Equal(t, "enqueued - 2", f.status("ofgone"))
	require.Equal(t, "cancelled - 1", f.status("stopping"), "the slot of a cancelled run comes back, no epoch bump")
	require.Equal(t, "pending me 1", f.status("own"), "own runs stay without Own")
	require.Equal(t, "pending live 1", f.status("oflive"), "a live executor keeps its runs")
	require.Equal(t, "pending dead 1", f.status("notqueued"), "a run not queued is not the queue's to take")
	require.Equal(t, "cancelled live 1", f.status("stoppinglive"))
	got := []string{f.notified(conn), f.notified(conn)}
	slices.Sort(got)
	require.Equal(t, []string{"q:q", "q:r"}, got)

	back, err = f.q.Requeue(f.ctx, f.pool, RequeueParams{ExecutorID: "me", Own: true})
	require.NoError(t, err)
	require.Equal(t, []RequeueRow{{Queue: "q", Requeued: 1}}, back)
	require.Equal(t, "enqueued - 2", f.status("own"))
	require.Equal(t, "pending me 1", f.status("ownparked"), "a parked run is not requeued")
}

func TestQueueReleaseAndOwnStopping(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name) VALUES
		('c1', 'w', 'cancelled', 'v', 'me', 3, 'q'),
		('c2', 'w', 'cancelled', 'v', 'me', 1, 'q'),
		('c3', 'w', 'cancelled', 'v', 'other', 1, 'q'),
		('c4', 'w', 'cancelled', 'v', 'me', 1, NULL),
		('p1', 'w', 'pending', 'v', 'me', 1, 'q')`)
	conn := f.listen()
	own, err := f.q.OwnStopping(f.ctx, f.pool, "me")
	require.NoError(t, err)
	slices.SortFunc(own, func(x, y OwnStoppingRow) int { return cmp.Compare(x.ID, y.ID) })
	require.Equal(t, []OwnStoppingRow{{"c1", 3}, {"c2", 1}}, own)

	for _, p := range []ReleaseParams{{"c1", 2}, {"p1", 1}, {"c4", 1}, {"nope", 1}} {
		ok, err := f.q.Release(f.ctx, f.pool, p)
		require.NoError(t, err)
		require.False(t, ok, "%+v: a stale epoch, a run not cancelled or not queued keeps its owner", p)
	}
	ok, err := f.q.Release(f.ctx, f.pool, ReleaseParams{"c1", 3})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "cancelled - 3", f.status("c1"))
	require.Equal(t, "q:q", f.notified(conn), "the release wakes the queue's dispatchers")
	ok, err = f.q.Release(f.ctx, f.pool, ReleaseParams{"c1", 3})
	require.NoError(t, err)
	require.False(t, ok, "released once")
	own, err = f.q.OwnStopping(f.ctx, f.pool, "me")
	require.NoError(t, err)
	require.Equal(t, []OwnStoppingRow{{"c2", 1}}, own)
}

func TestQueueByDedup(t *testing.T) {
	f := newQueueFix(t)
	f.declare("q", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, dedup_id) VALUES
		('old', 'w', 'success', 'v', 'q', 'd'), ('cur', 'w', 'pending', 'v', 'q', 'd'), ('o', 'w', 'enqueued', 'v', 'q', 'e')`)
	id, err := f.q.ByDedup(f.ctx, f.pool, ByDedupParams{Queue: "q", DedupID: "d"})
	require.NoError(t, err)
	require.Equal(t, "cur", id, "the queued or running holder, not a finished run")
	_, err = f.q.ByDedup(f.ctx, f.pool, ByDedupParams{Queue: "q", DedupID: "none"})
	require.ErrorIs(t, err, pgx.ErrNoRows)
	_, err = f.q.ByDedup(f.ctx, f.pool, ByDedupParams{Queue: "other", DedupID: "e"})
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

func TestQueueStatsAndList(t *testing.T) {
	f := newQueueFix(t)
	s := QueueSettings{GlobalConcurrency: 1, WorkerConcurrency: 2, PartitionConcurrency: 3, RateLimit: 4,
		RatePeriod: 5 * time.Second, ReleaseParked: true}
	f.declare("q", s)
	f.declare("idle", QueueSettings{})
	f.exec(`UPDATE {{schema}}.queues SET paused = true WHERE name = 'q'`)
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, not_before) VALUES
		('r1', 'w', 'enqueued', 'v', NULL, 'q', NULL), ('r2', 'w', 'enqueued', 'v', NULL, 'q', now() - interval '1 minute'),
		('d1', 'w', 'enqueued', 'v', NULL, 'q', now() + interval '1 hour'),
		('p1', 'w', 'pending', 'v', 'x', 'q', NULL), ('p2', 'w', 'pending', 'v', 'x', 'q', NULL), ('p3', 'w', 'pending', 'v', 'x', 'q', NULL),
		('c1', 'w', 'cancelled', 'v', 'x', 'q', NULL), ('c2', 'w', 'cancelled', 'v', NULL, 'q', NULL),
		('s1', 'w', 'success', 'v', NULL, 'q', NULL)`)
	st, err := f.q.Stats(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, QueueStatsRow{Ready: 2, Delayed: 1, Running: 4}, st)
	st, err = f.q.Stats(f.ctx, f.pool, "nope")
	require.NoError(t, err)
	require.Equal(t, QueueStatsRow{}, st)

	list, err := f.q.List(f.ctx, f.pool)
	require.NoError(t, err)
	require.Equal(t, []QueueListRow{
		{Name: "idle"},
		{Name: "q", QueueSettingsRow: QueueSettingsRow{Settings: s, Paused: true}, QueueStatsRow: QueueStatsRow{Ready: 2, Delayed: 1, Running: 4}},
	}, list)
}

// TestQueueCountsReadOnlyLiveRuns: a queue's counts (Stats, and each row
// of List, which a dashboard reads every few seconds) read the queue's
// queued and running runs from their partial indexes, not the queue's
// finished history, and count them right.
func TestQueueCountsReadOnlyLiveRuns(t *testing.T) {
	f := newQueueFix(t)
	const history = 20000
	const ready, delayed, running = 20, 10, 30
	f.exec(`INSERT INTO {{schema}}.queues (name) VALUES ('q'), ('idle')`)
	f.exec(fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, created_at)
		SELECT 'h' || i, 'w', 'success', 'v', 'q', now() - interval '1 day' + i * interval '1 ms' FROM generate_series(1, %d) i`, history))
	f.exec(fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, not_before)
		SELECT 'e' || i, 'w', 'enqueued', 'v', 'q', CASE WHEN i > %d THEN now() + interval '1 hour' END
		FROM generate_series(1, %d) i`, ready, ready+delayed))
	f.exec(fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name)
		SELECT 'p' || i, 'w', 'pending', 'v', 'x', 'q' FROM generate_series(1, %d) i`, running))
	f.exec(`ANALYZE {{schema}}.workflows`)
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Stats", f.q.stats, []any{"q"}},
		{"List", f.q.list, nil},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if n, plan := pgtest.ExplainRows(f.ctx, t, f.pool, mode, c.sql, c.args); n > ready+delayed+running {
				t.Errorf("%s, %s: read %d rows of %d runs for %d queued or running; plan: %s",
					c.name, mode, n, history+ready+delayed+running, ready+delayed+running, plan)
			}
		}
	}
	st, err := f.q.Stats(f.ctx, f.pool, "q")
	require.NoError(t, err)
	want := QueueStatsRow{Ready: ready, Delayed: delayed, Running: running}
	require.Equal(t, want, st)
	list, err := f.q.List(f.ctx, f.pool)
	require.NoError(t, err)
	require.Equal(t, []QueueListRow{{Name: "idle"}, {Name: "q", QueueStatsRow: want}}, list)

	// A dispatch's counts, with every limit they serve set.
	_, err = f.q.Update(f.ctx, f.pool, QueueUpdateParams{Name: "q",
		Settings: QueueSettings{GlobalConcurrency: 100, RateLimit: 100, RatePeriod: time.Minute}})
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if n, plan := pgtest.ExplainRows(f.ctx, t, f.pool, mode, f.q.counts, []any{"q"}); n > ready+delayed+running+1 {
			t.Errorf("Counts, %s: read %d rows of %d runs for %d queued or running; plan: %s",
				mode, n, history+ready+delayed+running, ready+delayed+running, plan)
		}
	}
	c, err := f.q.Counts(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, running, c.Running)
	require.NotNil(t, c.NextDelayed)
}
