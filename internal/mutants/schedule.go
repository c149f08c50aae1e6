package main

// The mutants of cron schedules (internal/schedule, and their statements
// in internal/sysdb), guarded by the unit tests of the service and of the
// statements. schedule/tick-once, with the end-to-end test across
// processes, is with the queue mutants.

func init() {
	register(
		Mutant{
			Name:      "schedule/tick-once-service",
			Mechanism: "a tick's run has one workflow ID on every replica (tickID), so the start of a replica that died before moving the cursor is found",
			Edits: []Edit{
				{File: "internal/schedule/fire.go", Find: "\t\"fmt\"\n\t\"time\"\n", Replace: "\t\"fmt\"\n\t\"os\"\n\t\"time\"\n"},
				{File: "internal/schedule/fire.go",
					Find:    "id := tickID(row.Name, tick)",
					Replace: "id := tickID(fmt.Sprintf(\"%s:%d:%p\", row.Name, os.Getpid(), s), tick)"}},
			Pkg: "internal/schedule", Tests: "TestServiceReplicasStartEachTickOnce",
		},
		Mutant{
			Name:      "schedule/reread",
			Mechanism: "the row is read again before its due ticks start, so none starts under a spec already replaced",
			Edits: []Edit{{File: "internal/schedule/fire.go",
				Find:    "if fresh.Version != version {",
				Replace: "if false && fresh.Version != version {"}},
			Pkg: "internal/schedule", Tests: "TestServiceStaleRowStartsNothing",
		},
		Mutant{
			Name:      "schedule/catch-up-limit",
			Mechanism: "after a downtime only CatchUp missed ticks run besides the latest",
			Edits: []Edit{{File: "internal/schedule/fire.go",
				Find:    "ts.due(row.Cursor, s.now(), row.CatchUp+1)",
				Replace: "ts.due(row.Cursor, s.now(), row.CatchUp+1000)"}},
			Pkg: "internal/schedule", Tests: "TestServiceCatchUp",
		},
		Mutant{
			Name:      "schedule/due-window",
			Mechanism: "due searches a window ending at now, so a long downtime costs about CatchUp steps, not one per missed tick",
			Edits: []Edit{{File: "internal/schedule/spec.go",
				Find:    "if now.Sub(after) > window && window < 100*365*24*time.Hour {",
				Replace: "if false {"}},
			Pkg: "internal/schedule", Tests: "TestDueAfterALongDowntimeIsCheap",
		},
		Mutant{
			Name:      "schedule/give-up-conflict",
			Mechanism: "a tick whose workflow ID belongs to a run of another workflow is given up, not retried forever",
			Edits: []Edit{{File: "internal/schedule/fire.go",
				Find:    "if errors.Is(err, errs.WorkflowConflict) {",
				Replace: "if errors.Is(err, errs.WorkflowConflict) && false {"}},
			Pkg: "internal/schedule", Tests: "TestServiceGivesUpOnlyHopelessTicks",
		},
		Mutant{
			Name:      "schedule/clock",
			Mechanism: "the service tells the time of ticks by its configured clock (hooks.Knobs.Now in tests)",
			Edits: []Edit{{File: "internal/schedule/service.go",
				Find:    "func (s *Service) now() time.Time { return s.clock.Now() }",
				Replace: "func (s *Service) now() time.Time { return time.Now() }"}},
			Pkg: "internal/schedule", Tests: "TestServiceFiresTicksOnItsClock",
		},
		Mutant{
			Name:      "schedule/trigger-done",
			Mechanism: "a manual tick started by a declaring executor is removed from the row",
			Edits: []Edit{{File: "internal/schedule/fire.go",
				Find:    "if err := s.cfg.Queries.TriggerDone(ctx, s.cfg.DB, sysdb.ScheduleTriggerParams{Name: row.Name, Tick: tick}); err != nil && ctx.Err() == nil {",
				Replace: "if err := error(nil); err != nil {"}},
			Pkg: "internal/schedule", Tests: "TestServiceTriggers",
		},
		Mutant{
			Name:      "schedule/advance-cas",
			Mechanism: "Advance moves the cursor only if the row's version is the one read",
			Edits: []Edit{{File: "internal/sysdb/schedule_queries.go",
				Find:    "WHERE name = $1 AND version = $2\nRETURNING version",
				Replace: "WHERE name = $1\nRETURNING version"}},
			Pkg: "internal/sysdb", Tests: "TestScheduleAdvance",
		},
		Mutant{
			Name:      "schedule/update-cas",
			Mechanism: "a change made at run time is written only if the row's version is the one read",
			Edits: []Edit{{File: "internal/sysdb/schedule_queries.go",
				Find:    "next_tick = $7, version = version + 1, updated_at = now()\nWHERE name = $1 AND version = $2`",
				Replace: "next_tick = $7, version = version + 1, updated_at = now()\nWHERE name = $1`"}},
			Pkg: "internal/sysdb", Tests: "TestScheduleUpdate",
		},
		Mutant{
			Name:      "schedule/upsert-unchanged",
			Mechanism: "an unchanged declaration writes nothing: a restart does not bump the version under the other replicas",
			Edits: []Edit{{File: "internal/sysdb/schedule_queries.go",
				Find:    "WHERE (s.workflow_name, s.code_spec, s.code_location, s.code_catch_up)",
				Replace: "WHERE true OR (s.workflow_name, s.code_spec, s.code_location, s.code_catch_up)"}},
			Pkg: "internal/sysdb", Tests: "TestScheduleUpsert",
		},
		Mutant{
			Name:      "schedule/trigger-once",
			Mechanism: "a manual tick asked for twice is stored once",
			Edits: []Edit{{File: "internal/sysdb/schedule_queries.go",
				Find:    "CASE WHEN $2 = ANY(triggers) THEN triggers ELSE array_append(triggers, $2) END",
				Replace: "array_append(triggers, $2)"}},
			Pkg: "internal/sysdb", Tests: "TestScheduleTriggers",
		},
	)
}
