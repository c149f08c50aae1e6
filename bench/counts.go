package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Counts are per-unit costs that do not depend on timing: SQL statements
// (from pg_stat_statements, this database only), write transactions (XIDs
// assigned, i.e. commit flushes) and WAL bytes (both cluster-wide, so they
// are exact only on a cluster nothing else writes to).
type Counts struct {
	StatementsAvailable bool   `json:"statements_available"`
	StatementsNote      string `json:"statements_note"`
	Track               string `json:"pg_stat_statements_track"`
	TrackUtility        string `json:"pg_stat_statements_track_utility"`

	// Statements per unit; null when pg_stat_statements is not available.
	StmtsPerFloorInsert *float64 `json:"statements_per_floor_insert"`
	StmtsPerFloorTx     *float64 `json:"statements_per_floor_tx"`
	StmtsPerWF0         *float64 `json:"statements_per_wf0"`
	StmtsPerWF10        *float64 `json:"statements_per_wf10"`
	StmtsPerStep        *float64 `json:"statements_per_step"`
	StmtsPerTxWF        *float64 `json:"statements_per_txwf"`
	StmtsTxStepExtra    *float64 `json:"statements_txstep_beyond_hand_tx"`

	XIDsPerFloorInsert float64 `json:"xids_per_floor_insert"`
	XIDsPerWF0         float64 `json:"xids_per_wf0"`
	XIDsPerStep        float64 `json:"xids_per_step"`
	XIDsPerTxWF        float64 `json:"xids_per_txwf"`

	WALPerFloorInsert float64 `json:"wal_bytes_per_floor_insert"`
	WALPerFloorTx     float64 `json:"wal_bytes_per_floor_tx"`
	WALPerWF0         float64 `json:"wal_bytes_per_wf0"`
	WALPerStep        float64 `json:"wal_bytes_per_step"`
	WALPerTxWF        float64 `json:"wal_bytes_per_txwf"`

	Batches []Batch `json:"batches"`
}

// Batch is one counted batch of n sequential units.
type Batch struct {
	Name       string `json:"name"`
	N          int    `json:"n"`
	Calls      int64  `json:"calls"` // -1: not available
	XIDs       int64  `json:"xids"`
	WALBytes   int64  `json:"wal_bytes"`
	DurationMS int64  `json:"duration_ms"`
	Top        []Stmt `json:"top_statements"`
}

// Stmt is one pg_stat_statements entry.
type Stmt struct {
	Calls  int64   `json:"calls"`
	Rows   int64   `json:"rows"`
	MeanMS float64 `json:"mean_exec_ms"`
	Query  string  `json:"query"`
}

const topStatements = 12

