package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// viewRun is a row of runs_v1.
type viewRun struct {
	WorkflowID       string          `db:"workflow_id"`
	WorkflowName     string          `db:"workflow_name"`
	Status           string          `db:"status"`
	AppVersion       string          `db:"app_version"`
	ExecutorID       *string         `db:"executor_id"`
	ParentID         *string         `db:"parent_id"`
	QueueName        *string         `db:"queue_name"`
	Priority         int             `db:"priority"`
	PartitionKey     *string         `db:"partition_key"`
	DedupID          *string         `db:"dedup_id"`
	RecoveryAttempts int             `db:"recovery_attempts"`
	CreatedAt        time.Time       `db:"created_at"`
	ClaimedAt        *time.Time      `db:"claimed_at"`
	UpdatedAt        time.Time       `db:"updated_at"`
	FinishedAt       *time.Time      `db:"finished_at"`
	Deadline         *time.Time      `db:"deadline"`
	NotBefore        *time.Time      `db:"not_before"`
	WakeAt           *time.Time      `db:"wake_at"`
	WaitTopic        *string         `db:"wait_topic"`
	TraceID          *string         `db:"trace_id"`
	Input            json.RawMessage `db:"input"`
	Output           json.RawMessage `db:"output"`
	Error            json.RawMessage `db:"error"`
	Tags             json.RawMessage `db:"tags"`
}

// viewStep is a row of steps_v1.
type viewStep struct {
	WorkflowID string          `db:"workflow_id"`
	Pos        int             `db:"pos"`
	Name       string          `db:"name"`
	Status     string          `db:"status"`
	Attempts   int             `db:"attempts"`
	Output     json.RawMessage `db:"output"`
	Error      json.RawMessage `db:"error"`
	StartedAt  *time.Time      `db:"started_at"`
	FinishedAt *time.Time      `db:"finished_at"`
}

// viewQueue is a row of queues_v1.
type viewQueue struct {
	QueueName            string        `db:"queue_name"`
	Paused               bool          `db:"paused"`
	GlobalConcurrency    int           `db:"global_concurrency"`
	WorkerConcurrency    int           `db:"worker_concurrency"`
	PartitionConcurrency int           `db:"partition_concurrency"`
	RateLimit            int           `db:"rate_limit"`
	RatePeriod           time.Duration `db:"rate_period"`
	ReleaseParked        bool          `db:"release_parked"`
	Enqueued             int           `db:"enqueued"`
	Ready                int           `db:"ready"`
	Delayed              int           `db:"delayed"`
	Running              int           `db:"running"`
	OldestEnqueuedAt     *time.Time    `db:"oldest_enqueued_at"`
	UpdatedAt            time.Time     `db:"updated_at"`
}

// viewSchedule is a row of schedules_v1.
type viewSchedule struct {
	ScheduleName  string     `db:"schedule_name"`
	WorkflowName  string     `db:"workflow_name"`
	Spec          string     `db:"spec"`
	TimeZone      string     `db:"time_zone"`
	CatchUp       int        `db:"catch_up"`
	Paused        bool       `db:"paused"`
	NextTick      *time.Time `db:"next_tick"`
	LastTick      *time.Time `db:"last_tick"`
	LastRunID     *string    `db:"last_run_id"`
	LastRunStatus *string    `db:"last_run_status"`
	CreatedAt     time.Time  `db:"created_at"`
	UpdatedAt     time.Time  `db:"updated_at"`
}

