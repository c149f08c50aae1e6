package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the child process of the
// recovery scenario, as the bench binary does.
func TestMain(m *testing.M) {
	if spec := os.Getenv(recoveryChildEnv); spec != "" {
		os.Exit(recoveryChildMain(spec))
	}
	if spec := os.Getenv(dbosRecoveryChildEnv); spec != "" {
		os.Exit(dbosRecoveryChildMain(spec))
	}
	if spec := os.Getenv(scaleChildEnv); spec != "" {
		os.Exit(scaleChildMain(spec))
	}
	os.Exit(m.Run())
}

// TestSmoke runs every scenario once with tiny counts and checks that the
// written results carry every field. It checks no timing.
func TestSmoke(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("DATABASE_URL is not set; run: cd bench && ../scripts/with-postgres go test .")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	o := DefaultOptions()
	o.URL = url
	o.Database = "durable_bench_smoke"
	o.Rounds, o.N, o.TputTotal, o.StatsN, o.Warmup = 1, 20, 40, 20, 2
	o.QLatN, o.DrainN, o.DrainRounds, o.RecoveryN = 20, 20, 1, 20
	o.PeerN, o.PeerDrainN, o.RiverDrainN, o.RiverLatN = 10, 50, 50, 2
	o.DBOSQLatN, o.DBOSRecoveryN = 2, 20
	o.ScaleIdle, o.ScaleProcs, o.ScaleRepeats = 100*time.Millisecond, []int{1, 2}, 1
	o.Growth, o.GrowthSteps, o.GrowthParked = []int{2000}, 200, 100
	o.OutDir = t.TempDir()
	o.DropAfter = true
	if testing.Verbose() {
		o.Progress = os.Stderr
	}
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join(o.OutDir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"latest.md", "latency.png", "throughput.png", "drain.png"} {
		if st, err := os.Stat(filepath.Join(o.OutDir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	for _, k := range []string{"format", "started_at", "finished_at", "duration_s", "env", "params", "rounds", "median", "counts",
		"recovery", "dbos_recovery", "flow", "scale", "drain_top_statements", "river_drain_top_statements", "targets", "peer_reference"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("latest.json has no %q", k)
		}
	}
	env := doc["env"].(map[string]any)
	for _, k := range []string{"go_version", "num_cpu", "cpu_model", "pg_version", "fsync", "synchronous_commit", "wal_sync_method"} {
		if v, ok := env[k]; !ok || v == "" || v == 0.0 {
			t.Errorf("env.%s missing or empty: %v", k, v)
		}
	}
	if n := len(doc["rounds"].([]any)); n != 1 {
		t.Errorf("rounds: got %d, want 1", n)
	}

	median := doc["median"].(map[string]any)
	var want []string
	for _, s := range []string{"floor_insert", "floor_insert_async", "floor_tx", "floor_select", "floor_ckpt", "floor_ckpt_plain", "wf0", "wf1", "wf1_defer", "wf10", "txwf", "qlat_local", "qlat_client",
		"qlat_local_enqueue", "qlat_client_enqueue"} {
		want = append(want, s+"_us", s+"_p50_us", s+"_p99_us")
	}
	want = append(want, "ratio_floor_insert_async", "ratio_floor_tx", "ratio_floor_select", "ratio_floor_ckpt", "ratio_floor_ckpt_plain", "ratio_step_vs_ckpt", "ratio_wf0", "ratio_wf1", "ratio_wf1_defer", "ratio_wf1_defer_vs_wf1", "ratio_wf10",
		"ratio_step_overhead", "ratio_txwf",
		"ratio_qlat_local", "ratio_qlat_local_p50", "ratio_qlat_local_p99",
		"ratio_qlat_client", "ratio_qlat_client_p50", "ratio_qlat_client_p99",
		"ratio_qlat_local_enqueue_p50", "ratio_qlat_client_enqueue_p50",
		"drain_s", "drain_per_s", "drain_launch_ms", "drain_xids_per_wf", "drain_wal_bytes_per_wf",
		"drain_enqueue_per_s", "drain_enqueue_lat_us", "drain_floor_insert_c8_per_s", "drain_floor_insert_c32_per_s",
		"drain_floor_per_s", "ratio_drain_insert_c32", "ratio_drain_floor", "ratio_drain_enqueue_insert_c8",
		"drain_defer_per_s", "ratio_drain_defer_vs_drain", "ratio_drain_defer_vs_river_tuned",
		"drain0_enqueue_many_per_s", "ratio_enqueue_many_vs_river_insert_many")
	if res.Counts.StatementsAvailable {
		want = append(want, "drain_statements_per_wf", "drain_defer_statements_per_wf")
	}
	for _, c := range o.Concurrency {
		want = append(want, fmt.Sprintf("tput_wf1_c%d_per_s", c), fmt.Sprintf("tput_wf1_c%d_lat_us", c),
			fmt.Sprintf("tput_insert_c%d_per_s", c), fmt.Sprintf("tput_insert_c%d_lat_us", c), fmt.Sprintf("ratio_tput_c%d", c))
	}
	want = append(want, "dbos_wf0_us", "dbos_wf1_us", "dbos_wf10_us", "ratio_dbos_wf0", "ratio_wf0_vs_dbos",
		"dbos_drain_per_s", "dbos_drain_enqueue_per_s", "ratio_drain_vs_dbos",
		"river_drain_per_s", "river_tuned_drain_per_s", "ratio_drain_vs_river", "ratio_drain_vs_river_tuned",
		"river_lat_us", "river_lat_p50_us", "river_lat_p99_us")
	for _, q := range []string{"dbos_qlat", "dbos_qlat50"} {
		want = append(want, q+"_us", q+"_p50_us", q+"_p99_us", q+"_poll_ms",
			"ratio_"+q+"_p50", "ratio_"+q+"_p99", "ratio_qlat_vs_"+q+"_p50", "ratio_qlat_vs_"+q+"_p99")
	}
	for _, c := range o.Concurrency {
		want = append(want, fmt.Sprintf("tput_dbos_c%d_per_s", c), fmt.Sprintf("ratio_tput_vs_dbos_c%d", c))
		if c >= 32 {
			want = append(want, fmt.Sprintf("tput_nogc_c%d_per_s", c), fmt.Sprintf("ratio_gc_vs_nogc_c%d", c))
		}
	}
	for _, k := range want {
		if v, ok := median[k].(float64); !ok || v <= 0 {
			t.Errorf("median.%s missing or not positive: %v", k, median[k])
		}
	}
	for _, k := range []string{"step_overhead_us", "txstep_cost_us", "ratio_txstep_cost", "dbos_step_overhead_us",
		"flush_us", "ratio_flush", "ratio_finish_flush_of_wf0", "step_beyond_flush_us", "dbos_step_beyond_flush_us"} { // differences: may be negative on a noisy machine
		if _, ok := median[k].(float64); !ok {
			t.Errorf("median.%s missing", k)
		}
	}

	counts := doc["counts"].(map[string]any)
	for _, k := range []string{"xids_per_floor_insert", "xids_per_wf0", "xids_per_step", "xids_per_txwf", "xids_per_wf1_defer",
		"wal_bytes_per_floor_insert", "wal_bytes_per_floor_tx", "wal_bytes_per_wf0", "wal_bytes_per_step", "wal_bytes_per_txwf"} {
		if _, ok := counts[k].(float64); !ok {
			t.Errorf("counts.%s missing", k)
		}
	}
	stmtKeys := []string{"statements_per_floor_insert", "statements_per_floor_tx", "statements_per_wf0",
		"statements_per_wf10", "statements_per_step", "statements_per_txwf", "statements_txstep_beyond_hand_tx", "statements_per_wf1_defer"}
	for _, k := range stmtKeys {
		v, ok := counts[k]
		if !ok {
			t.Errorf("counts.%s missing", k)
			continue
		}
		if res.Counts.StatementsAvailable {
			if _, isNum := v.(float64); !isNum {
				t.Errorf("counts.%s: got %v, want a number", k, v)
			}
		}
	}
	if res.Counts.StatementsAvailable {
		// Exactly 1, plus maybe an engine heartbeat that fell into the batch.
		if got := *res.Counts.StmtsPerFloorInsert; got < 1 || got > 1.5 {
			t.Errorf("statements per floor INSERT: got %v, want 1", got)
		}
	} else {
		t.Logf("pg_stat_statements not available: %s", res.Counts.StatementsNote)
	}
	if n := len(counts["batches"].([]any)); n != 8 {
		t.Errorf("counts.batches: got %d, want 8", n)
	}
	for _, k := range []string{"xids_per_queued_wf0_local", "xids_per_queued_wf0_client", "wal_bytes_per_queued_wf0_local", "wal_bytes_per_queued_wf0_client"} {
		if v, ok := counts[k].(float64); !ok || v <= 0 {
			t.Errorf("counts.%s missing or not positive: %v", k, counts[k])
		}
	}
	for _, k := range []string{"statements_per_queued_wf0_local", "statements_per_queued_wf0_client"} {
		v, ok := counts[k]
		if !ok {
			t.Errorf("counts.%s missing", k)
		} else if _, isNum := v.(float64); res.Counts.StatementsAvailable && !isNum {
			t.Errorf("counts.%s: got %v, want a number", k, v)
		}
	}

	// DBOS's per-step costs, counted the same way while it ran: a DBOS step
	// is one write transaction.
	dc, ok := counts["dbos"].(map[string]any)
	if !ok {
		t.Fatalf("counts.dbos: got %v, want an object", counts["dbos"])
	}
	if v, ok := dc["xids_per_wf0"].(float64); !ok || v <= 0 {
		t.Errorf("counts.dbos.xids_per_wf0 missing or not positive: %v", dc["xids_per_wf0"])
	}
	// Per-step figures are differences of two batches of server-wide
	// counters (a checkpoint's full-page images or an autovacuum land in
	// either batch), so at smoke sizes they may come out negative.
	for _, k := range []string{"xids_per_step", "wal_bytes_per_step"} {
		if _, ok := dc[k].(float64); !ok {
			t.Errorf("counts.dbos.%s missing", k)
		}
	}
	if res.Counts.StatementsAvailable {
		for _, k := range []string{"statements_per_wf0", "statements_per_step"} {
			if v, ok := dc[k].(float64); !ok || v <= 0 {
				t.Errorf("counts.dbos.%s missing or not positive: %v", k, dc[k])
			}
		}
	}
	if n := len(dc["batches"].([]any)); n != 2 {
		t.Errorf("counts.dbos.batches: got %d, want 2", n)
	}

	sc, ok := doc["scale"].(map[string]any)
	if !ok {
		t.Fatalf("scale: got %v, want an object", doc["scale"])
	}
	if rows, _ := sc["rows"].([]any); len(rows) != len(o.ScaleProcs) {
		t.Errorf("scale.rows: got %d, want %d", len(rows), len(o.ScaleProcs))
	} else {
		for i, r := range rows {
			for _, k := range []string{"per_s", "tput_per_s", "server_share", "drain_write_xacts_per_run"} {
				if v, _ := r.(map[string]any)[k].(float64); v <= 0 {
					t.Errorf("scale.rows[%d].%s = %v, want a positive figure", i, k, v)
				}
			}
			// -1 when pg_stat_statements is not available
			if v, _ := r.(map[string]any)["drain_statements_per_run"].(float64); v <= 0 && v != -1 {
				t.Errorf("scale.rows[%d].drain_statements_per_run = %v, want a positive figure or -1", i, v)
			}
		}
	}
	if g, _ := doc["growth"].(map[string]any); g == nil {
		t.Errorf("growth: got %v, want an object", doc["growth"])
	} else {
		if rows, _ := g["rows"].([]any); len(rows) != 2 {
			t.Errorf("growth.rows: got %d, want 2 (the empty table and 2,000 runs)", len(rows))
		}
		if rs, _ := g["resumes"].([]any); len(rs) != 2 {
			t.Errorf("growth.resumes: got %d, want 2", len(rs))
		}
		if p, _ := g["parked"].(map[string]any); p == nil || p["wake_p50_us"].(float64) <= 0 {
			t.Errorf("growth.parked: got %v, want a wake-up time", g["parked"])
		}
	}
	if res.Counts.StatementsAvailable {
		if top, _ := doc["river_drain_top_statements"].([]any); len(top) == 0 {
			t.Errorf("river_drain_top_statements is empty")
		}
	}
	if _, ok := res.Median["drain_server_backend_cpu_us"]; !ok && res.Median["drain_server_cpu_us"] > 0 {
		t.Errorf("drain_server_backend_cpu_us is missing")
	}

	flow, ok := doc["flow"].(map[string]any)
	if !ok {
		t.Fatalf("flow: got %v, want an object", doc["flow"])
	}
	for _, k := range []string{"fair_wait_ms", "priority_wait_ms", "fair_drain_per_s", "plain_drain_per_s", "debounce_per_s", "plain_enqueue_per_s"} {
		if v, _ := flow[k].(float64); v <= 0 {
			t.Errorf("flow.%s = %v, want a positive figure", k, flow[k])
		}
	}
	if runs, _ := flow["debounce_runs"].(float64); runs != flowKeys {
		t.Errorf("flow.debounce_runs = %v, want one run per key (%d)", flow["debounce_runs"], flowKeys)
	}
	rec, ok := doc["recovery"].(map[string]any)
	if !ok {
		t.Fatalf("recovery: got %v, want an object", doc["recovery"])
	}
	for _, k := range []string{"n", "child_setup_s", "launch_ms", "recovery_s", "runs_per_s", "floor_insert_c32_per_s", "ratio_insert_c32",
		"xids_per_run", "wal_bytes_per_run"} {
		if v, ok := rec[k].(float64); !ok || v <= 0 {
			t.Errorf("recovery.%s missing or not positive: %v", k, rec[k])
		}
	}
	if _, ok := rec["statements_per_run"]; !ok {
		t.Errorf("recovery.statements_per_run missing")
	}
	for _, k := range []string{"succeeded", "dead", "other_status", "second_step_runs", "second_step_runs_per_run", "max_recovery_attempts"} {
		if _, ok := rec[k].(float64); !ok {
			t.Errorf("recovery.%s missing", k)
		}
	}
	if got := res.Recovery.Succeeded; got != o.RecoveryN { // below the recovery batch size: no re-claim
		t.Errorf("recovery: %d of %d runs succeeded", got, o.RecoveryN)
	}
	drec, ok := doc["dbos_recovery"].(map[string]any)
	if !ok {
		t.Fatalf("dbos_recovery: got %v, want an object", doc["dbos_recovery"])
	}
	for _, k := range []string{"n", "child_setup_s", "new_context_ms", "launch_ms", "recovery_s", "runs_per_s", "floor_insert_c32_per_s",
		"ratio_insert_c32", "ratio_durable_vs_dbos_runs_per_s", "succeeded", "second_step_runs", "second_step_runs_per_run"} {
		if v, ok := drec[k].(float64); !ok || v <= 0 {
			t.Errorf("dbos_recovery.%s missing or not positive: %v", k, drec[k])
		}
	}
	for _, k := range []string{"other_status", "max_recovery_attempts"} {
		if _, ok := drec[k].(float64); !ok {
			t.Errorf("dbos_recovery.%s missing", k)
		}
	}
	if got := res.DBOSRecovery.Succeeded; got != o.DBOSRecoveryN {
		t.Errorf("dbos recovery: %d of %d runs succeeded", got, o.DBOSRecoveryN)
	}
	if res.Counts.StatementsAvailable {
		if top, _ := doc["drain_top_statements"].([]any); len(top) == 0 {
			t.Errorf("drain_top_statements is empty")
		}
	}

	targets := doc["targets"].([]any)
	if n := len(targets); n != 12 {
		t.Errorf("targets: got %d, want 12", n)
	}
	for _, x := range targets {
		tg := x.(map[string]any)
		for _, k := range []string{"name", "metric", "value", "cmp", "limit", "pass"} {
			if _, ok := tg[k]; !ok {
				t.Errorf("target %v has no %q", tg["metric"], k)
			}
		}
	}

	md, err := os.ReadFile(filepath.Join(o.OutDir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| metric | value | ratio | target | result |", "per-step overhead", "SQL statements per step", "NOT measured in this run",
		"### Queues", "enqueue-to-start", "queue drain", "floor drain", "recovery:", "DBOS enqueue-to-start", "DBOS recovery:"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("latest.md lacks %q", s)
		}
	}
}