func (b *bench) count(ctx context.Context) (Counts, error) {
	c := Counts{}
	if _, err := b.conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		c.StatementsNote = "n/a: " + err.Error()
	} else if _, err := b.conn.Exec(ctx, "SELECT count(*) FROM pg_stat_statements"); err != nil {
		c.StatementsNote = "n/a: " + err.Error()
	} else if err := b.resetStatements(ctx); err != nil {
		c.StatementsNote = "n/a: " + err.Error()
	} else {
		c.StatementsAvailable = true
		c.StatementsNote = "pg_stat_statements of this database only; includes the engine's background statements (heartbeat, sweeper) issued during the batch"
		_ = b.conn.QueryRow(ctx, `SELECT coalesce(current_setting('pg_stat_statements.track', true), ''),
			coalesce(current_setting('pg_stat_statements.track_utility', true), '')`).Scan(&c.Track, &c.TrackUtility)
	}
	if !c.StatementsAvailable {
		b.o.logf("bench: statement counts %s", c.StatementsNote)
	}

	n := b.o.StatsN
	batches := []struct {
		name string
		op   opFunc
	}{
		{"floor_insert", b.floorInsert},
		{"floor_tx", b.floorTx},
		{"wf0", b.workflow(b.steps, 0)},
		{"wf10", b.workflow(b.steps, 10)},
		{"txwf", b.workflow(b.txwf, 1)},
	}
	got := map[string]Batch{}
	for _, bt := range batches {
		bb, err := b.countBatch(ctx, bt.name, n, bt.op, c.StatementsAvailable)
		if err != nil {
			return c, fmt.Errorf("count %s: %w", bt.name, err)
		}
		b.o.logf("count %-13s calls %6d  xids %6d  wal %9d B  (%d units, %d ms)", bt.name, bb.Calls, bb.XIDs, bb.WALBytes, n, bb.DurationMS)
		got[bt.name] = bb
		c.Batches = append(c.Batches, bb)
	}

	fn := float64(n)
	per := func(name string, v func(Batch) int64) float64 { return float64(v(got[name])) / fn }
	xids := func(b Batch) int64 { return b.XIDs }
	wal := func(b Batch) int64 { return b.WALBytes }
	c.XIDsPerFloorInsert = per("floor_insert", xids)
	c.XIDsPerWF0 = per("wf0", xids)
	c.XIDsPerStep = (per("wf10", xids) - c.XIDsPerWF0) / 10
	c.XIDsPerTxWF = per("txwf", xids)
	c.WALPerFloorInsert = per("floor_insert", wal)
	c.WALPerFloorTx = per("floor_tx", wal)
	c.WALPerWF0 = per("wf0", wal)
	c.WALPerStep = (per("wf10", wal) - c.WALPerWF0) / 10
	c.WALPerTxWF = per("txwf", wal)
	if c.StatementsAvailable {
		calls := func(b Batch) int64 { return b.Calls }
		c.StmtsPerFloorInsert = ptr(per("floor_insert", calls))
		c.StmtsPerFloorTx = ptr(per("floor_tx", calls))
		c.StmtsPerWF0 = ptr(per("wf0", calls))
		c.StmtsPerWF10 = ptr(per("wf10", calls))
		c.StmtsPerStep = ptr((*c.StmtsPerWF10 - *c.StmtsPerWF0) / 10)
		c.StmtsPerTxWF = ptr(per("txwf", calls))
		c.StmtsTxStepExtra = ptr(*c.StmtsPerTxWF - *c.StmtsPerWF0 - *c.StmtsPerFloorTx)
	}
	return c, nil
}

func ptr(v float64) *float64 { return &v }

func (b *bench) resetStatements(ctx context.Context) error {
	// Only this database's entries: the server may be shared.
	_, err := b.conn.Exec(ctx, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)")
	return err
}

// snap returns the WAL position in bytes and the next XID to be assigned.
// Neither query writes WAL or assigns an XID.
func (b *bench) snap(ctx context.Context) (wal, xid int64, err error) {
	err = b.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&wal, &xid)
	return wal, xid, err
}

func (b *bench) countBatch(ctx context.Context, name string, n int, op opFunc, stmts bool) (Batch, error) {
	bt := Batch{Name: name, N: n, Calls: -1}
	for i := 0; i < b.o.Warmup; i++ {
		if err := op(ctx); err != nil {
			return bt, err
		}
	}
	wal0, xid0, err := b.snap(ctx)
	if err != nil {
		return bt, err
	}
	if stmts {
		if err := b.resetStatements(ctx); err != nil {
			return bt, err
		}
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := op(ctx); err != nil {
			return bt, err
		}
	}
	bt.DurationMS = time.Since(t0).Milliseconds()
	if stmts {
		rows, err := b.conn.Query(ctx, `SELECT query, calls, rows, mean_exec_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND query NOT ILIKE '%pg_stat_statements%'
ORDER BY calls DESC, query`)
		if err != nil {
			return bt, err
		}
		bt.Calls = 0
		for rows.Next() {
			var s Stmt
			if err := rows.Scan(&s.Query, &s.Calls, &s.Rows, &s.MeanMS); err != nil {
				rows.Close()
				return bt, err
			}
			bt.Calls += s.Calls
			if len(bt.Top) < topStatements {
				s.Query = squash(s.Query, 300)
				bt.Top = append(bt.Top, s)
			}
		}
		if err := rows.Err(); err != nil {
			return bt, err
		}
	}
	wal1, xid1, err := b.snap(ctx)
	if err != nil {
		return bt, err
	}
	bt.WALBytes, bt.XIDs = wal1-wal0, xid1-xid0
	return bt, nil
}

// squash folds whitespace and cuts s to at most n bytes.
func squash(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
