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
	for _, k := range []string{"format", "started_at", "finished_at", "duration_s", "env", "params", "rounds", "median", "counts", "targets", "peer_reference"} {
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
	for _, s := range []string{"floor_insert", "floor_tx", "floor_select", "wf0", "wf1", "wf10", "txwf"} {
		want = append(want, s+"_us", s+"_p50_us", s+"_p99_us")
	}
	want = append(want, "ratio_floor_tx", "ratio_floor_select", "ratio_wf0", "ratio_wf1", "ratio_wf10",
		"ratio_step_overhead", "ratio_txwf", "ratio_txstep_cost")
	for _, c := range o.Concurrency {
		want = append(want, fmt.Sprintf("tput_wf1_c%d_per_s", c), fmt.Sprintf("tput_wf1_c%d_lat_us", c),
			fmt.Sprintf("tput_insert_c%d_per_s", c), fmt.Sprintf("tput_insert_c%d_lat_us", c), fmt.Sprintf("ratio_tput_c%d", c))
	}
	for _, k := range want {
		if v, ok := median[k].(float64); !ok || v <= 0 {
			t.Errorf("median.%s missing or not positive: %v", k, median[k])
		}
	}
	for _, k := range []string{"step_overhead_us", "txstep_cost_us"} { // differences: may be negative on a noisy machine
		if _, ok := median[k].(float64); !ok {
			t.Errorf("median.%s missing", k)
		}
	}

	counts := doc["counts"].(map[string]any)
	for _, k := range []string{"xids_per_floor_insert", "xids_per_wf0", "xids_per_step", "xids_per_txwf",
		"wal_bytes_per_floor_insert", "wal_bytes_per_floor_tx", "wal_bytes_per_wf0", "wal_bytes_per_step", "wal_bytes_per_txwf"} {
		if _, ok := counts[k].(float64); !ok {
			t.Errorf("counts.%s missing", k)
		}
	}
	stmtKeys := []string{"statements_per_floor_insert", "statements_per_floor_tx", "statements_per_wf0",
		"statements_per_wf10", "statements_per_step", "statements_per_txwf", "statements_txstep_beyond_hand_tx"}
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
	if n := len(counts["batches"].([]any)); n != 5 {
		t.Errorf("counts.batches: got %d, want 5", n)
	}
	if n := len(doc["targets"].([]any)); n != 3 {
		t.Errorf("targets: got %d, want 3", n)
	}

	md, err := os.ReadFile(filepath.Join(o.OutDir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| metric | value | ratio | target | result |", "per-step overhead", "SQL statements per step", "NOT measured in this run"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("latest.md lacks %q", s)
		}
	}
}
