package main

// The mutants of the engine's metrics (metrics.go and its hooks): each
// removes one measurement, and the metrics tests on real Postgres must
// see it missing.

func init() {
	register(
		Mutant{
			Name:      "metrics/finished",
			Mechanism: "a run's recorded end is counted by workflow and status",
			Edits: []Edit{{File: "runner.go",
				Find:    "\trn.e.met.finished(r, o)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRuns",
		},
		Mutant{
			Name:      "metrics/finished-status",
			Mechanism: "the finished count carries the run's own status",
			Edits: []Edit{{File: "metrics.go",
				Find:    "m.finishedC.Add(r.ctx, 1, r.m.w.finished[o.status]...)",
				Replace: "m.finishedC.Add(r.ctx, 1, r.m.w.finished[StatusSuccess]...)"}},
			Pkg: ".", Tests: "TestMetricsRuns",
		},
		Mutant{
			Name:      "metrics/started",
			Mechanism: "a run started here is counted",
			Edits: []Edit{{File: "workflow.go",
				Find:    "\te.met.startedRun(r, startKindOf(parent))\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRuns",
		},
		Mutant{
			Name:      "metrics/forked",
			Mechanism: "a fork is counted as a start",
			Edits: []Edit{{File: "control.go",
				Find:    "\te.met.started(ctx, name, startFork)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRuns",
		},
		Mutant{
			Name:      "metrics/enqueued",
			Mechanism: "an enqueued run is counted",
			Edits: []Edit{{File: "submit.go",
				Find:    "\t\ts.met.started(ctx, name, startEnqueue)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsQueue",
		},
		Mutant{
			Name:      "metrics/step-duration",
			Mechanism: "an executed plain step's duration is recorded",
			Edits: []Edit{{File: "step.go",
				Find:    "\tr.m.step(r.ctx, kindPlain, started, err)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRuns|TestMetricsRecovery",
		},
		Mutant{
			Name:      "metrics/step-replayed",
			Mechanism: "a replayed step's duration is not recorded",
			Edits: []Edit{{File: "step.go",
				Find:    "\tif rec != nil {\n\t\treturn replay[R](r, rec)\n\t}\n\tpolicy, timeout := r.stepPolicy(opts)\n",
				Replace: "\tif rec != nil {\n\t\tr.m.step(r.ctx, kindPlain, time.Now(), nil)\n\t\treturn replay[R](r, rec)\n\t}\n\tpolicy, timeout := r.stepPolicy(opts)\n"}},
			Pkg: ".", Tests: "TestMetricsRecovery",
		},
		Mutant{
			Name:      "metrics/queue-depth",
			Mechanism: "the queue depth gauge reads the queues' ready runs",
			Edits: []Edit{{File: "metrics.go",
				Find:    "o.ObserveInt64(m.depth, int64(q.Ready),",
				Replace: "o.ObserveInt64(m.depth, int64(q.Running),"}},
			Pkg: ".", Tests: "TestMetricsQueue",
		},
		Mutant{
			Name:      "metrics/queue-wait",
			Mechanism: "a queued run's wait is recorded at its first start",
			Edits: []Edit{{File: "metrics.go",
				Find:    "if c.Queue != nil && c.Epoch == 1 {",
				Replace: "if c.Queue != nil && c.Epoch == 0 {"}},
			Pkg: ".", Tests: "TestMetricsQueue",
		},
		Mutant{
			Name:      "metrics/parked",
			Mechanism: "the parked gauge reads the parked runs",
			Edits: []Edit{{File: "internal/sysdb/metrics_queries.go",
				Find:    "WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL`),",
				Replace: "WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NULL`),"}},
			Pkg: ".", Tests: "TestMetricsQueue",
		},
		Mutant{
			Name:      "metrics/cancelled",
			Mechanism: "a run ended by Cancel is counted as finished, cancelled",
			Edits: []Edit{{File: "control.go",
				Find:    "\te.met.cancelled(ctx, len(cancelled))\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsQueue",
		},
		Mutant{
			Name:      "metrics/takeover",
			Mechanism: "runs taken over from a dead executor are counted as recoveries",
			Edits: []Edit{{File: "recovery.go",
				Find:    "\t\t\te.met.recovered(runs, recoveryTakeover)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRecovery",
		},
		Mutant{
			Name:      "metrics/recovered-flag",
			Mechanism: "a claim by the sweeper says whether it counted a recovery attempt",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find:    "COALESCE((SELECT o.epoch <> 0 AND o.wake_at IS NULL FROM",
				Replace: "COALESCE((SELECT true FROM"}},
			Pkg: "./internal/sysdb", Tests: "TestClaimOrphans",
		},
		Mutant{
			Name:      "metrics/restart",
			Mechanism: "this executor's own runs resumed at Launch are counted as recoveries",
			Edits: []Edit{{File: "dbos.go",
				Find:    "\te.met.recovered(own, recoveryRestart)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRecovery",
		},
		Mutant{
			Name:      "metrics/requeue",
			Mechanism: "a dead executor's queued runs returned to their queue are counted as recoveries",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\t\t\td.cfg.Requeued(b.Queue, int(b.Requeued))\n",
				Replace: "\n"}},
			Pkg: "./internal/dispatch", Tests: "TestRequeueWakesItsQueue",
		},
		Mutant{
			Name:      "metrics/dead-letter",
			Mechanism: "a dead-lettered run is counted as finished, dead",
			Edits: []Edit{{File: "resume.go",
				Find:    "\trn.e.met.deadLettered(&c)\n",
				Replace: "\n"}},
			Pkg: ".", Tests: "TestMetricsRecovery",
		},
		Mutant{
			Name:      "metrics/commit-batch",
			Mechanism: "the group commit reports the size of each batch it writes",
			Edits: []Edit{{File: "internal/commit/writer.go",
				Find:    "\t\tw.cfg.OnBatch(Starts, len(items))\n",
				Replace: "\n"}},
			Pkg: "./internal/commit", Tests: "TestOnBatch",
		},
	)
}

func init() {
	register(
		Mutant{
			Name:      "metrics/activity-stack",
			Mechanism: "the dashboard's per-minute bars stack each status on the one below",
			Edits: []Edit{{File: "dashboard/activity.go",
				Find:    "\t\t\ty -= h\n",
				Replace: "\t\t\ty = actHeight - h\n"}},
			Pkg: "./dashboard", Tests: "TestActivityChart",
		},
		Mutant{
			Name:      "metrics/activity-totals",
			Mechanism: "the dashboard's totals add up the runs finished per status",
			Edits: []Edit{{File: "dashboard/activity.go",
				Find:    "\t\ttotals[f.Status] += f.Count\n",
				Replace: "\t\ttotals[f.Status] = f.Count\n"}},
			Pkg: "./dashboard", Tests: "TestActivityChart|TestActivityPage",
		},
	)
}
