package main

import (
	"fmt"
	"strings"
)

// derivePeers adds the per-round ratios of the peers (peers.go).
func derivePeers(v map[string]float64, conc []int, div func(key string, x, y float64)) {
	a := v["floor_insert_us"]
	if _, ok := v["dbos_wf0_us"]; ok {
		v["dbos_step_overhead_us"] = (v["dbos_wf10_us"] - v["dbos_wf0_us"]) / 10
		div("ratio_dbos_wf0", v["dbos_wf0_us"], a)
		div("ratio_dbos_wf1", v["dbos_wf1_us"], a)
		div("ratio_dbos_wf10", v["dbos_wf10_us"], a)
		div("ratio_dbos_step_overhead", v["dbos_step_overhead_us"], a)
		div("ratio_step_vs_dbos", v["dbos_step_overhead_us"], v["step_overhead_us"])
		if f, ok := v["flush_us"]; ok {
			// What each design adds to the one flush both wait for per step.
			v["step_beyond_flush_us"] = v["step_overhead_us"] - f
			v["dbos_step_beyond_flush_us"] = v["dbos_step_overhead_us"] - f
			div("ratio_step_beyond_flush_vs_dbos", v["dbos_step_beyond_flush_us"], v["step_beyond_flush_us"])
		}
		div("ratio_wf0_vs_dbos", v["dbos_wf0_us"], v["wf0_us"])
		div("ratio_wf1_vs_dbos", v["dbos_wf1_us"], v["wf1_us"])
		div("ratio_wf10_vs_dbos", v["dbos_wf10_us"], v["wf10_us"])
	}
	for _, c := range conc {
		wf, ins := v[fmt.Sprintf("tput_wf1_c%d_per_s", c)], v[fmt.Sprintf("tput_insert_c%d_per_s", c)]
		if d, ok := v[fmt.Sprintf("tput_dbos_c%d_per_s", c)]; ok {
			div(fmt.Sprintf("ratio_tput_vs_dbos_c%d", c), wf, d)
			div(fmt.Sprintf("ratio_tput_dbos_c%d", c), d, ins)
		}
		if n, ok := v[fmt.Sprintf("tput_nogc_c%d_per_s", c)]; ok {
			div(fmt.Sprintf("ratio_gc_vs_nogc_c%d", c), wf, n)
			div(fmt.Sprintf("ratio_tput_nogc_c%d", c), n, ins)
		}
	}
	if _, ok := v["river_lat_us"]; ok {
		div("ratio_river_lat_p50", v["river_lat_p50_us"], v["floor_insert_p50_us"])
		div("ratio_river_lat_p99", v["river_lat_p99_us"], v["floor_insert_p99_us"])
	}
	for _, q := range []string{"dbos_qlat", "dbos_qlat50"} {
		if _, ok := v[q+"_us"]; ok {
			div("ratio_"+q+"_p50", v[q+"_p50_us"], v["floor_insert_p50_us"])
			div("ratio_"+q+"_p99", v[q+"_p99_us"], v["floor_insert_p99_us"])
			// durable/DBOS: DBOS's latency over durable's (local enqueue) of the same round
			div("ratio_qlat_vs_"+q+"_p50", v[q+"_p50_us"], v["qlat_local_p50_us"])
			div("ratio_qlat_vs_"+q+"_p99", v[q+"_p99_us"], v["qlat_local_p99_us"])
		}
	}
	if d, ok := v["drain_per_s"]; ok {
		ins := v["drain_floor_insert_c32_per_s"]
		for _, k := range []string{"dbos", "river", "river_tuned"} {
			if x, ok := v[k+"_drain_per_s"]; ok {
				div("ratio_drain_vs_"+k, d, x)
				div("ratio_"+k+"_drain_insert_c32", x, ins)
			}
		}
		if x, ok := v["river_tuned_drain_per_s"]; ok {
			if d0, ok := v["drain0_per_s"]; ok {
				div("ratio_drain0_vs_river_tuned", d0, x)
			}
			if dd, ok := v["drain_defer_per_s"]; ok {
				div("ratio_drain_defer_vs_river_tuned", dd, x)
			}
		}
		if x, ok := v["river_drain_insert_per_s"]; ok {
			if em, ok := v["drain0_enqueue_many_per_s"]; ok {
				div("ratio_enqueue_many_vs_river_insert_many", em, x)
			}
		}
	}
}

