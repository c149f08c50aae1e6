package main

// The mutants of group commit (internal/commit), the result waiters' hub
// (internal/notify) and the guards of the core statements that their own
// tests in internal/sysdb catch.

func init() {
	register(
		Mutant{
			Name:      "commit/coalesce",
			Mechanism: "writes that come while a flush is in flight wait and go together in the next one",
			Edits: []Edit{{File: "internal/commit/batcher.go",
				Find:    "if b.inflight >= MaxInflight {",
				Replace: "if false && b.inflight >= MaxInflight {"}},
			Pkg: "./internal/commit", Tests: "TestConcurrentWritesCoalesce",
		},
		Mutant{
			Name:      "commit/bounded",
			Mechanism: "a flush writes at most MaxBatch items",
			Edits: []Edit{{File: "internal/commit/batcher.go",
				Find:    "batch := b.takeLocked(MaxBatch)",
				Replace: "batch := b.takeLocked(1 << 30)"}},
			Pkg: "./internal/commit", Tests: "TestBatchesAreBounded",
		},
		Mutant{
			Name:      "commit/error-to-all",
			Mechanism: "the error of a flush reaches every caller of its batch",
			Edits: []Edit{{File: "internal/commit/batcher.go",
				Find:    "\t\t<-it.done\n\t\treturn it.OK, it.Err\n",
				Replace: "\t\t<-it.done\n\t\treturn it.OK, nil\n"}},
			Pkg: "./internal/commit", Tests: "TestErrorReachesEveryCaller",
		},
		Mutant{
			Name:      "commit/retry-singly",
			Mechanism: "a batch statement that failed for another reason than the connection is retried item by item",
			Edits: []Edit{{File: "internal/commit/batcher.go",
				Find:    "\tif transient(err) {",
				Replace: "\tif true {"}},
			Pkg: "./internal/commit", Tests: "TestWriteSingly|TestStepBatchWithARecordedRow|TestFinishWithSteps",
		},
		Mutant{
			Name:      "commit/fenced-finish-wakes-parent",
			Mechanism: "a finish that touched no row wakes the parent of a run its lost earlier try may have finished",
			Edits: []Edit{{File: "internal/commit/writer.go",
				Find:    "\tif !finished {\n\t\tw.cfg.WakeParentOfFinished(ctx, f.ID)\n",
				Replace: "\tif !finished {\n"}},
			Pkg: "./internal/commit", Tests: "TestFinishOneAfterwards",
		},
		Mutant{
			Name:      "hub/local-waiters",
			Mechanism: "a notification does not wake the waiters of a run executing here (only its finish does)",
			Edits: []Edit{{File: "internal/notify/hub.go",
				Find:    "\tw := h.m[key]\n\tdelete(h.m, key)\n\th.mu.Unlock()\n\tif w != nil {\n\t\tclose(w.ch)\n\t}\n",
				Replace: "\tw, lw := h.m[key], h.local[key]\n\tdelete(h.m, key)\n\tdelete(h.local, key)\n\th.mu.Unlock()\n\tif lw != nil {\n\t\tclose(lw.ch)\n\t}\n\tif w != nil {\n\t\tclose(w.ch)\n\t}\n"}},
			Pkg: "./internal/notify", Tests: "TestHubNotifiedSkipsLocalWaiters",
		},
		Mutant{
			Name:      "hub/outcome",
			Mechanism: "a local finish hands its outcome to the waiters it wakes",
			Edits: []Edit{{File: "internal/notify/hub.go",
				Find:    "\t\t\tx.out = out\n",
				Replace: ""}},
			Pkg: "./internal/notify", Tests: "TestHubWakeHandsOverTheOutcome",
		},
		Mutant{
			Name:      "fence/complete-intent",
			Mechanism: "epoch check of an intent step's completion (CompleteIntent)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "FROM (SELECT id FROM {{schema}}.workflows WHERE id = $1 AND epoch = $7 AND status = 'pending' FOR SHARE) w",
				Replace: "FROM (SELECT id FROM {{schema}}.workflows WHERE id = $1 AND status = 'pending' FOR SHARE) w"}},
			Pkg: "./internal/sysdb", Tests: "TestCompleteIntent",
		},
		Mutant{
			Name:      "start/batch-first-wins",
			Mechanism: "of two starts of one ID in a batch (InsertWorkflows), only the first is reported inserted and runs",
			Edits: []Edit{{File: "internal/sysdb/core_runs.go",
				Find:    "\t\tif _, dup := index[r.ID]; !dup {\n\t\t\tindex[r.ID] = i\n\t\t}\n",
				Replace: "\t\tindex[r.ID] = i\n"}},
			Pkg: "./internal/sysdb", Tests: "TestInsertWorkflows",
		},
		Mutant{
			Name:      "finish/batch-wakes-parent",
			Mechanism: "finishes written together wake the parents parked in Await on them (FinishWorkflows)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "\tUPDATE {{schema}}.workflows p SET wake_at = CASE WHEN parked.wake THEN now() ELSE p.wake_at END,",
				Replace: "\tUPDATE {{schema}}.workflows p SET wake_at = p.wake_at,"}},
			Pkg: "./internal/sysdb", Tests: "TestFinishWorkflows",
		},
		Mutant{
			Name:      "step/recorded-not-error",
			Mechanism: "a step checkpoint already recorded is reported not written (then found recorded), not as an error",
			Edits: []Edit{{File: "internal/sysdb/core_steps.go",
				Find:    "if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {",
				Replace: "if false && errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {"}},
			Pkg: "./internal/sysdb", Tests: "TestInsertStep$",
		},
	)
}
