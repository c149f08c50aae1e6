package sysdb

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// planSettings go before a statement sent by queryIndexPlanned, in its
// transaction: the planner then reads every table of the statement
// through an index wherever one serves, and makes the statement's generic
// plan at its first execution on a connection, which keeps it.
const planSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// queryIndexPlanned runs sql with args on db, in one round trip after
// planSettings, which last for the transaction: db's if it is one, else the
// implicit one of the batch (sql is then committed when the rows are
// read).
//
// It serves the batch statements that update runs by "id = ANY(...)": the
// batch finish (see finishMany), the queue's claims and recovery's. They
// used to be planned at each execution (oneShotPlan) because a plan kept
// by the connection was only as good as the table's size when it was
// made: a generic plan made while the runs table was small reads the
// whole table, and it was kept while the table grew to thousands of runs
// (a drain then cost the server 3-4x its CPU per run). Planned with
// sequential scans off, each plan finds its runs through an index
// whatever the table's size and statistics
// (TestGenericPlansFromASmallTable), so the connection keeps it (pgx's
// statement cache): planning the hand-on's finish had cost its server a
// quarter of its CPU per run, and a claim planned inside the dispatch
// pass held the queue's row lock while it was planned. The generic plan
// is made at once (plan_cache_mode): by default a connection first plans
// five custom ones, and as a drain's 40 connections each run a batch
// statement only a few times, most of its finishes and claims were
// planned (~0.5-0.7 ms each, ~1.4 µs of server CPU per drained run, now
// ~0.2; the executions cost about the same with either plan;
// TestIndexPlannedOncePerConnection).
func queryIndexPlanned(ctx context.Context, db DBTX, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(planSettings)
	b.Queue(sql, args...)
	br := db.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of the last statement of a batch: closing them
// (which Next does once the rows are read) closes the batch, and its
// error (the implicit transaction's commit among them) is the rows'.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.err = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