// viewRows reads a view of schema ("runs_v1" ...) with a condition.
func viewRows[T any](t *testing.T, pool *pgxpool.Pool, schema, view, where string, args ...any) []T {
	t.Helper()
	rows, err := pool.Query(ctxT(t), "SELECT * FROM "+pgx.Identifier{schema, view}.Sanitize()+" "+where, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	require.NoError(t, err, view)
	return out
}

func strOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func timeOr(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

// TestViewsV1 runs workflows, a queue and a schedule, and checks that each
// view returns what the engine recorded, as its own API reads it.
func TestViewsV1(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	release := make(chan struct{})
	var order, stuck, block *durable.Workflow[int, int]
	var tick *durable.Workflow[int, string]
	var q *durable.Queue
	var mu sync.Mutex
	failOnce := map[string]bool{}
	e := b.engine(t, nil, func(e *durable.Engine) {
		order = durable.Register(e, "order", func(wctx durable.Context, n int) (int, error) {
			a, err := durable.Step(wctx, "reserve", func(ctx context.Context) (int, error) { return n, nil }, nil)
			if err != nil {
				return 0, err
			}
			c, err := durable.Step(wctx, "charge", func(ctx context.Context) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				if key := durable.IdempotencyKey(ctx); !failOnce[key] {
					failOnce[key] = true
					return 0, errors.New("card declined")
				}
				return 2 * a, nil
			}, nil)
			if err != nil {
				return 0, err
			}
			if n < 0 {
				return 0, durable.Permanent(errors.New("negative order"))
			}
			return durable.TxStep(wctx, "record", func(ctx context.Context, tx pgx.Tx) (int, error) { return c + 1, nil }, nil)
		}, nil)
		// Its step failed once and waits an hour for the next attempt.
		stuck = durable.Register(e, "stuck", func(wctx durable.Context, _ int) (int, error) {
			return durable.Step(wctx, "call", func(ctx context.Context) (int, error) { return 0, errors.New("provider down") },
				&durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: time.Hour}})
		}, nil)
		block = durable.Register(e, "block", func(wctx durable.Context, n int) (int, error) {
			return durable.Step(wctx, "wait", func(ctx context.Context) (int, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return n, nil
			}, nil)
		}, nil)
		q = durable.RegisterQueue(e, "jobs", &durable.QueueOpts{WorkerConcurrency: 1, GlobalConcurrency: 5, RateLimit: 100, RatePeriod: time.Minute})
		tick = durable.Register(e, "tick", func(wctx durable.Context, _ int) (string, error) { return "ticked", nil }, nil)
		durable.Schedule(tick, "every-second", "@every 1s", nil)
	})
	t.Cleanup(func() { close(release) })

	// Runs and steps.
	ok, err := order.Start(ctx, 21, &durable.StartOpts{ID: "order-ok", Tags: map[string]string{"customer": "acme"}})
	require.NoError(t, err)
	_, err = ok.Result(ctx)
	require.NoError(t, err)
	bad, err := order.Start(ctx, -1, &durable.StartOpts{ID: "order-bad"})
	require.NoError(t, err)
	_, err = bad.Result(ctx)
	require.ErrorContains(t, err, "negative order")
	_, err = stuck.Start(ctx, 0, &durable.StartOpts{ID: "stuck"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(viewRows[viewStep](t, b.pool, b.schema, "steps_v1", "WHERE workflow_id = 'stuck'")) == 1
	}, 30*time.Second, 10*time.Millisecond)

	for _, id := range []string{"order-ok", "order-bad", "stuck"} {
		info, err := e.Inspect(ctx, id)
		require.NoError(t, err)
		rows := viewRows[viewRun](t, b.pool, b.schema, "runs_v1", "WHERE workflow_id = $1", id)
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, info.Name, r.WorkflowName, id)
		require.Equal(t, string(info.Status), r.Status, id)
		require.Equal(t, info.AppVersion, r.AppVersion, id)
		require.Equal(t, info.Executor, strOr(r.ExecutorID), id)
		require.Equal(t, info.Queue, strOr(r.QueueName), id)
		require.Equal(t, info.RecoveryAttempts, r.RecoveryAttempts, id)
		require.True(t, info.CreatedAt.Equal(r.CreatedAt), id)
		require.True(t, info.UpdatedAt.Equal(r.UpdatedAt), id)
		require.Equal(t, info.Status != durable.StatusPending, r.FinishedAt != nil, id)
		if r.FinishedAt != nil {
			require.True(t, r.FinishedAt.Equal(info.UpdatedAt), id)
		}
		require.JSONEq(t, string(info.Input), string(r.Input), id)
		require.Equal(t, string(info.Output), string(r.Output), id)
		require.Equal(t, info.Error == nil, r.Error == nil, id)
		if info.Error != nil {
			require.Contains(t, string(r.Error), "negative order", id)
		}
		var tags map[string]string
		if r.Tags != nil {
			require.NoError(t, json.Unmarshal(r.Tags, &tags), id)
		}
		require.Equal(t, info.Tags, tags, id)
	}
	require.JSONEq(t, `{"customer": "acme"}`, string(viewRows[viewRun](t, b.pool, b.schema, "runs_v1", "WHERE workflow_id = 'order-ok'")[0].Tags))
	for _, id := range []string{"order-ok", "order-bad"} {
		recorded, err := e.ListSteps(ctx, id)
		require.NoError(t, err)
		rows := viewRows[viewStep](t, b.pool, b.schema, "steps_v1", "WHERE workflow_id = $1 ORDER BY pos", id)
		require.Len(t, rows, len(recorded), id)
		for i, s := range recorded {
			v := rows[i]
			require.Equal(t, []any{s.Pos, s.Name, s.Status, s.Attempts}, []any{v.Pos, v.Name, v.Status, v.Attempts}, id)
			require.Equal(t, string(s.Output), string(v.Output), id)
			require.True(t, s.StartedAt.Equal(timeOr(v.StartedAt)) && s.FinishedAt.Equal(timeOr(v.FinishedAt)), id)
		}
		require.Equal(t, 2, rows[1].Attempts, "the charge failed once, then succeeded")
	}
	retrying := viewRows[viewStep](t, b.pool, b.schema, "steps_v1", "WHERE workflow_id = 'stuck'")[0]
	require.Equal(t, []any{0, "call", "retrying", 1}, []any{retrying.Pos, retrying.Name, retrying.Status, retrying.Attempts})
	require.Contains(t, string(retrying.Error), "provider down")
	require.Nil(t, retrying.FinishedAt)

	// A queue: one run running (the worker limit), two ready, one delayed.
	var handles []*durable.Handle[int]
	for i := range 3 {
		h, err := block.Enqueue(ctx, q, i, nil)
		require.NoError(t, err)
		handles = append(handles, h)
	}
	_, err = block.Enqueue(ctx, q, 9, &durable.EnqueueOpts{NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	var st durable.QueueStats
	require.Eventually(t, func() bool {
		st, err = q.Stats(ctx)
		return err == nil && st.Running == 1
	}, 30*time.Second, 10*time.Millisecond)
	rows := viewRows[viewQueue](t, b.pool, b.schema, "queues_v1", "WHERE queue_name = 'jobs'")
	require.Len(t, rows, 1)
	v := rows[0]
	require.Equal(t, []int{1, 2, 1, 3}, []int{v.Running, v.Ready, v.Delayed, v.Enqueued})
	require.Equal(t, []int{st.Running, st.Ready, st.Delayed}, []int{v.Running, v.Ready, v.Delayed})
	require.Equal(t, []any{false, 5, 1, 0, 100, time.Minute, false},
		[]any{v.Paused, v.GlobalConcurrency, v.WorkerConcurrency, v.PartitionConcurrency, v.RateLimit, v.RatePeriod, v.ReleaseParked})
	first, err := e.Inspect(ctx, handles[0].ID())
	require.NoError(t, err)
	require.NotNil(t, v.OldestEnqueuedAt)
	require.False(t, v.OldestEnqueuedAt.Before(first.CreatedAt), "the running run is not enqueued any more")
	running := viewRows[viewRun](t, b.pool, b.schema, "runs_v1", "WHERE queue_name = 'jobs' AND status = 'pending'")
	require.Len(t, running, 1)
	require.Equal(t, e.ExecutorID(), strOr(running[0].ExecutorID))
	require.NotNil(t, running[0].ClaimedAt)
	delayed := viewRows[viewRun](t, b.pool, b.schema, "runs_v1", "WHERE queue_name = 'jobs' AND not_before > now()")
	require.Len(t, delayed, 1)

	// A schedule, with the status of its last run.
	require.Eventually(t, func() bool {
		s := schedule(t, e, "every-second")
		if s.LastRunID == "" {
			return false
		}
		h, err := tick.Handle(ctx, s.LastRunID)
		if err != nil {
			return false
		}
		if _, err := h.Result(ctx); err != nil {
			return false
		}
		rows := viewRows[viewSchedule](t, b.pool, b.schema, "schedules_v1", "WHERE schedule_name = 'every-second'")
		if len(rows) != 1 {
			return false
		}
		v := rows[0]
		again := schedule(t, e, "every-second")
		return again.LastRunID == s.LastRunID && strOr(v.LastRunID) == s.LastRunID && strOr(v.LastRunStatus) == "success" &&
			v.WorkflowName == s.Workflow && v.Spec == s.Spec && v.TimeZone == s.Location && v.CatchUp == s.CatchUp &&
			v.Paused == s.Paused && timeOr(v.LastTick).Equal(s.LastTick) && timeOr(v.NextTick).Equal(s.NextTick)
	}, 30*time.Second, 50*time.Millisecond, "schedules_v1 shows the schedule as ListSchedules does")
}

// TestViewsReadOnlyRole: a role granted USAGE on the schema and SELECT on
// the views alone reads them (a reporting role, a BI tool), and none of
// the tables behind them.
func TestViewsReadOnlyRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, nil, nil) // migrates the schema
	admin := b.pool
	role := restrictedRole(t, admin)
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{b.schema}.Sanitize()
	views := []string{"runs_v1", "steps_v1", "queues_v1", "schedules_v1"}
	mustExec(t, admin, "GRANT USAGE ON SCHEMA "+s+" TO "+r)
	for _, v := range views {
		mustExec(t, admin, "GRANT SELECT ON "+s+"."+v+" TO "+r)
	}
	_, err := admin.Exec(ctxT(t), "INSERT INTO "+s+".workflows (id, name, status, app_version) VALUES ('seen', 'w', 'success', 'v')")
	require.NoError(t, err)

	pool := rolePool(t, role)
	for _, v := range views {
		_, err := pool.Exec(ctxT(t), "SELECT * FROM "+s+"."+v)
		require.NoError(t, err, v)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+s+".runs_v1 WHERE workflow_id = 'seen'").Scan(&n))
	require.Equal(t, 1, n)
	for _, table := range []string{"workflows", "steps", "step_attempts", "queues", "schedules", "executors"} {
		_, err := pool.Exec(ctxT(t), "SELECT 1 FROM "+s+"."+table)
		requireSQLState(t, err, "42501")
	}
	_, err = pool.Exec(ctxT(t), "UPDATE "+s+".runs_v1 SET status = 'error'")
	requireSQLState(t, err, "42501")
}

