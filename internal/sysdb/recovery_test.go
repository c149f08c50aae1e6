package sysdb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// claimedIDs returns the sorted IDs of rows.
func sortedClaimedIDs(rows []ClaimedRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	return ids
}

// orphanRuns inserts the runs the takeover tests claim from: unowned,
// parked and owned runs, for executors "live" (a live lease), "dead" (an
// expired one) and "gone" (none).
func orphanRuns(tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	on(tb, pool, schema, `INSERT INTO {{schema}}.executors (id, incarnation, app_version, lease_expires_at) VALUES
	('live', 'x', 'v', now() + interval '1 hour'), ('dead', 'x', 'v', now() - interval '1 hour')`)
	on(tb, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, executor_id, wake_at, queue_name, wait_topic) VALUES
	('unowned', 'w', 'pending', 'v', 0, NULL, NULL, NULL, NULL),
	('due', 'w', 'pending', 'v', 1, NULL, now() - interval '1 second', NULL, 'topic'),
	('due-queued', 'w', 'pending', 'v', 1, NULL, now() - interval '1 second', 'q', NULL),
	('of-dead', 'w', 'pending', 'v', 1, 'dead', NULL, NULL, NULL),
	('of-gone', 'w', 'pending', 'v', 1, 'gone', NULL, NULL, NULL),
	('of-live', 'w', 'pending', 'v', 1, 'live', NULL, NULL, NULL),
	('of-me', 'w', 'pending', 'v', 1, 'me', NULL, NULL, NULL),
	('not-due', 'w', 'pending', 'v', 1, NULL, now() + interval '1 hour', NULL, NULL),
	('queued-unowned', 'w', 'pending', 'v', 1, NULL, NULL, 'q', NULL),
	('queued-of-gone', 'w', 'pending', 'v', 1, 'gone', NULL, 'q', NULL),
	('other-version', 'w', 'pending', 'v2', 0, NULL, NULL, NULL, NULL),
	('other-name', 'x', 'pending', 'v', 0, NULL, NULL, NULL, NULL),
	('finished', 'w', 'success', 'v', 1, NULL, NULL, NULL, NULL)`)
}

func TestClaimOrphans(t *testing.T) {
	t.Parallel()
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprint("expired=", expired), func(t *testing.T) {
			t.Parallel()
			pool, schema := migrated(t)
			ctx := context.Background()
			orphanRuns(t, pool, schema)
			q := NewRecoveryQueries(schema, "")
			got, err := q.ClaimOrphans(ctx, pool, ClaimOrphansParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"},
				Limit: 100, TakeExpired: expired})
			require.NoError(t, err)
			want := []string{"due", "due-queued", "unowned"}
			if expired {
				want = []string{"due", "due-queued", "of-dead", "of-gone", "unowned"}
			}
			require.Equal(t, want, sortedClaimedIDs(got), "neither a live owner's runs nor parked runs not due, queued ones, nor other versions")
			// A run never claimed (started by StartTx) and a parked one
			// count no recovery attempt; a run whose executor died does.
			require.Equal(t, "pending me 1 0", runState(t, pool, schema, "unowned"))
			require.Equal(t, "pending me 2 0", runState(t, pool, schema, "due"))
			if expired {
				require.Equal(t, "pending me 2 1", runState(t, pool, schema, "of-dead"))
			} else {
				require.Equal(t, "pending dead 1 0", runState(t, pool, schema, "of-dead"))
			}
			require.Equal(t, "pending live 1 0", runState(t, pool, schema, "of-live"))
			var wake *time.Time
			var topic *string
			require.NoError(t, pool.QueryRow(ctx, Render(`SELECT wake_at, wait_topic FROM {{schema}}.workflows WHERE id = 'due'`, schema)).Scan(&wake, &topic))
			require.Nil(t, wake, "claimed: no longer parked")
			require.Nil(t, topic)
			for _, c := range got {
				require.Equal(t, c.ID == "of-dead" || c.ID == "of-gone", c.Recovered, "%s: Recovered is set when the claim counted a recovery attempt", c.ID)
				if c.ID == "unowned" {
					require.Equal(t, ClaimedRow{ID: "unowned", Name: "w", Epoch: 1, Queued: c.Queued}, c)
					require.NotNil(t, c.Queued)
				}
			}
		})
	}
}

func TestClaimOrphansLimitAndLocks(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
SELECT 'r' || i, 'w', 'pending', 'v', now() - (10 - i) * interval '1 minute' FROM generate_series(1, 5) i`)
	// Older still, of the two other kinds: parked and due, and owned by an
	// executor with no live lease.
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, wake_at, created_at) VALUES
		('due', 'w', 'pending', 'v', NULL, now() - interval '1 hour', now() - interval '1 day'),
		('orphan', 'w', 'pending', 'v', 'dead', NULL, now() - interval '1 day')`)
	q := NewRecoveryQueries(schema, "")
	// Bounded: a claim that waits for a locked run fails.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	// Runs another transaction holds are skipped, not waited for.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, Render(`SELECT 1 FROM {{schema}}.workflows WHERE id IN ('r1', 'due', 'orphan') FOR UPDATE`, schema))
	require.NoError(t, err)
	got, err := q.ClaimOrphans(ctx, pool, ClaimOrphansParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}, Limit: 2,
		TakeExpired: true})
	require.NoError(t, err)
	require.Equal(t, []string{"r2", "r3"}, sortedClaimedIDs(got), "oldest first, at most Limit, skipping locked rows")
}

func TestClaimOwn(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, created_at, wait_topic, queue_name) VALUES
	('a', 'w', 'pending', 'v', 'me', 1, now() - interval '3 minutes', 'topic', NULL),
	('b', 'w', 'pending', 'v', 'me', 1, now() - interval '2 minutes', NULL, NULL),
	('c', 'w', 'pending', 'v', 'me', 1, now() - interval '1 minute', NULL, NULL),
	('queued', 'w', 'pending', 'v', 'me', 1, now(), NULL, 'q'),
	('other-version', 'w', 'pending', 'v2', 'me', 1, now(), NULL, NULL),
	('other-name', 'x', 'pending', 'v', 'me', 1, now(), NULL, NULL),
	('of-peer', 'w', 'pending', 'v', 'peer', 1, now(), NULL, NULL),
	('finished', 'w', 'success', 'v', 'me', 1, now(), NULL, NULL),
	('locked', 'w', 'pending', 'v', 'me', 1, now() - interval '4 minutes', NULL, NULL)`)
	q := NewRecoveryQueries(schema, "")
	// A run another transaction holds is skipped, not waited for (bounded:
	// a claim that waits fails).
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, Render(`SELECT 1 FROM {{schema}}.workflows WHERE id = 'locked' FOR UPDATE`, schema))
	require.NoError(t, err)
	p := ClaimOwnParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}, Limit: 2}
	first, err := q.ClaimOwn(ctx, pool, p)
	require.NoError(t, err)
	require.Len(t, first, 2)
	require.Equal(t, "a", first[0].ID)
	require.Equal(t, "b", first[1].ID)
	require.True(t, first[0].Recovered && first[1].Recovered, "every own run claimed counts a recovery attempt")
	require.Equal(t, int64(2), first[0].Epoch, "a new epoch fences the earlier incarnation")
	require.Equal(t, 1, first[0].Attempts, "boot recovery counts an attempt")
	require.Equal(t, "pending me 2 1", runState(t, pool, schema, "a"))
	var topic *string
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT wait_topic FROM {{schema}}.workflows WHERE id = 'a'`, schema)).Scan(&topic))
	require.Nil(t, topic, "the topic of a wait in memory is cleared")

	p.AfterCreated, p.AfterID = first[1].Created, first[1].ID
	rest, err := q.ClaimOwn(ctx, pool, p)
	require.NoError(t, err)
	require.Len(t, rest, 1, "the walk goes on after the last run of the batch")
	require.Equal(t, "c", rest[0].ID)
	require.NoError(t, tx.Rollback(ctx))
	for id, want := range map[string]string{"queued": "pending me 1 0", "other-version": "pending me 1 0",
		"other-name": "pending me 1 0", "of-peer": "pending peer 1 0", "finished": "success me 1 0", "locked": "pending me 1 0"} {
		require.Equal(t, want, runState(t, pool, schema, id), "%s is not claimed", id)
	}
}

func TestHandBackOwn(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name) VALUES
	('kept', 'w', 'pending', 'v', 'me', 2, NULL),
	('back-1', 'w', 'pending', 'v', 'me', 1, NULL),
	('back-2', 'w', 'pending', 'v', 'me', 1, NULL),
	('queued', 'w', 'pending', 'v', 'me', 1, 'q'),
	('other-version', 'w', 'pending', 'v2', 'me', 1, NULL)`)
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{ChannelName(schema)}.Sanitize())
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	// Without a channel (PollOnly) nothing is sent: the first notification
	// to arrive is one sent after the statement.
	silent := NewRecoveryQueries(schema, "")
	n, err := silent.HandBackOwn(ctx, pool, HandBackOwnParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}, Claimed: []string{"kept"}})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, "pending me 2 0", runState(t, pool, schema, "kept"))
	require.Equal(t, "pending - 2 0", runState(t, pool, schema, "back-1"), "unowned, a new epoch, no attempt counted")
	require.Equal(t, "pending - 2 0", runState(t, pool, schema, "back-2"))
	require.Equal(t, "pending me 1 0", runState(t, pool, schema, "queued"))
	require.Equal(t, "pending me 1 0", runState(t, pool, schema, "other-version"))
	_, err = pool.Exec(ctx, "SELECT pg_notify($1, 'after')", ChannelName(schema))
	require.NoError(t, err)
	note, err := conn.WaitForNotification(wctx)
	require.NoError(t, err)
	require.Equal(t, "after", note.Payload, "no notification without a channel")

	// With the schema's channel, one notification wakes the sweepers.
	on(t, pool, schema, `UPDATE {{schema}}.workflows SET executor_id = 'me' WHERE id IN ('back-1', 'back-2')`)
	q := NewRecoveryQueries(schema, ChannelName(schema))
	n, err = q.HandBackOwn(ctx, pool, HandBackOwnParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}, Claimed: []string{"kept"}})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, "pending - 3 0", runState(t, pool, schema, "back-1"))
	note, err = conn.WaitForNotification(wctx)
	require.NoError(t, err, "the sweepers are woken")
	require.Equal(t, "n:", note.Payload)

	n, err = q.HandBackOwn(ctx, pool, HandBackOwnParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}, Claimed: []string{"kept"}})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestReleaseUnrunnable(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES
	('runnable', 'w', 'pending', 'v', 'me', 1),
	('other-version', 'w', 'pending', 'v2', 'me', 1),
	('other-name', 'x', 'pending', 'v', 'me', 1),
	('of-peer', 'x', 'pending', 'v', 'peer', 1),
	('finished', 'x', 'success', 'v', 'me', 1)`)
	q := NewRecoveryQueries(schema, "")
	got, err := q.ReleaseUnrunnable(ctx, pool, ReleaseUnrunnableParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}})
	require.NoError(t, err)
	slices.SortFunc(got, func(a, b ReleaseUnrunnableRow) int { return strings.Compare(a.ID, b.ID) })
	require.Equal(t, []ReleaseUnrunnableRow{{ID: "other-name", Name: "x", AppVersion: "v"}, {ID: "other-version", Name: "w", AppVersion: "v2"}}, got)
	require.Equal(t, "pending - 2 0", runState(t, pool, schema, "other-name"))
	require.Equal(t, "pending - 2 0", runState(t, pool, schema, "other-version"))
	require.Equal(t, "pending me 1 0", runState(t, pool, schema, "runnable"))
	require.Equal(t, "pending peer 1 0", runState(t, pool, schema, "of-peer"))
	require.Equal(t, "success me 1 0", runState(t, pool, schema, "finished"))
}

func TestCountOtherVersions(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	orphanRuns(t, pool, schema)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, executor_id, wake_at) VALUES
	('v2-parked', 'w', 'pending', 'v2', 1, NULL, now() + interval '1 hour'),
	('v2-parked-due', 'w', 'pending', 'v2', 1, NULL, now() - interval '1 second'),
	('v2-of-gone', 'w', 'pending', 'v2', 1, 'gone', NULL),
	('v2-of-dead', 'w', 'pending', 'v2', 1, 'dead', NULL),
	('v2-of-live', 'w', 'pending', 'v2', 1, 'live', NULL),
	('v2-finished', 'w', 'error', 'v2', 1, NULL, NULL)`)
	got, err := NewRecoveryQueries(schema, "").CountOtherVersions(context.Background(), pool, CountOtherVersionsParams{AppVersion: "v", Names: []string{"w"}})
	require.NoError(t, err)
	require.Equal(t, []CountOtherVersionsRow{{Name: "w", AppVersion: "v2", Count: 4}, {Name: "x", AppVersion: "v", Count: 1}}, got,
		"runs without a live owner this executor cannot run: not those of a live owner, nor parked ones not due, nor finished ones")
}

