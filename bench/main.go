// Command bench measures the cost of durable workflows and steps against a
// raw pgx floor measured in the same run on the same Postgres, and prints
// the ratios. See README.md.
//
//	cd bench && ../scripts/with-postgres go run .
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if spec := os.Getenv(recoveryChildEnv); spec != "" {
		os.Exit(recoveryChildMain(spec)) // the child process of the recovery scenario
	}
	if spec := os.Getenv(scaleChildEnv); spec != "" {
		os.Exit(scaleChildMain(spec)) // an executor process of the scaling scenario
	}
	if spec := os.Getenv(dbosRecoveryChildEnv); spec != "" {
		os.Exit(dbosRecoveryChildMain(spec)) // the child process of the DBOS recovery scenario
	}
	o := DefaultOptions()
	flag.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds; every round measures every scenario once, results are medians over rounds")
	flag.IntVar(&o.Blocks, "blocks", o.Blocks, "blocks per round in which the sequential scenarios take turns")
	flag.IntVar(&o.N, "n", o.N, "operations per sequential scenario and round (10-step workflows use n/5)")
	flag.IntVar(&o.TputTotal, "tput", o.TputTotal, "operations per throughput scenario and round, shared by the goroutines")
	conc := flag.String("conc", joinInts(o.Concurrency), "comma-separated goroutine counts for the throughput scenarios")
	flag.IntVar(&o.GrowthSteps, "growth-steps", o.GrowthSteps, "with -growth: the recorded steps of the long run resumed")
	flag.IntVar(&o.GrowthParked, "growth-parked", o.GrowthParked, "with -growth: runs parked at once (0: skip)")
	flag.DurationVar(&o.Soak, "soak", o.Soak, "steady load at 70% of the measured maximum for this long, with retention pruning (e.g. 30m; 0: skip)")
	flag.DurationVar(&o.SoakRetention, "soak-retention", o.SoakRetention, "with -soak: prune runs finished longer ago than this")
	growth := flag.String("growth", "", "comma-separated history sizes (finished runs) to measure the hot path at, against the empty database, e.g. 1000000,10000000 (slow: minutes per 10 million)")
	flag.IntVar(&o.StatsN, "stats-n", o.StatsN, "workflows per statement-counting batch")
	flag.IntVar(&o.Warmup, "warmup", o.Warmup, "untimed operations before each scenario in every round")
	flag.IntVar(&o.MaxConns, "maxconns", o.MaxConns, "max connections of the engine pool and of the raw concurrent-insert pool")
	flag.IntVar(&o.QLatN, "qlat-n", o.QLatN, "queued runs per enqueue-to-start variant and round (0: skip)")
	flag.IntVar(&o.DrainN, "drain-n", o.DrainN, "workflows pre-enqueued per queue drain")
	flag.IntVar(&o.DrainRounds, "drain-rounds", o.DrainRounds, "how many rounds (the first ones) also measure a queue drain (0: skip)")
	flag.IntVar(&o.RecoveryN, "recovery-n", o.RecoveryN, "runs recovered after a SIGKILL, once per run (0: skip)")
	flag.StringVar(&o.DrainProfile, "drain-cpuprofile", "", "path prefix: write a CPU profile of this process during each timed drain (<prefix>.<drain>.r<round>.prof)")
	flag.BoolVar(&o.Scale, "scale", o.Scale, "measure 1, 2, 4 and 8 executor processes on one Postgres (drain, 1-step throughput, idle traffic), once per run")
	flag.DurationVar(&o.ScaleIdle, "scale-idle", o.ScaleIdle, "the scale scenario's idle window (what idle executors cost the server)")
	flag.BoolVar(&o.Flow, "flow", o.Flow, "measure fair sharing, the drain by key and debounced enqueues, once per run")
	flag.BoolVar(&o.DBOS, "dbos", o.DBOS, "also measure DBOS Transact Go (own database <db>_dbos, <db>_dbosq)")
	flag.BoolVar(&o.River, "river", o.River, "also measure River's drain and insert-to-start latency (own database <db>_river)")
	flag.BoolVar(&o.GroupCommitCmp, "gc-cmp", o.GroupCommitCmp, "also measure durable with group commit off at the throughput levels >= 32")
	flag.IntVar(&o.PeerN, "peer-n", o.PeerN, "DBOS ops per sequential scenario and round (10 steps: peer-n/5)")
	flag.IntVar(&o.PeerTput, "peer-tput", o.PeerTput, "DBOS ops per throughput level and round (at most -tput)")
	flag.IntVar(&o.PeerDrainN, "peer-drain-n", o.PeerDrainN, "workflows per DBOS drain (in the drain rounds)")
	flag.IntVar(&o.RiverDrainN, "river-drain-n", o.RiverDrainN, "jobs per River drain (in the drain rounds)")
	flag.IntVar(&o.DBOSQLatN, "dbos-qlat-n", o.DBOSQLatN, "DBOS enqueue-to-start samples per polling setting (default 1 s, 50 ms) and drain round (0: skip)")
	flag.IntVar(&o.DBOSRecoveryN, "dbos-recovery-n", o.DBOSRecoveryN, "DBOS workflows recovered after a SIGKILL, once per run (own database <db>_dbosr; 0: skip)")
	flag.IntVar(&o.RiverLatN, "river-lat-n", o.RiverLatN, "River insert-to-start samples per drain round (0: skip)")
	flag.StringVar(&o.Database, "db", o.Database, "database to drop, create and benchmark in")
	flag.StringVar(&o.OutDir, "out", o.OutDir, "folder for latest.json and latest.md (empty: write nothing)")
	flag.BoolVar(&o.DropAfter, "drop", o.DropAfter, "drop the benchmark database at the end")
	render := flag.String("render", "", "only re-render latest.md and the charts into -out from this latest.json")
	flag.Parse()
	if *render != "" {
		if err := renderFrom(*render, o.OutDir); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}

	var err error
	if *growth != "" {
		if o.Growth, err = parseInts(*growth); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -growth:", err)
			os.Exit(2)
		}
	}
	if o.Concurrency, err = parseInts(*conc); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -conc:", err)
		os.Exit(2)
	}
	o.URL = os.Getenv("DATABASE_URL")
	if o.URL == "" {
		fmt.Fprintln(os.Stderr, "bench: DATABASE_URL is not set; run it as: cd bench && ../scripts/with-postgres go run .")
		os.Exit(2)
	}
	o.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(res.Markdown())
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no counts")
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// renderFrom re-renders latest.md and the charts of a saved latest.json.
func renderFrom(file, dir string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if dir == "" {
		dir = "."
	}
	return r.write(dir)
}
