package durable_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// databaseWide are the doctor's checks about the whole database, which
// other tests sharing the server may trip; the others are about the
// schema alone.
var databaseWide = map[string]bool{durable.CheckOldTransaction: true, durable.CheckPreparedXact: true,
	durable.CheckReplicationSlot: true, durable.CheckXIDWraparound: true, durable.CheckStatsHidden: true}

// TestDoctorCleanInstall: a working install with finished and running runs
// reports no problem about its schema.
func TestDoctorCleanInstall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	var wf *durable.Workflow[int, int]
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "w", func(wctx durable.Context, n int) (int, error) {
			return durable.Step(wctx, "s", func(ctx context.Context) (int, error) { return n, nil }, nil)
		}, nil)
		durable.RegisterQueue(e, "jobs", nil)
	})
	for i := range 20 {
		h, err := wf.Start(ctx, i, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
	}
	report, err := durable.Doctor(ctx, b.pool, b.schema, nil)
	require.NoError(t, err)
	require.Equal(t, b.schema, report.Schema)
	for _, f := range report.Findings {
		if databaseWide[f.Check] {
			t.Logf("about the shared server, not this install: %+v", f)
			continue
		}
		t.Errorf("a clean install reports %+v", f)
	}
}

// TestDoctorFindsProblems plants each problem the doctor looks for and
// checks it is reported, with a severity and advice: dead rows never
// vacuumed (autovacuum off), an idle session in a transaction holding the
// xmin horizon, an executor whose lease expired owning runs, an old
// pending run, unowned and overdue runs no executor can claim, a queue
// nobody works.
func TestDoctorFindsProblems(t *testing.T) {
	t.Parallel()
	b := setupFresh(t) // vacuum statistics of tables never vacuumed
	ctx := ctxT(t)
	b.engine(t, nil, nil) // migrates; it registers no workflow, so it claims none of the runs below
	s := pgx.Identifier{b.schema}.Sanitize()

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `ALTER TABLE `+s+`.steps SET (autovacuum_enabled = false);
		INSERT INTO `+s+`.steps (workflow_id, pos, name, status) SELECT 'x', i, 's', 'done' FROM generate_series(1, 3000) i;
		DELETE FROM `+s+`.steps WHERE pos > 500;
		INSERT INTO `+s+`.executors (id, incarnation, app_version, hostname, pid, lease_expires_at)
			VALUES ('ghost', 'i', 'old', 'gone-host', 4242, now() - interval '1 hour');
		INSERT INTO `+s+`.queues (name) VALUES ('stalled');
		INSERT INTO `+s+`.workflows (id, name, status, app_version, executor_id, queue_name, wake_at, created_at, updated_at) VALUES
			('haunted', 'legacy', 'pending', 'old', 'ghost', NULL, NULL, now() - interval '3 days', now() - interval '3 days'),
			('handed-back', 'legacy', 'pending', 'old', NULL, NULL, NULL, now() - interval '2 hours', now() - interval '1 hour'),
			('overslept', 'legacy', 'pending', 'old', NULL, NULL, now() - interval '20 minutes', now() - interval '1 day', now() - interval '1 day'),
			('waiting', 'legacy', 'enqueued', 'old', NULL, 'stalled', NULL, now() - interval '2 hours', now() - interval '2 hours')`)
	require.NoError(t, err)
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()") // Postgres 15 on; older servers show it within a second

	holder, err := pgx.Connect(ctx, pgtest.DirectURL(t))
	require.NoError(t, err)
	defer holder.Close(context.Background())
	var pid int
	require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT count(*) FROM "+s+".workflows")
	require.NoError(t, err)

	opts := &durable.DoctorOpts{MinDeadTuples: 1000, OldTransaction: 50 * time.Millisecond}
	want := map[string]string{ // check: the subject it names
		durable.CheckDeadTuples:     b.schema + ".steps",
		durable.CheckVacuumLag:      b.schema + ".steps",
		durable.CheckAutovacuumOff:  b.schema + ".steps",
		durable.CheckOldTransaction: fmt.Sprintf("pid %d (", pid),
		durable.CheckDeadExecutor:   "ghost",
		durable.CheckLongPending:    "haunted",
		durable.CheckUnownedRuns:    "legacy @ old",
		durable.CheckOverdueWakeups: "legacy @ old",
		durable.CheckQueueBacklog:   "stalled",
	}
	var report durable.DoctorReport
	missing := func() []string {
		var err error
		report, err = durable.Doctor(ctx, b.pool, b.schema, opts)
		require.NoError(t, err)
		var out []string
		for check, subject := range want {
			found := false
			for _, f := range report.Findings {
				found = found || f.Check == check && strings.HasPrefix(f.Subject, subject)
			}
			if !found {
				out = append(out, check)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(missing()) == 0 }, 20*time.Second, 50*time.Millisecond,
		"not reported: %v; report: %+v", missing(), report)
	for _, f := range report.Findings {
		if _, ok := want[f.Check]; !ok {
			continue
		}
		require.NotEqual(t, durable.SeverityInfo, f.Severity, "%+v", f)
		require.NotEmpty(t, f.Message, "%+v", f)
		require.NotEmpty(t, f.Advice, "%+v", f)
	}
	require.Positive(t, report.Problems())
	require.Equal(t, durable.SeverityCritical, report.Findings[0].Severity, "worst first")
	for _, f := range report.Findings {
		switch f.Check {
		case durable.CheckDeadExecutor:
			require.Contains(t, f.Message, "still owns 1 pending run,")
			require.Equal(t, durable.SeverityCritical, f.Severity, "an hour past a grace of a minute")
		case durable.CheckDeadTuples:
			require.Equal(t, durable.SeverityCritical, f.Severity, "5/6 of the rows are dead")
		case durable.CheckUnownedRuns:
			require.Contains(t, f.Advice, "start an executor of AppVersion old")
		}
	}

	// Ended, the transaction is not reported any more.
	require.NoError(t, tx.Rollback(ctx))
	report, err = durable.Doctor(ctx, b.pool, b.schema, opts)
	require.NoError(t, err)
	for _, f := range report.Findings {
		require.False(t, f.Check == durable.CheckOldTransaction && strings.HasPrefix(f.Subject, fmt.Sprintf("pid %d (", pid)), "%+v", f)
	}

	_, err = durable.Doctor(ctx, b.pool, b.schema, &durable.DoctorOpts{QueueWait: -time.Second})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = durable.Doctor(ctx, b.pool, `x"y`, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}