func TestDeleteDeadExecutors(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	on(t, pool, schema, `INSERT INTO {{schema}}.executors (id, incarnation, app_version, lease_expires_at) VALUES
	('long-dead', 'x', 'v', now() - interval '2 hours'),
	('long-dead-owner', 'x', 'v', now() - interval '2 hours'),
	('just-dead', 'x', 'v', now() - interval '1 minute'),
	('live', 'x', 'v', now() + interval '1 minute')`)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES
	('owned', 'w', 'pending', 'v', 'long-dead-owner', 1), ('done', 'w', 'success', 'v', 'long-dead', 1)`)
	n, err := NewRecoveryQueries(schema, "").DeleteDeadExecutors(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	var left []string
	rows, err := pool.Query(context.Background(), Render(`SELECT id FROM {{schema}}.executors ORDER BY id`, schema))
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"just-dead", "live", "long-dead-owner"}, left, "an executor that owns a pending run stays")
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ('r', 'w', 'pending', 'v', 'me', 2)`)
	q := NewRecoveryQueries(schema, "")
	errb := []byte(`{"msg":"dead"}`)
	dead, err := q.DeadLetter(ctx, pool, DeadLetterParams{ID: "r", Epoch: 1, Error: errb})
	require.NoError(t, err)
	require.False(t, dead, "a stale epoch: the run was claimed since")
	require.Equal(t, "pending me 2 0", runState(t, pool, schema, "r"))

	dead, err = q.DeadLetter(ctx, pool, DeadLetterParams{ID: "r", Epoch: 2, Error: errb})
	require.NoError(t, err)
	require.True(t, dead)
	require.Equal(t, "dead me 2 0", runState(t, pool, schema, "r"))
	var stored json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT error FROM {{schema}}.workflows WHERE id = 'r'`, schema)).Scan(&stored))
	require.JSONEq(t, string(errb), string(stored))

	dead, err = q.DeadLetter(ctx, pool, DeadLetterParams{ID: "r", Epoch: 2, Error: errb})
	require.NoError(t, err)
	require.False(t, dead, "not pending any more")
}

// strayRuns inserts runs of executor "me" as OwnUnparked, ClaimStray and
// RequeueStray see them.
func strayRuns(tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	on(tb, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, wake_at, queue_name) VALUES
	('plain', 'w', 'pending', 'v', 'me', 3, NULL, NULL),
	('queued', 'w', 'pending', 'v', 'me', 4, NULL, 'q'),
	('parked', 'w', 'pending', 'v', 'me', 1, now() + interval '1 hour', NULL),
	('other-version', 'w', 'pending', 'v2', 'me', 1, NULL, NULL),
	('other-name', 'x', 'pending', 'v', 'me', 1, NULL, NULL),
	('of-peer', 'w', 'pending', 'v', 'peer', 1, NULL, NULL),
	('finished', 'w', 'success', 'v', 'me', 1, NULL, NULL)`)
}