// TestViewsAndTheCollationChange: the maintenance that moves an install
// made before migration 015 to the C collation (docs/operations.md) works
// with the views: drop them, apply 015's ALTER TABLE statements, create
// them again from migrations 018 and 024 (runs_v1's tags column).
func TestViewsAndTheCollationChange(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := ctxT(t)
	installBefore015(ctx, t, pool, schema)
	require.NoError(t, durable.Migrate(ctx, pool, schema))

	m015, err := os.ReadFile("migrations/015_identifiers_collate_c.sql")
	require.NoError(t, err)
	alters := regexp.MustCompile(`(?s)THEN\s*(.*?)\s*END IF;`).FindSubmatch(m015)
	require.NotNil(t, alters)
	m018, err := os.ReadFile("migrations/018_views_v1.sql")
	require.NoError(t, err)
	m024, err := os.ReadFile("migrations/024_tags.sql")
	require.NoError(t, err)
	s := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, sysdb.Render(string(alters[1]), schema))
	require.Error(t, err, "Postgres changes no column a view uses")

	script := "BEGIN;\nDROP VIEW " + s + ".runs_v1, " + s + ".steps_v1, " + s + ".queues_v1, " + s + ".schedules_v1;\n" +
		sysdb.Render(string(alters[1]), schema) + "\n" + sysdb.Render(string(m018), schema) + "\n" + sysdb.Render(string(m024), schema) +
		"\nCOMMIT;"
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Conn().PgConn().Exec(ctx, script).ReadAll()
	conn.Release()
	require.NoError(t, err)
	var collation string
	require.NoError(t, pool.QueryRow(ctx, `SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.attname = 'id'`, schema+".workflows").Scan(&collation))
	require.Equal(t, "C", collation)
	var id string
	var tags *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT workflow_id, tags::text FROM "+s+".runs_v1").Scan(&id, &tags))
	require.Equal(t, "r1", id)
	require.Nil(t, tags)
}

