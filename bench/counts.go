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
	StmtsPerWF1Defer    *float64 `json:"statements_per_wf1_defer"` // a 1-step workflow with DeferStepCheckpoints

	XIDsPerFloorInsert float64 `json:"xids_per_floor_insert"`
	XIDsPerWF0         float64 `json:"xids_per_wf0"`
	XIDsPerStep        float64 `json:"xids_per_step"`
	XIDsPerTxWF        float64 `json:"xids_per_txwf"`
	XIDsPerWF1Defer    float64 `json:"xids_per_wf1_defer"`

	WALPerFloorInsert float64 `json:"wal_bytes_per_floor_insert"`
	WALPerFloorTx     float64 `json:"wal_bytes_per_floor_tx"`
	WALPerWF0         float64 `json:"wal_bytes_per_wf0"`
	WALPerStep        float64 `json:"wal_bytes_per_step"`
	WALPerTxWF        float64 `json:"wal_bytes_per_txwf"`

	// A queued 0-step workflow from Enqueue to its finish: enqueued by the
	// engine that works the queue (local) or by a client engine (client).
	StmtsPerQWF0Local  *float64 `json:"statements_per_queued_wf0_local"`
	StmtsPerQWF0Client *float64 `json:"statements_per_queued_wf0_client"`
	XIDsPerQWF0Local   float64  `json:"xids_per_queued_wf0_local"`
	XIDsPerQWF0Client  float64  `json:"xids_per_queued_wf0_client"`
	WALPerQWF0Local    float64  `json:"wal_bytes_per_queued_wf0_local"`
	WALPerQWF0Client   float64  `json:"wal_bytes_per_queued_wf0_client"`

	Batches []Batch `json:"batches"`

	// DBOS's, counted the same way while it runs; null without DBOS.
	DBOS *PeerCounts `json:"dbos"`
}

// PeerCounts are DBOS's per-unit costs, counted like durable's: statements
// in DBOS's own database (BEGIN and COMMIT included, as in durable's),
// write transactions and WAL cluster-wide (durable's idle engine may add
// a heartbeat).
type PeerCounts struct {
	StmtsPerWF0  *float64 `json:"statements_per_wf0"`
	StmtsPerStep *float64 `json:"statements_per_step"`
	XIDsPerWF0   float64  `json:"xids_per_wf0"`
	XIDsPerStep  float64  `json:"xids_per_step"`
	WALPerStep   float64  `json:"wal_bytes_per_step"`
	Batches      []Batch  `json:"batches"`
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
	// TotalMS is the server time of all calls (pg_stat_statements'
	// total_exec_time: planning excluded, waits included).
	TotalMS float64 `json:"total_exec_ms"`
	Query   string  `json:"query"`
}

const topStatements = 12