// peersMarkdown renders the peers measured in this run.
func (r *Result) peersMarkdown(sb *strings.Builder, row func(metric, value, ratio, target, result string), res func(string) (string, string)) {
	m := r.Median
	p := r.Params
	has := func(k string) bool { _, ok := m[k]; return ok }
	if !has("dbos_wf0_us") && !has("river_drain_per_s") && !has("dbos_qlat_us") && r.DBOSRecovery == nil && !has(fmt.Sprintf("tput_nogc_c%d_per_s", 32)) && !has(fmt.Sprintf("tput_nogc_c%d_per_s", 128)) {
		return
	}
	fmt.Fprintf(sb, "\n### Peers, measured in this run\n\n")
	fmt.Fprintf(sb, "DBOS Transact Go v1.8.0 (own database; a pool of %d connections, as durable's and River's, passed as Config.SystemDBPool; "+
		"ApplicationVersion pinned): sequential scenarios %d ops per round "+
		"(10 steps: %d) in the same interleaved blocks as the durable ones; throughput with the same goroutine counts and %d ops per level. "+
		"Drains (in the %d drain rounds): %d pre-enqueued 1-step DBOS workflows (8-goroutine client enqueue, timed from Launch) and %d River v0.51.2 "+
		"no-op jobs (InsertMany before Start, timed from Start to the last completion event), against the durable drain of %d: compare rates. ",
		p.MaxConns, p.PeerN, max(1, p.PeerN/5), p.PeerTput, p.DrainRounds, p.PeerDrainN, riverN(p), p.DrainN)
	if has("dbos_qlat_us") {
		fmt.Fprintf(sb, "DBOS enqueue-to-start (in the drain rounds, after the DBOS drain, in its database): %d runs of a 0-step workflow per polling "+
			"setting and round, RunWorkflow + WithQueue one at a time, each after a random pause of up to one polling interval, timed to the "+
			"first line of the body; compared with durable's local enqueue-to-start of the same round. ", p.DBOSQLatN)
	}
	if r.DBOSRecovery != nil {
		fmt.Fprintf(sb, "DBOS recovery: %d two-step workflows left PENDING by a SIGKILLed process, timed from Launch of a new context (same "+
			"executor ID and version) until all are SUCCESS, against durable's recovery of %d: compare rates. ", r.DBOSRecovery.N, p.RecoveryN)
	}
	sb.WriteString("\"durable/DBOS\" is how many times faster durable is.\n\n")
	sb.WriteString("| metric | value | ratio | target | result |\n|---|---|---|---|---|\n")
	x := func(k, of string) string {
		if !has(k) {
			return ""
		}
		return strings.TrimSpace(fmtX(m[k], of))
	}
	if has("dbos_wf0_us") {
		row("DBOS workflow, 0 steps", fmtUS(m["dbos_wf0_us"]), x("ratio_dbos_wf0", "floor A")+"; "+x("ratio_wf0_vs_dbos", "durable's (DBOS/durable)"), "", "")
		row("DBOS workflow, 1 step", fmtUS(m["dbos_wf1_us"]), x("ratio_dbos_wf1", "floor A")+"; "+x("ratio_wf1_vs_dbos", "durable's"), "", "")
		row("DBOS workflow, 10 steps", fmtUS(m["dbos_wf10_us"]), x("ratio_dbos_wf10", "floor A")+"; "+x("ratio_wf10_vs_dbos", "durable's"), "", "")
		row("DBOS per-step overhead = (wf10 - wf0) / 10 (whole step)", fmtUS(m["dbos_step_overhead_us"]),
			x("ratio_dbos_step_overhead", "floor A")+"; "+x("ratio_step_vs_dbos", "durable's (DBOS/durable)"), "", "")
		// A step whose checkpoint is flushed before the workflow goes on
		// costs at least floor A (one round trip, one flushed commit), so
		// DBOS/floor A is the most any such design can be ahead here.
		row("bound: DBOS per-step / floor A, the most a design flushing each step before the next can be ahead of DBOS in this run", "",
			x("ratio_dbos_step_overhead", ""), "", "")
		if has("step_beyond_flush_us") {
			tn, tr := res("ratio_step_beyond_flush_vs_dbos")
			row("per-step overhead beyond the commit flush wait (both wait for one flush per step): DBOS / durable",
				fmt.Sprintf("%s / %s", fmtUS(m["dbos_step_beyond_flush_us"]), fmtUS(m["step_beyond_flush_us"])),
				x("ratio_step_beyond_flush_vs_dbos", "durable's (DBOS/durable)"), tn, tr)
		}
		if dc := r.Counts.DBOS; dc != nil {
			c := r.Counts
			if dc.StmtsPerStep != nil && c.StmtsPerStep != nil {
				row("SQL statements per step, BEGIN and COMMIT included: DBOS / durable", fmt.Sprintf("%.2f / %.2f", *dc.StmtsPerStep, *c.StmtsPerStep), "", "", "")
			}
			row("write transactions (commit flushes) per step: DBOS / durable", fmt.Sprintf("%.2f / %.2f", dc.XIDsPerStep, c.XIDsPerStep), "", "", "")
			row("WAL bytes per step: DBOS / durable", fmt.Sprintf("%.0f B / %.0f B", dc.WALPerStep, c.WALPerStep), "", "", "")
		}
	}
	for _, c := range p.Concurrency {
		k := fmt.Sprintf("tput_dbos_c%d", c)
		if has(k + "_per_s") {
			tn, tr := res(fmt.Sprintf("ratio_tput_vs_dbos_c%d", c))
			row(fmt.Sprintf("DBOS 1-step workflows, %d goroutine(s)", c),
				fmt.Sprintf("%.0f wf/s (mean lat %s)", m[k+"_per_s"], fmtUS(m[k+"_lat_us"])),
				x(fmt.Sprintf("ratio_tput_dbos_c%d", c), "INSERT/s")+"; durable/DBOS "+x(fmt.Sprintf("ratio_tput_vs_dbos_c%d", c), ""), tn, tr)
		}
	}
	for _, c := range p.Concurrency {
		k := fmt.Sprintf("tput_nogc_c%d", c)
		if has(k + "_per_s") {
			g := m[fmt.Sprintf("ratio_gc_vs_nogc_c%d", c)]
			win := "group commit wins"
			if g < 1 {
				win = "group commit off wins"
			}
			row(fmt.Sprintf("durable with group commit off, 1-step workflows, %d goroutines", c),
				fmt.Sprintf("%.0f wf/s (mean lat %s)", m[k+"_per_s"], fmtUS(m[k+"_lat_us"])),
				x(fmt.Sprintf("ratio_tput_nogc_c%d", c), "INSERT/s")+fmt.Sprintf("; group commit / without: %.2fx (%s)", g, win), "", "")
		}
	}
	if has("dbos_drain_per_s") {
		tn, tr := res("ratio_drain_vs_dbos")
		row(fmt.Sprintf("DBOS queue drain: %d pre-enqueued 1-step workflows, Launch -> all SUCCESS", p.PeerDrainN),
			fmt.Sprintf("%.0f wf/s (%.2f s; Launch %.0f ms; enqueue %.0f/s)", m["dbos_drain_per_s"], m["dbos_drain_s"], m["dbos_drain_launch_ms"], m["dbos_drain_enqueue_per_s"]),
			x("ratio_dbos_drain_insert_c32", "INSERT/s at 32 goroutines")+"; durable/DBOS "+x("ratio_drain_vs_dbos", ""), tn, tr)
	}
	for _, q := range []struct{ key, label string }{
		{"dbos_qlat", "DBOS enqueue-to-start (RunWorkflow WithQueue -> body starts), idle queue, default polling"},
		{"dbos_qlat50", "DBOS enqueue-to-start, idle queue, WithQueueBasePollingInterval"},
	} {
		if !has(q.key + "_us") {
			continue
		}
		label := fmt.Sprintf("%s (%.0f ms)", q.label, m[q.key+"_poll_ms"])
		row(label+": p50", fmtMS(m[q.key+"_p50_us"]),
			x("ratio_"+q.key+"_p50", "floor A p50")+"; durable/DBOS "+x("ratio_qlat_vs_"+q.key+"_p50", "(durable local p50)"), "", "")
		row(label+": p99", fmtMS(m[q.key+"_p99_us"]),
			x("ratio_"+q.key+"_p99", "floor A p99")+"; durable/DBOS "+x("ratio_qlat_vs_"+q.key+"_p99", "(durable local p99)"), "", "")
		row(label+": mean", fmtMS(m[q.key+"_us"]), "", "", "")
	}
	if rec := r.DBOSRecovery; rec != nil {
		ratio := fmtX(rec.RatioInsertC32, "INSERT/s at 32 goroutines")
		if rec.RatioDurableVsDBOS != nil {
			ratio += fmt.Sprintf("; durable/DBOS %.2fx (runs/s; durable recovered %d)", *rec.RatioDurableVsDBOS, p.RecoveryN)
		}
		row(fmt.Sprintf("DBOS recovery: %d two-step workflows of a SIGKILLed executor, Launch -> all SUCCESS", rec.N),
			fmt.Sprintf("%.2f s, %.0f runs/s (NewContext %.0f ms before the clock; Launch %.0f ms)", rec.ElapsedS, rec.PerS, rec.NewContextMS, rec.LaunchMS),
			ratio, "", "")
		row("DBOS recovery outcome: SUCCESS / other; second-step executions per run; highest recovery_attempts",
			fmt.Sprintf("%d / %d; %.2f; %d", rec.Succeeded, rec.OtherStatus, rec.SecondStepRunsPerN, rec.MaxRecoveryAttempts), "", "", "")
		row(fmt.Sprintf("floor: autocommit INSERTs, %d goroutines (next to the DBOS recovery)", floorDrainConc),
			fmt.Sprintf("%.0f /s", rec.FloorInsertC32PerS), "", "", "")
	}
	if has("river_drain_per_s") {
		tn, tr := res("ratio_drain_vs_river")
		row(fmt.Sprintf("River drain, defaults (MaxWorkers 100): %d no-op jobs", riverN(p)),
			fmt.Sprintf("%.0f jobs/s (%.2f s; InsertMany %.0f/s)", m["river_drain_per_s"], m["river_drain_s"], m["river_drain_insert_per_s"]),
			x("ratio_river_drain_insert_c32", "INSERT/s at 32 goroutines")+"; durable/River "+x("ratio_drain_vs_river", ""), tn, tr)
		tn, tr = res("ratio_drain_vs_river_tuned")
		row(fmt.Sprintf("River drain, `river bench` tuning (MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval 20 ms): %d no-op jobs", riverN(p)),
			fmt.Sprintf("%.0f jobs/s (%.2f s)", m["river_tuned_drain_per_s"], m["river_tuned_drain_s"]),
			x("ratio_river_tuned_drain_insert_c32", "INSERT/s at 32 goroutines")+"; durable/River "+x("ratio_drain_vs_river_tuned", ""), tn, tr)
		if _, ok := m["ratio_enqueue_many_vs_river_insert_many"]; ok {
			row(fmt.Sprintf("batch enqueue: EnqueueMany of %d runs in batches of %d, one goroutine, against River's InsertMany of its drain's jobs (same batches)", p.DrainN, drainBatch),
				fmt.Sprintf("%.0f runs/s (River %.0f jobs/s)", m["drain0_enqueue_many_per_s"], m["river_drain_insert_per_s"]),
				"durable/River "+x("ratio_enqueue_many_vs_river_insert_many", ""), "", "")
		}
		if _, ok := m["ratio_drain0_vs_river_tuned"]; ok {
			row("durable's reference drain of 0-step workflows (no step checkpoint, as a no-op job records none) against River's tuned drain",
				fmt.Sprintf("%.0f wf/s", m["drain0_per_s"]), "durable/River "+x("ratio_drain0_vs_river_tuned", ""), "", "")
		}
		if _, ok := m["ratio_drain_defer_vs_river_tuned"]; ok {
			row("durable's drain with DeferStepCheckpoints (1-step workflows; the step's checkpoint rides the finish) against River's tuned drain",
				fmt.Sprintf("%.0f wf/s", m["drain_defer_per_s"]), "durable/River "+x("ratio_drain_defer_vs_river_tuned", ""), "", "")
		}
		if v, ok := m["river_tuned_drain_server_cpu_us"]; ok {
			row("CPU per River job, `river bench` tuning: Postgres server processes (backends + autovacuum + background) / the bench process",
				fmtServerCPU(m, "river_tuned_drain", v), "", "", "")
		}
	}
	if has("river_lat_p50_us") {
		row("River insert-to-start (Insert -> Work begins), idle queue, defaults: p50", fmtUS(m["river_lat_p50_us"]), x("ratio_river_lat_p50", "floor A p50"), "", "")
		row("River insert-to-start: p99", fmtUS(m["river_lat_p99_us"]), x("ratio_river_lat_p99", "floor A p99"), "", "")
	}
	for _, c := range []int{32, 128} {
		if g, ok := m[fmt.Sprintf("ratio_gc_vs_nogc_c%d", c)]; ok {
			w := "group commit (the default) wins"
			if g < 1 {
				w = "group commit off wins"
			}
			fmt.Fprintf(sb, "\nGroup commit at %d goroutines: %.0f wf/s with, %.0f wf/s without (%.2fx): %s.", c,
				m[fmt.Sprintf("tput_wf1_c%d_per_s", c)], m[fmt.Sprintf("tput_nogc_c%d_per_s", c)], g, w)
		}
	}
	sb.WriteString("\n")
}

func fmtMS(us float64) string { return fmt.Sprintf("%.1f ms", us/1000) }

// riverN is the size of the River drains: results written before
// RiverDrainN existed used PeerDrainN.
func riverN(p Params) int {
	if p.RiverDrainN > 0 {
		return p.RiverDrainN
	}
	return p.PeerDrainN
}