// TestViewsReadFewRuns: the views keep the indexes of the tables behind
// them: a run by ID reads one run, and the queue counts read the live
// runs of the queue, not the 3,000 finished ones.
func TestViewsReadFewRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, nil, func(e *durable.Engine) { durable.RegisterQueue(e, "jobs", nil) })
	s := pgx.Identifier{b.schema}.Sanitize()
	mustExec(t, b.pool, `INSERT INTO `+s+`.workflows (id, name, status, app_version, queue_name)
		SELECT 'done-' || i, 'w', 'success', 'v', CASE WHEN i % 2 = 0 THEN 'jobs' END FROM generate_series(1, 3000) i`)
	mustExec(t, b.pool, `INSERT INTO `+s+`.workflows (id, name, status, app_version, queue_name)
		SELECT 'queued-' || i, 'w', 'enqueued', 'v', 'jobs' FROM generate_series(1, 5) i`)
	mustExec(t, b.pool, `INSERT INTO `+s+`.schedules (name, workflow_name, spec, cursor_at, last_run_id, code_spec, code_location, code_catch_up)
		VALUES ('nightly', 'w', '@daily', now(), 'done-7', '@daily', 'UTC', 0)`)
	mustExec(t, b.pool, "ANALYZE "+s+".workflows")
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range []struct {
			sql  string
			args []any
			most int
		}{
			{"SELECT * FROM " + s + ".runs_v1 WHERE workflow_id = $1", []any{"done-42"}, 1},
			{"SELECT * FROM " + s + ".queues_v1", nil, 5},
			{"SELECT * FROM " + s + ".schedules_v1 WHERE schedule_name = $1", []any{"nightly"}, 1},
		} {
			if looked, plan := pgtest.ExplainRows(ctxT(t), t, b.pool, mode, c.sql, c.args); looked > c.most {
				t.Errorf("%s (%s): the plan read %d runs; want <= %d\n%s", c.sql, mode, looked, c.most, plan)
			}
		}
	}
}
