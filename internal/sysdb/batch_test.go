package sysdb

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// batchFix is a queueFix with the batch statements.
type batchFix struct {
	*queueFix
	bq *BatchQueries
	q  *Queries
}

func newBatchFix(t *testing.T) *batchFix {
	f := newQueueFix(t)
	return &batchFix{queueFix: f, bq: NewBatchQueries(f.schema, ChannelName(f.schema)), q: New(f.schema, true)}
}

// nextNotifications returns the payloads conn receives up to the marker
// notification it sends first, which arrives after every notification
// of transactions committed before it.
func (f *batchFix) nextNotifications(conn *pgx.Conn) []string {
	f.t.Helper()
	require.NoError(f.t, f.q.Notify(f.ctx, f.pool, "x:end"))
	var got []string
	for {
		p := f.notified(conn)
		if p == "x:end" {
			return got
		}
		got = append(got, p)
	}
}

func TestBatchEnqueueMany(t *testing.T) {
	f := newBatchFix(t)
	f.declare("q", QueueSettings{})
	conn := f.listen()
	notBefore := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	deadline := notBefore.Add(time.Hour)
	p := EnqueueManyParams{Queue: "q", Workflow: "w", AppVersion: "v1", Notify: true, TraceContext: "tc", Runs: []QueuedRun{
		{ID: "r2", Input: json.RawMessage(`{"a":2}`), Priority: -3, PartitionKey: "k", DedupID: "d", NotBefore: &notBefore, Deadline: &deadline},
		{ID: "r1", Input: json.RawMessage(`1`)},
		{ID: "r3", Input: json.RawMessage(`3`), DedupID: "d"}, // after r2 in ID order: the dedup ID is taken
	}}

	res, err := f.bq.EnqueueMany(f.ctx, f.pool, EnqueueManyParams{Queue: "nope", Workflow: "w", AppVersion: "v1", Notify: true, Runs: p.Runs})
	require.NoError(t, err)
	require.Equal(t, EnqueueManyRow{Inserted: []bool{false, false, false}}, res, "no queue, no run")
	require.Zero(t, value[int](f.queueFix, `SELECT count(*) FROM {{schema}}.workflows`))

	res, err = f.bq.EnqueueMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, EnqueueManyRow{QueueFound: true, Inserted: []bool{true, true, false}}, res)
	require.Equal(t, []string{"q:q"}, f.nextNotifications(conn), "one notification for the batch")
	row := `SELECT concat_ws(' ', name, status, app_version, coalesce(executor_id, '-'), epoch, input::text,
		queue_name, priority, coalesce(partition_key, '-'), coalesce(dedup_id, '-'), coalesce(trace_context, '-'))
		FROM {{schema}}.workflows WHERE id = $1`
	require.Equal(t, "w enqueued v1 - 0 {\"a\":2} q -3 k d tc", value[string](f.queueFix, row, "r2"))
	require.Equal(t, "w enqueued v1 - 0 1 q 0 - - tc", value[string](f.queueFix, row, "r1"))
	var nb, dl time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, Render(`SELECT not_before, deadline FROM {{schema}}.workflows WHERE id = 'r2'`, f.schema)).Scan(&nb, &dl))
	require.True(t, nb.Equal(notBefore) && dl.Equal(deadline), "not_before %v deadline %v", nb, dl)
	require.Equal(t, "- -", value[string](f.queueFix, `SELECT coalesce(not_before::text, '-') || ' ' || coalesce(deadline::text, '-')
		FROM {{schema}}.workflows WHERE id = 'r1'`))

	// Taken IDs and dedup IDs are left out; without Notify, or with
	// nothing inserted, the commit sends nothing.
	p.Runs = append(p.Runs, QueuedRun{ID: "r4", Input: json.RawMessage(`4`), DedupID: "d"}, QueuedRun{ID: "r5", Input: json.RawMessage(`5`)})
	res, err = f.bq.EnqueueMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false, false, true}, res.Inserted)
	p.Runs = p.Runs[:2]
	res, err = f.bq.EnqueueMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, res.Inserted)
	p.Notify, p.TraceContext = false, ""
	p.Runs = []QueuedRun{{ID: "r6", Input: json.RawMessage(`6`)}}
	res, err = f.bq.EnqueueMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, res.Inserted)
	require.Equal(t, []string{"q:q"}, f.nextNotifications(conn), "only the batch that inserted r5 notified")
	require.Equal(t, "-", value[string](f.queueFix, `SELECT coalesce(trace_context, '-') FROM {{schema}}.workflows WHERE id = 'r6'`))
	require.Equal(t, 4, value[int](f.queueFix, `SELECT count(*) FROM {{schema}}.workflows`), "r1, r2, r5, r6")
}