func (b *bench) count(ctx context.Context) (Counts, error) {
	c := Counts{}
	c.StatementsAvailable, c.StatementsNote = b.statementsAvailable(ctx)
	if c.StatementsAvailable {
		_ = b.conn.QueryRow(ctx, `SELECT coalesce(current_setting('pg_stat_statements.track', true), ''),
			coalesce(current_setting('pg_stat_statements.track_utility', true), '')`).Scan(&c.Track, &c.TrackUtility)
	} else {
		b.o.logf("bench: statement counts %s", c.StatementsNote)
	}

	n := b.o.StatsN
	batches := []struct {
		name   string
		op     opFunc
		settle opFunc // before the counters are read
	}{
		{"floor_insert", b.floorInsert, nil},
		{"floor_tx", b.floorTx, nil},
		{"wf0", workflowOp(b.steps, 0), nil},
		{"wf10", workflowOp(b.steps, 10), nil},
		{"txwf", workflowOp(b.txwf, 1), nil},
		{"wf1_defer", workflowOp(b.deferSteps, 1), nil},
		{"queued_wf0_local", b.enqueueStarted(false), b.settleQueued},
		{"queued_wf0_client", b.enqueueStarted(true), b.settleQueued},
	}
	got := map[string]Batch{}
	for _, bt := range batches {
		bb, err := b.countBatch(ctx, bt.name, n, bt.op, bt.settle, "", c.StatementsAvailable)
		if err != nil {
			return c, fmt.Errorf("count %s: %w", bt.name, err)
		}
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
	c.XIDsPerWF1Defer = per("wf1_defer", xids)
	c.WALPerFloorInsert = per("floor_insert", wal)
	c.WALPerFloorTx = per("floor_tx", wal)
	c.WALPerWF0 = per("wf0", wal)
	c.WALPerStep = (per("wf10", wal) - c.WALPerWF0) / 10
	c.WALPerTxWF = per("txwf", wal)
	c.XIDsPerQWF0Local = per("queued_wf0_local", xids)
	c.XIDsPerQWF0Client = per("queued_wf0_client", xids)
	c.WALPerQWF0Local = per("queued_wf0_local", wal)
	c.WALPerQWF0Client = per("queued_wf0_client", wal)
	if c.StatementsAvailable {
		c.StmtsPerQWF0Local = ptr(per("queued_wf0_local", func(b Batch) int64 { return b.Calls }))
		c.StmtsPerQWF0Client = ptr(per("queued_wf0_client", func(b Batch) int64 { return b.Calls }))
		calls := func(b Batch) int64 { return b.Calls }
		c.StmtsPerFloorInsert = ptr(per("floor_insert", calls))
		c.StmtsPerFloorTx = ptr(per("floor_tx", calls))
		c.StmtsPerWF0 = ptr(per("wf0", calls))
		c.StmtsPerWF10 = ptr(per("wf10", calls))
		c.StmtsPerStep = ptr((*c.StmtsPerWF10 - *c.StmtsPerWF0) / 10)
		c.StmtsPerTxWF = ptr(per("txwf", calls))
		c.StmtsPerWF1Defer = ptr(per("wf1_defer", calls))
		c.StmtsTxStepExtra = ptr(*c.StmtsPerTxWF - *c.StmtsPerWF0 - *c.StmtsPerFloorTx)
	}
	return c, nil
}

func ptr(v float64) *float64 { return &v }

// countDBOS counts DBOS's 0-step and 10-step workflows (before the peers
// stop: DBOS must be running).
func (b *bench) countDBOS(ctx context.Context) (*PeerCounts, error) {
	stmts, _ := b.statementsAvailable(ctx)
	db := b.o.dbName("dbos")
	n0, n10 := b.o.StatsN, max(1, b.o.StatsN/5)
	wf0, err := b.countBatch(ctx, "dbos_wf0", n0, b.dbosWorkflow(0), nil, db, stmts)
	if err != nil {
		return nil, fmt.Errorf("count dbos_wf0: %w", err)
	}
	wf10, err := b.countBatch(ctx, "dbos_wf10", n10, b.dbosWorkflow(10), nil, db, stmts)
	if err != nil {
		return nil, fmt.Errorf("count dbos_wf10: %w", err)
	}
	per := func(v int64, n int) float64 { return float64(v) / float64(n) }
	c := &PeerCounts{Batches: []Batch{wf0, wf10}}
	c.XIDsPerWF0 = per(wf0.XIDs, n0)
	c.XIDsPerStep = (per(wf10.XIDs, n10) - c.XIDsPerWF0) / 10
	c.WALPerStep = (per(wf10.WALBytes, n10) - per(wf0.WALBytes, n0)) / 10
	if stmts {
		c.StmtsPerWF0 = ptr(per(wf0.Calls, n0))
		c.StmtsPerStep = ptr((per(wf10.Calls, n10) - *c.StmtsPerWF0) / 10)
	}
	return c, nil
}

// resetStatements clears the statement counters of database db ("": the
// bench's own), leaving the rest of a possibly shared server alone.
func (b *bench) resetStatements(ctx context.Context, db string) error {
	_, err := b.conn.Exec(ctx, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = coalesce(nullif($1, ''), current_database())), 0)", db)
	return err
}

// snap returns the WAL position in bytes and the next XID to be assigned.
// Neither query writes WAL or assigns an XID.
func (b *bench) snap(ctx context.Context) (wal, xid int64, err error) {
	err = b.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&wal, &xid)
	return wal, xid, err
}

