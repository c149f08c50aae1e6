package main

// The mutants of the run path: ownership, checkpoints, finishes, waits.

func init() {
	register(
		Mutant{
			Name:      "fence/step",
			Mechanism: "epoch check of a single step checkpoint (InsertStep)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE w.id = $1 AND w.epoch = $9 AND w.status = 'pending'\nFOR SHARE OF w`),",
				Replace: "WHERE w.id = $1 AND w.status = 'pending'\nFOR SHARE OF w`),"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/step",
		},
		Mutant{
			Name:      "fence/steps-batch",
			Mechanism: "epoch check of step checkpoints written together (InsertSteps, group commit)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE w.id = u.workflow_id AND w.epoch = u.epoch AND w.status = 'pending' FOR SHARE) w",
				Replace: "WHERE w.id = u.workflow_id AND w.status = 'pending' FOR SHARE) w"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/step",
		},
		Mutant{
			Name:      "fence/tx-step",
			Mechanism: "epoch check of a transaction step's checkpoint (InsertStepTx)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "\tWHERE w.id = $1 AND w.epoch = $9 AND w.status = 'pending'\n\tFOR SHARE OF w\n\tON CONFLICT",
				Replace: "\tWHERE w.id = $1 AND w.status = 'pending'\n\tFOR SHARE OF w\n\tON CONFLICT"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/tx",
		},
		Mutant{
			Name:      "fence/finish",
			Mechanism: "epoch check of a single finish (FinishOne)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE id = $1 AND epoch = $2 AND status = 'pending'\nRETURNING ` + watched + `, parent_id`),",
				Replace: "WHERE id = $1 AND status = 'pending'\nRETURNING ` + watched + `, parent_id`),"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/finish",
		},
		Mutant{
			Name:      "fence/finish-batch",
			Mechanism: "epoch check of finishes written together (FinishWorkflows, group commit)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE w.id = u.id AND w.epoch = u.epoch AND w.status = 'pending' FOR NO KEY UPDATE) w),",
				Replace: "WHERE w.id = u.id AND w.status = 'pending' FOR NO KEY UPDATE) w),"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/finish",
		},
		Mutant{
			Name:      "fence/park",
			Mechanism: "epoch check of parking a run (Park)",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "WHERE w.id = x.id AND w.epoch = $2 AND w.status = 'pending'`),",
				Replace: "WHERE w.id = x.id AND w.status = 'pending'`),"}},
			Pkg: ".", Tests: "TestParkIsFenced",
		},
		Mutant{
			Name:      "fence/stream",
			Mechanism: "epoch check of stream entries (the writer's epoch must be the run's)",
			Edits: []Edit{{File: "internal/sysdb/stream_queries.go",
				Find:    "w.epoch = x.epoch AND",
				Replace: "true AND"}},
			Pkg: ".", Tests: "^TestStream$/^FencedWriter$",
		},
		Mutant{
			Name:      "finish/synchronous",
			Mechanism: "the WAL flush a single finish waits for before Result returns (FinishOne)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "finishOne: r(`UPDATE {{schema}}.workflows SET status = $3, output = $4, error = $5, updated_at = now()\nWHERE",
				Replace: "finishOne: r(`UPDATE {{schema}}.workflows SET status = $3, output = $4, error = $5, updated_at = now()\nFROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit\nWHERE"}},
			Pkg: ".", Tests: "TestSeenOutcomeSurvivesPostgresCrash/.*/1$",
		},
		Mutant{
			Name:      "finish/synchronous-batch",
			Mechanism: "the WAL flush of finishes written together (FinishWorkflows)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "AS u(id, epoch, status, output, error)\n\tORDER BY u.id),",
				Replace: "AS u(id, epoch, status, output, error), (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit\n\tORDER BY u.id),"}},
			Pkg: ".", Tests: "TestSeenOutcomeSurvivesPostgresCrash/.*/8$",
		},
		Mutant{
			Name:      "shutdown/hand-back",
			Mechanism: "a run stopped by Shutdown is handed back without counting a recovery attempt",
			Edits: []Edit{{File: "runner.go",
				Find:    "\tif rn.e.hardCtx.Err() != nil {\n\t\treturn\n\t}\n\tif _, err := rn.e.wq.HandBack(",
				Replace: "\tif true {\n\t\treturn\n\t}\n\tif _, err := rn.e.wq.HandBack("}},
			Pkg: ".", Tests: "TestGracefulStopsDoNotCount",
		},
		Mutant{
			Name:      "sleep/recorded-wake",
			Mechanism: "a resumed Sleep sleeps to its recorded wake time (only the remainder)",
			Edits: []Edit{{File: "wait.go",
				Find:    "\t}\n\tif r.e.clock.until(wake) > 0 {",
				Replace: "\t}\n\twake = r.e.clock.now().Add(d)\n\tif r.e.clock.until(wake) > 0 {"}},
			Pkg: ".", Tests: "TestSleepSurvivesKill",
		},
	)
}