func TestOwnUnparked(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	strayRuns(t, pool, schema)
	got, err := NewRecoveryQueries(schema, "").OwnUnparked(context.Background(), pool, OwnUnparkedParams{ExecutorID: "me", AppVersion: "v", Names: []string{"w"}})
	require.NoError(t, err)
	slices.SortFunc(got, func(a, b OwnUnparkedRow) int { return strings.Compare(a.ID, b.ID) })
	require.Equal(t, []OwnUnparkedRow{{ID: "plain", Epoch: 3}, {ID: "queued", Epoch: 4, Queued: true}}, got)
}

func TestClaimStray(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	strayRuns(t, pool, schema)
	q := NewRecoveryQueries(schema, "")
	for _, p := range []StrayParams{
		{ID: "plain", Epoch: 2, ExecutorID: "me"},  // a stale epoch
		{ID: "plain", Epoch: 3, ExecutorID: "you"}, // another owner
		{ID: "parked", Epoch: 1, ExecutorID: "me"},
		{ID: "finished", Epoch: 1, ExecutorID: "me"},
	} {
		got, err := q.ClaimStray(ctx, pool, p)
		require.NoError(t, err)
		require.Empty(t, got, "%+v", p)
	}
	require.Equal(t, "pending me 3 0", runState(t, pool, schema, "plain"))
	got, err := q.ClaimStray(ctx, pool, StrayParams{ID: "plain", Epoch: 3, ExecutorID: "me"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(4), got[0].Epoch)
	require.Equal(t, "pending me 4 0", runState(t, pool, schema, "plain"), "the same owner, a new epoch, no attempt counted")
}

func TestRequeueStray(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	strayRuns(t, pool, schema)
	q := NewRecoveryQueries(schema, "")
	for _, p := range []StrayParams{
		{ID: "queued", Epoch: 3, ExecutorID: "me"},
		{ID: "queued", Epoch: 4, ExecutorID: "you"},
		{ID: "plain", Epoch: 3, ExecutorID: "me"}, // not queued
	} {
		_, ok, err := q.RequeueStray(ctx, pool, p)
		require.NoError(t, err)
		require.False(t, ok, "%+v", p)
	}
	queue, ok, err := q.RequeueStray(ctx, pool, StrayParams{ID: "queued", Epoch: 4, ExecutorID: "me"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "q", queue)
	require.Equal(t, "enqueued - 5 0", runState(t, pool, schema, "queued"))
	require.Equal(t, "pending me 3 0", runState(t, pool, schema, "plain"))
}
