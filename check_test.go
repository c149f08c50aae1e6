package durable_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

// The workflows of the "old build": order takes two steps, writes a stream
// entry, then waits for a message for an hour, which parks the run once
// its deadline is recorded; legacy takes a step and sleeps an hour. Their
// parked runs have recorded 0 "reserve", 1 "charge", 2
// "durable.recv-deadline:ship", and 0 "one", 1 "durable.sleep".
func registerOld(e *durable.Engine) (order, legacy *durable.Workflow[int, string]) {
	order = durable.Register(e, "order", func(wctx durable.Context, n int) (string, error) {
		if _, err := durable.Step(wctx, "reserve", func(context.Context) (int, error) { return n, nil }, nil); err != nil {
			return "", err
		}
		if err := durable.StreamWrite(wctx, "progress", "reserved"); err != nil {
			return "", err
		}
		if _, err := durable.Step(wctx, "charge", func(context.Context) (int, error) { return n * 10, nil }, nil); err != nil {
			return "", err
		}
		addr, _, err := durable.Recv[string](wctx, "ship", time.Hour)
		if err != nil {
			return "", err
		}
		return durable.Step(wctx, "ship", func(context.Context) (string, error) { return "shipped to " + addr, nil }, nil)
	}, nil)
	legacy = durable.Register(e, "legacy", func(wctx durable.Context, n int) (string, error) {
		if _, err := durable.Step(wctx, "one", func(context.Context) (int, error) { return n, nil }, nil); err != nil {
			return "", err
		}
		return "", durable.Sleep(wctx, time.Hour)
	}, nil)
	return order, legacy
}