// statementsAvailable reports (once per run) whether pg_stat_statements
// can be used, with a note for the output.
func (b *bench) statementsAvailable(ctx context.Context) (bool, string) {
	if b.stmtsNote == "" {
		if _, err := b.conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			b.stmtsNote = "n/a: " + err.Error()
		} else if _, err := b.conn.Exec(ctx, "SELECT count(*) FROM pg_stat_statements"); err != nil {
			b.stmtsNote = "n/a: " + err.Error()
		} else if err := b.resetStatements(ctx, ""); err != nil {
			b.stmtsNote = "n/a: " + err.Error()
		} else {
			b.stmtsOK = true
			b.stmtsNote = "pg_stat_statements of this database only; includes the engine's background statements (heartbeat, sweeper) issued during the batch"
		}
	}
	return b.stmtsOK, b.stmtsNote
}

// readStatements sums the calls of database db's statements ("": the
// bench's own) since the last reset, leaving out the bench's counting and
// polling queries, and returns the most called ones.
func (b *bench) readStatements(ctx context.Context, db string) (int64, []Stmt, error) {
	rows, err := b.conn.Query(ctx, `SELECT query, calls, rows, mean_exec_time, total_exec_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = coalesce(nullif($1, ''), current_database()))
	AND query NOT ILIKE '%pg_stat_statements%' AND query NOT LIKE '%`+pollMarker+`%'
ORDER BY calls DESC, query`, db)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var calls int64
	var top []Stmt
	for rows.Next() {
		var s Stmt
		if err := rows.Scan(&s.Query, &s.Calls, &s.Rows, &s.MeanMS, &s.TotalMS); err != nil {
			return 0, nil, err
		}
		calls += s.Calls
		if len(top) < topStatements {
			s.Query = squash(s.Query, 300)
			top = append(top, s)
		}
	}
	return calls, top, rows.Err()
}

// countBatch runs n units of op, counts what they cost and logs it; the
// statements are those of database db ("": the bench's own), when stmts.
// It counts two passes of n units and keeps the one that wrote less WAL:
// the WAL is the cluster's, and the first change of a page after a
// checkpoint writes the whole page (a DROP DATABASE of the peer phases
// forces one): a checkpoint that lands in or just before one pass
// inflates it by megabytes, and checkpoints are minutes apart.
func (b *bench) countBatch(ctx context.Context, name string, n int, op, settle opFunc, db string, stmts bool) (Batch, error) {
	for i := 0; i < b.o.Warmup; i++ {
		if err := op(ctx); err != nil {
			return Batch{Name: name}, err
		}
	}
	var best Batch
	var wals []int64
	for pass := 0; pass < 2; pass++ {
		bt, err := b.countPass(ctx, name, n, op, settle, db, stmts)
		if err != nil {
			return bt, err
		}
		wals = append(wals, bt.WALBytes)
		if pass == 0 || bt.WALBytes < best.WALBytes {
			best = bt
		}
	}
	b.o.logf("count %-13s calls %6d  xids %6d  wal %9d B  (%d units, %d ms; WAL of the two passes %d and %d B)",
		best.Name, best.Calls, best.XIDs, best.WALBytes, best.N, best.DurationMS, wals[0], wals[1])
	return best, nil
}

// countPass is one pass of countBatch.
func (b *bench) countPass(ctx context.Context, name string, n int, op, settle opFunc, db string, stmts bool) (Batch, error) {
	bt := Batch{Name: name, N: n, Calls: -1}
	if settle != nil {
		if err := settle(ctx); err != nil {
			return bt, err
		}
	}
	wal0, xid0, err := b.snap(ctx)
	if err != nil {
		return bt, err
	}
	if stmts {
		if err := b.resetStatements(ctx, db); err != nil {
			return bt, err
		}
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := op(ctx); err != nil {
			return bt, err
		}
	}
	if settle != nil {
		if err := settle(ctx); err != nil {
			return bt, err
		}
	}
	bt.DurationMS = time.Since(t0).Milliseconds()
	if stmts {
		if bt.Calls, bt.Top, err = b.readStatements(ctx, db); err != nil {
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
