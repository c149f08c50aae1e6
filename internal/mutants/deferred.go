package main

// The mutants of deferred step checkpoints (Config.DeferStepCheckpoints,
// pending.go): a plain step returns before its checkpoint is written, and
// nothing durable the run does after it may precede that write.

func init() {
	register(
		Mutant{
			Name:      "deferred/before-next-call",
			Mechanism: "the write of a run's deferred checkpoints before its next durable call (run.begin)",
			Edits: []Edit{{File: "run.go",
				Find:    "\tif r.deferSteps {\n\t\tif err := r.deferred.flush(); err != nil { // pending.go\n\t\t\treturn 0, nil, err\n\t\t}\n\t}\n",
				Replace: ""}},
			Pkg: ".", Tests: "^TestDeferredCheckpointsBeforeNextCall$",
		},
		Mutant{
			Name:      "deferred/with-finish",
			Mechanism: "the deferred checkpoints a run's finish statement writes (runner.execute)",
			Edits: []Edit{{File: "runner.go",
				Find:    "\t\tsteps = r.deferred.forFinish()\n",
				Replace: "\t\t_ = r.deferred.forFinish()\n"}},
			Pkg: ".", Tests: "^(TestDeferredCheckpointsBeforeNextCall|TestDeferStepCheckpointsPerWorkflow)$",
		},
		Mutant{
			Name:      "deferred/timer",
			Mechanism: "the timer that writes a deferred checkpoint alone when the run makes no durable call (deferredSteps.add)",
			Edits: []Edit{{File: "pending.go",
				Find:    "d.timer = time.AfterFunc(d.r.e.stepDelay, func() { _ = d.flush() })",
				Replace: "d.timer = time.AfterFunc(time.Hour, func() { _ = d.flush() })"}},
			Pkg: ".", Tests: "^TestDeferredCheckpointTimer$",
		},
		Mutant{
			Name:      "deferred/before-retry",
			Mechanism: "the write of a failed attempt's deferred checkpoints before its retry is scheduled (retryLater)",
			Edits: []Edit{{File: "retry.go",
				Find:    "\t\tif err := r.deferred.flush(); err != nil { // pending.go\n\t\t\treturn true, err\n\t\t}\n",
				Replace: ""}},
			Pkg: ".", Tests: "^TestDeferredCheckpointsKeptAcrossRetry$",
		},
		Mutant{
			Name:      "deferred/wait-in-flight",
			Mechanism: "a finish waits for a write of the deferred checkpoints in flight and sees its refusal (deferredSteps.forFinish)",
			Edits: []Edit{{File: "pending.go",
				Find:    "func (d *deferredSteps) forFinish() []*sysdb.InsertStepParams {\n\td.flushMu.Lock()\n\tdefer d.flushMu.Unlock()\n",
				Replace: "func (d *deferredSteps) forFinish() []*sysdb.InsertStepParams {\n"}},
			Pkg: ".", Tests: "^TestDeferredCheckpointRefused$/^InFlight$",
		},
		Mutant{
			Name:      "deferred/finished-runs-only",
			Mechanism: "the finish batch writes deferred checkpoints only for the runs it finishes (FinishStepsMany)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "\tWHERE s.workflow_id IN (SELECT id FROM upd)),`",
				Replace: "\tWHERE true),`"}},
			Pkg: "./internal/commit", Tests: "^TestFinishWithSteps$",
		},
		Mutant{
			Name:      "deferred/finished-run-only",
			Mechanism: "a single finish writes its deferred checkpoints only when it finishes the run (FinishOneSteps)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "\tWHERE EXISTS (SELECT 1 FROM upd))",
				Replace: "\tWHERE true)"}},
			Pkg: "./internal/commit", Tests: "^TestFinishWithSteps$",
		},
	)
}