// inFlight records, under the old build, two parked order runs, a parked
// legacy run, and an order run that has recorded nothing (inserted by
// StartTx once no executor is left to claim it). The old build is shut
// down when it returns, as a deploy would.
func inFlight(t *testing.T, b *bundle) {
	t.Helper()
	ctx := ctxT(t)
	old, err := durable.New(b.pool, b.cfg)
	require.NoError(t, err)
	order, legacy := registerOld(old)
	require.NoError(t, old.Launch(ctx))
	for i, id := range []string{"order-1", "order-2"} {
		_, err := order.Start(ctx, i+1, &durable.StartOpts{ID: id})
		require.NoError(t, err)
	}
	_, err = legacy.Start(ctx, 7, &durable.StartOpts{ID: "legacy-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		runs, _, err := old.ListWorkflows(ctx, &durable.ListParams{Statuses: []durable.Status{durable.StatusPending}})
		require.NoError(t, err)
		parked := 0
		for _, r := range runs {
			if r.Executor == "" {
				parked++
			}
		}
		return parked == 3
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, old.Shutdown(ctx))
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = order.StartTx(ctx, tx, 3, &durable.StartOpts{ID: "order-3"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// build is a new build: an engine on the same schema with register's
// workflows, never launched. ran counts the calls of its step functions.
func build(t *testing.T, b *bundle, pool *pgxpool.Pool, register func(e *durable.Engine, ran *atomic.Int32)) (*durable.Engine, *atomic.Int32) {
	t.Helper()
	e, err := durable.New(pool, b.cfg)
	require.NoError(t, err)
	ran := &atomic.Int32{}
	register(e, ran)
	return e, ran
}

// orderV2 registers a new build of order: steps names the steps it takes
// before the Recv, then it takes "ship"; each step function counts itself.
// legacy is registered unchanged unless dropLegacy.
func orderV2(steps []string, afterRecv []string, dropLegacy bool) func(e *durable.Engine, ran *atomic.Int32) {
	return func(e *durable.Engine, ran *atomic.Int32) {
		count := func(context.Context) (int, error) { ran.Add(1); return 1, nil }
		durable.Register(e, "order", func(wctx durable.Context, n int) (string, error) {
			for _, s := range steps {
				if _, err := durable.Step(wctx, s, count, nil); err != nil {
					return "", err
				}
			}
			if _, _, err := durable.Recv[string](wctx, "ship", time.Hour); err != nil {
				return "", err
			}
			for _, s := range afterRecv {
				if _, err := durable.Step(wctx, s, count, nil); err != nil {
					return "", err
				}
			}
			return "done", nil
		}, nil)
		if !dropLegacy {
			durable.Register(e, "legacy", func(wctx durable.Context, n int) (string, error) {
				if _, err := durable.Step(wctx, "one", count, nil); err != nil {
					return "", err
				}
				return "", durable.Sleep(wctx, time.Hour)
			}, nil)
		}
	}
}

// dbDigest is the whole content of the schema's tables, row by row, plus
// their row counts: any write, even one that sets a column to its own
// value and bumps nothing else, shows in the row's xmin.
func dbDigest(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	ctx := ctxT(t)
	tables := queryMap[string, string](t, pool, `SELECT table_name, table_name FROM information_schema.tables
WHERE table_schema = $1 AND table_type = 'BASE TABLE'`, schema)
	require.NotEmpty(t, tables)
	out := map[string]string{}
	for name := range tables {
		ident := pgx.Identifier{schema, name}.Sanitize()
		var n int
		var digest *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), md5(string_agg(t.xmin::text || ':' || t::text, ',' ORDER BY t::text))
FROM `+ident+` t`).Scan(&n, &digest))
		d := ""
		if digest != nil {
			d = *digest
		}
		out[name] = fmt.Sprintf("%d rows %s", n, d)
	}
	return out
}

func problemsByID(rep *durable.CheckReport) map[string]durable.CheckProblem {
	out := map[string]durable.CheckProblem{}
	for _, p := range rep.Problems {
		out[p.WorkflowID] = p
	}
	return out
}

// TestCheckFindsIncompatibleBuilds: Check replays new builds against the
// in-flight runs of an old one, with nothing executed and nothing written:
// builds with the same steps, or with a new step after the recorded ones,
// pass; a renamed step, a step inserted before the recorded ones, a
// recorded output the code no longer decodes, a panic and a dropped
// workflow are each reported for the right runs, at the right position.
func TestCheckFindsIncompatibleBuilds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	inFlight(t, b)
	before := dbDigest(t, b.pool, b.schema)

	check := func(t *testing.T, register func(*durable.Engine, *atomic.Int32), opts *durable.CheckOpts) *durable.CheckReport {
		t.Helper()
		e, ran := build(t, b, b.pool, register)
		rep, err := durable.Check(ctx, e, opts)
		require.NoError(t, err)
		require.Zero(t, ran.Load(), "a step function ran during the check")
		return rep
	}

	t.Run("same steps", func(t *testing.T) {
		rep := check(t, orderV2([]string{"reserve", "charge"}, []string{"ship"}, false), nil)
		require.True(t, rep.OK(), "%+v", rep.Problems)
		require.Equal(t, 4, rep.Checked)
		require.Equal(t, []string{"test"}, rep.AppVersions)
	})
	t.Run("new step after the recorded ones", func(t *testing.T) {
		rep := check(t, orderV2([]string{"reserve", "charge"}, []string{"notify", "ship"}, false), nil)
		require.True(t, rep.OK(), "%+v", rep.Problems)
	})
	t.Run("renamed step", func(t *testing.T) {
		rep := check(t, orderV2([]string{"reserve", "charge-card"}, []string{"ship"}, false), nil)
		require.Equal(t, 4, rep.Checked)
		got := problemsByID(rep)
		require.Len(t, got, 2, "%+v", rep.Problems) // order-3 recorded nothing: it is compatible
		for _, id := range []string{"order-1", "order-2"} {
			p := got[id]
			require.Equal(t, durable.ProblemNonDeterminism, p.Kind)
			require.Equal(t, "order", p.Workflow)
			require.Equal(t, "test", p.AppVersion)
			require.Equal(t, durable.StatusPending, p.Status)
			require.Equal(t, 1, p.Pos)
			require.Equal(t, "charge", p.Recorded)
			require.Equal(t, "charge-card", p.Called)
			require.ErrorIs(t, p.Err, durable.ErrNonDeterministic)
			require.Contains(t, p.Message, `step 1 is recorded as "charge" but the code called "charge-card"`)
		}
	})
	t.Run("step inserted before the wait", func(t *testing.T) {
		rep := check(t, orderV2([]string{"reserve", "charge", "notify"}, []string{"ship"}, false), nil)
		got := problemsByID(rep)
		require.Len(t, got, 2, "%+v", rep.Problems)
		p := got["order-1"]
		require.Equal(t, durable.ProblemNonDeterminism, p.Kind)
		require.Equal(t, 2, p.Pos)
		require.Equal(t, "durable.recv-deadline:ship", p.Recorded)
		require.Equal(t, "notify", p.Called)
	})
	t.Run("history read a step at a time", func(t *testing.T) {
		// Each run's history is read in windows of one step as the replay
		// reaches them: the verdicts are the same.
		cfg := *b.cfg
		hooks.Set(&cfg, hooks.Knobs{ResumeWindow: 1})
		windowed := *b
		windowed.cfg = &cfg
		for _, c := range []struct {
			steps    []string
			problems int
		}{{[]string{"reserve", "charge"}, 0}, {[]string{"reserve", "charge", "notify"}, 2}} {
			e, ran := build(t, &windowed, b.pool, orderV2(c.steps, []string{"ship"}, false))
			rep, err := durable.Check(ctx, e, nil)
			require.NoError(t, err)
			require.Zero(t, ran.Load(), "a step function ran during the check")
			require.Equal(t, 4, rep.Checked)
			got := problemsByID(rep)
			require.Len(t, got, c.problems, "%+v", rep.Problems)
			if c.problems > 0 {
				require.Equal(t, 2, got["order-1"].Pos)
				require.Equal(t, "durable.recv-deadline:ship", got["order-1"].Recorded)
			}
		}
	})
	t.Run("dropped workflow", func(t *testing.T) {
		rep := check(t, orderV2([]string{"reserve", "charge"}, []string{"ship"}, true), nil)
		got := problemsByID(rep)
		require.Len(t, got, 1, "%+v", rep.Problems)
		p := got["legacy-1"]
		require.Equal(t, durable.ProblemUnregistered, p.Kind)
		require.Equal(t, "legacy", p.Workflow)
		require.Equal(t, -1, p.Pos)
		require.NoError(t, p.Err)
	})
	t.Run("recorded output no longer decodes", func(t *testing.T) {
		rep := check(t, func(e *durable.Engine, ran *atomic.Int32) {
			durable.Register(e, "order", func(wctx durable.Context, n int) (string, error) {
				// reserve recorded an int; this build says it returns a struct.
				_, err := durable.Step(wctx, "reserve", func(context.Context) (struct{ N int }, error) {
					ran.Add(1)
					return struct{ N int }{}, nil
				}, nil)
				return "", err
			}, nil)
		}, &durable.CheckOpts{Workflows: []string{"order"}})
		got := problemsByID(rep)
		require.Len(t, got, 2, "%+v", rep.Problems)
		p := got["order-2"]
		require.Equal(t, durable.ProblemFailure, p.Kind)
		require.Equal(t, 0, p.Pos)
		require.Equal(t, "reserve", p.Recorded)
		require.ErrorIs(t, p.Err, durable.ErrDecode)
	})
	t.Run("panic while replaying", func(t *testing.T) {
		rep := check(t, func(e *durable.Engine, ran *atomic.Int32) {
			durable.Register(e, "order", func(wctx durable.Context, n int) (string, error) {
				if _, err := durable.Step(wctx, "reserve", func(context.Context) (int, error) { ran.Add(1); return 0, nil }, nil); err != nil {
					return "", err
				}
				var m map[string]int
				m["boom"] = n // a bug of the new build, past the first recorded step
				return "", nil
			}, nil)
		}, &durable.CheckOpts{Workflows: []string{"order"}})
		got := problemsByID(rep)
		require.Len(t, got, 2, "%+v", rep.Problems)
		p := got["order-1"]
		require.Equal(t, durable.ProblemFailure, p.Kind)
		require.Equal(t, 0, p.Pos)
		require.ErrorIs(t, p.Err, durable.ErrPanic)
	})
	t.Run("filters", func(t *testing.T) {
		drop := orderV2([]string{"reserve", "charge-card"}, nil, true)
		rep := check(t, drop, &durable.CheckOpts{Workflows: []string{"legacy", "legacy"}})
		require.Equal(t, 1, rep.Checked)
		require.Len(t, rep.Problems, 1)
		require.Equal(t, "legacy-1", rep.Problems[0].WorkflowID)
		rep = check(t, drop, &durable.CheckOpts{AppVersions: []string{"other"}})
		require.Zero(t, rep.Checked)
		require.True(t, rep.OK())
		rep = check(t, drop, &durable.CheckOpts{AllVersions: true})
		require.Equal(t, 4, rep.Checked)
		require.Len(t, rep.Problems, 3)
		require.Empty(t, rep.AppVersions)
	})

	require.Equal(t, before, dbDigest(t, b.pool, b.schema), "the checks wrote to the database")
}

// TestCheckVerdictIsTheResumes: the build Check reports incompatible
// fails the run with the very error it reported once it resumes it; the
// build it passes finishes the run.
func TestCheckVerdictIsTheResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	inFlight(t, b)
	renamed := orderV2([]string{"reserve", "charge-card"}, nil, false)
	same := orderV2([]string{"reserve", "charge"}, []string{"ship"}, false)

	e, _ := build(t, b, b.pool, renamed)
	rep, err := durable.Check(ctx, e, &durable.CheckOpts{Workflows: []string{"order"}})
	require.NoError(t, err)
	p := problemsByID(rep)["order-1"]
	require.Equal(t, durable.ProblemNonDeterminism, p.Kind)
	e, _ = build(t, b, b.pool, same)
	rep, err = durable.Check(ctx, e, &durable.CheckOpts{Workflows: []string{"order"}})
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep.Problems)

	finished := func(e *durable.Engine, id string) durable.WorkflowInfo {
		var info durable.WorkflowInfo
		require.Eventually(t, func() bool {
			var err error
			info, err = e.Inspect(ctx, id)
			require.NoError(t, err)
			return info.Status.Finished()
		}, 30*time.Second, 5*time.Millisecond)
		return info
	}
	bad := b.engine(t, nil, func(e *durable.Engine) { renamed(e, &atomic.Int32{}) })
	require.NoError(t, durable.Send(ctx, bad, "order-1", "ship", "Paris", nil))
	info := finished(bad, "order-1")
	require.Equal(t, durable.StatusError, info.Status)
	require.ErrorIs(t, info.Error, durable.ErrNonDeterministic)
	require.Equal(t, p.Message, info.Error.Error())
	require.NoError(t, bad.Shutdown(ctx))

	good := b.engine(t, nil, func(e *durable.Engine) { same(e, &atomic.Int32{}) })
	require.NoError(t, durable.Send(ctx, good, "order-2", "ship", "Paris", nil))
	info = finished(good, "order-2")
	require.Equal(t, durable.StatusSuccess, info.Status, "%v", info.Error)
}

// TestCheckIsReadOnly: Check and LoadHistory work through a role that may
// only read the engine's tables, and through sessions whose every
// transaction is read-only; the database is the same afterwards, row for
// row.
func TestCheckIsReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	inFlight(t, b)
	before := dbDigest(t, b.pool, b.schema)

	role := restrictedRole(t, b.pool)
	ident, r := pgx.Identifier{b.schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	mustExec(t, b.pool, "GRANT USAGE ON SCHEMA "+ident+" TO "+r)
	mustExec(t, b.pool, "GRANT SELECT ON ALL TABLES IN SCHEMA "+ident+" TO "+r)
	reader := rolePool(t, role)
	_, err := reader.Exec(ctx, "UPDATE "+ident+".workflows SET updated_at = updated_at")
	requireSQLState(t, err, "42501") // insufficient_privilege: the role cannot write

	// PgBouncer refuses the startup parameter: behind it (scripts/with-pgbouncer),
	// the read-only sessions go to Postgres directly.
	conn := b.pool.Config().ConnString()
	if direct := os.Getenv("DURABLE_TEST_DIRECT_URL"); direct != "" {
		conn = direct
	}
	cfg, err := pgxpool.ParseConfig(conn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	readOnly, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(readOnly.Close)
	_, err = readOnly.Exec(ctx, "UPDATE "+ident+".workflows SET updated_at = updated_at")
	requireSQLState(t, err, "25006") // read_only_sql_transaction

	for name, pool := range map[string]*pgxpool.Pool{"read-only role": reader, "read-only transactions": readOnly} {
		t.Run(name, func(t *testing.T) {
			e, ran := build(t, b, pool, orderV2([]string{"reserve", "charge-card"}, []string{"ship"}, true))
			rep, err := durable.Check(ctx, e, nil)
			require.NoError(t, err)
			require.Equal(t, 4, rep.Checked)
			got := problemsByID(rep)
			require.Len(t, got, 3, "%+v", rep.Problems)
			require.Equal(t, durable.ProblemNonDeterminism, got["order-1"].Kind)
			require.Equal(t, durable.ProblemNonDeterminism, got["order-2"].Kind)
			require.Equal(t, durable.ProblemUnregistered, got["legacy-1"].Kind)
			e, ran2 := build(t, b, pool, orderV2([]string{"reserve", "charge"}, []string{"ship"}, false))
			rep, err = durable.Check(ctx, e, nil)
			require.NoError(t, err)
			require.True(t, rep.OK(), "%+v", rep.Problems)
			h, err := durable.LoadHistory(ctx, e, "order-1")
			require.NoError(t, err)
			require.Len(t, h.Steps, 3)
			require.Zero(t, ran.Load()+ran2.Load())
		})
	}
	require.Equal(t, before, dbDigest(t, b.pool, b.schema), "the checks wrote to the database")
}