func TestBatchStartMany(t *testing.T) {
	f := newBatchFix(t)
	conn := f.listen()
	deadline := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	p := StartManyParams{Workflow: "w", AppVersion: "v1", TraceContext: "tc", Runs: []StartedRun{
		{ID: "s2", Input: json.RawMessage(`{"a":2}`), Deadline: &deadline},
		{ID: "s1", Input: json.RawMessage(`1`)},
		{ID: "s2", Input: json.RawMessage(`9`)}, // the same ID twice: the first is flagged
	}}
	inserted, err := f.bq.StartMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, inserted)
	require.Equal(t, []string{"n:s1"}, f.nextNotifications(conn), "one notification for the batch")
	row := `SELECT concat_ws(' ', name, status, app_version, coalesce(executor_id, '-'), epoch, input::text,
		coalesce(queue_name, '-'), coalesce(trace_context, '-'), coalesce(deadline::text, '-'))
		FROM {{schema}}.workflows WHERE id = $1`
	require.Equal(t, "w pending v1 - 0 1 - tc -", value[string](f.queueFix, row, "s1"))
	var dl time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, Render(`SELECT deadline FROM {{schema}}.workflows WHERE id = 's2'`, f.schema)).Scan(&dl))
	require.True(t, dl.Equal(deadline), "deadline %v", dl)
	require.Equal(t, `{"a":2}`, value[string](f.queueFix, `SELECT input::text FROM {{schema}}.workflows WHERE id = 's2'`))

	// Existing IDs are left out; a batch that inserts nothing sends nothing.
	p.Runs = []StartedRun{{ID: "s1", Input: json.RawMessage(`1`)}, {ID: "s3", Input: json.RawMessage(`3`)}}
	inserted, err = f.bq.StartMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, inserted)
	inserted, err = f.bq.StartMany(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, inserted)
	require.Equal(t, []string{"n:s3"}, f.nextNotifications(conn))
}

// TestBatchStartManyUnownedClaimable: the runs are those an executor's
// sweep claims, as StartTx's are.
func TestBatchStartManyUnownedClaimable(t *testing.T) {
	f := newBatchFix(t)
	runs := make([]StartedRun, 50)
	for i := range runs {
		runs[i] = StartedRun{ID: fmt.Sprintf("s%02d", i), Input: json.RawMessage(`1`)}
	}
	_, err := f.bq.StartMany(f.ctx, f.pool, StartManyParams{Workflow: "w", AppVersion: "v1", Runs: runs})
	require.NoError(t, err)
	got, err := NewRecoveryQueries(f.schema, "").ClaimOrphans(f.ctx, f.pool, ClaimOrphansParams{ExecutorID: "x",
		AppVersion: "v1", Names: []string{"w"}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, got, 50)
	for _, c := range got {
		require.Equal(t, int64(1), c.Epoch)
		require.Zero(t, c.Attempts, "a first claim is no recovery")
	}
}

// TestBatchEnqueueManyLarge: a batch of many runs without optional values
// (NULL array elements throughout) goes in one statement.
func TestBatchEnqueueManyLarge(t *testing.T) {
	f := newBatchFix(t)
	f.declare("q", QueueSettings{})
	runs := make([]QueuedRun, 5000)
	for i := range runs {
		runs[i] = QueuedRun{ID: fmt.Sprintf("r%05d", i), Input: json.RawMessage(fmt.Sprint(i))}
	}
	res, err := f.bq.EnqueueMany(f.ctx, f.pool, EnqueueManyParams{Queue: "q", Workflow: "w", AppVersion: "v1", Runs: runs})
	require.NoError(t, err)
	require.True(t, res.QueueFound)
	for i, ok := range res.Inserted {
		require.True(t, ok, "run %d", i)
	}
	require.Equal(t, 5000, value[int](f.queueFix, `SELECT count(*) FROM {{schema}}.workflows WHERE status = 'enqueued'`))
}
