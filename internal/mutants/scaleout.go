package main

// The mutants of the property docs/scale-out.md rests on: the statements
// of a run's path reach its rows by the run's ID.

func init() {
	register(
		Mutant{
			Name:      "scaleout/arrays-unboxed",
			Mechanism: "the batch statements' array parameters hand pgx a pointer per element, which boxes for free",
			Edits: []Edit{{File: "internal/sysdb/arrays.go",
				Find:    "func (a textArray) Index(i int) any                     { return (*textElem)(&a[i]) }",
				Replace: "func (a textArray) Index(i int) any                     { return a[i] }"}},
			Pkg: "./internal/sysdb", Tests: "^TestArraysEncodeWithoutBoxing$",
		},
		Mutant{
			Name:      "scaleout/intent-keyed",
			Mechanism: "the completion of an intent step finds the step by the run's ID (a statement of a run's path stays on its shard)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE s.workflow_id = $1 AND s.workflow_id = w.id AND s.pos = $2",
				Replace: "WHERE s.workflow_id = w.id AND s.pos = $2"}},
			Pkg: ".", Tests: "TestHotPathKeyedByRunID",
		},
		Mutant{
			Name:      "scaleout/wait-topic-keyed",
			Mechanism: "marking what a run waits for finds the run by its ID, not through the index of owned runs",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "SET wait_topic = $3\nWHERE id = $1 AND epoch = $2 AND status = 'pending' AND coalesce(executor_id, '') <> ''`),",
				Replace: "SET wait_topic = $3\nWHERE id = $1 AND epoch = $2 AND status = 'pending' AND executor_id IS NOT NULL`),"}},
			Pkg: ".", Tests: "TestHotPathKeyedByRunID",
		},
		Mutant{
			Name:      "scaleout/select-waits-keyed",
			Mechanism: "a Select's mark of its waits finds the run by its ID, not through the index of owned runs",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "SET wait_any = $3\nWHERE id = $1 AND epoch = $2 AND status = 'pending' AND coalesce(executor_id, '') <> ''`),",
				Replace: "SET wait_any = $3\nWHERE id = $1 AND epoch = $2 AND status = 'pending' AND executor_id IS NOT NULL`),"}},
			Pkg: ".", Tests: "TestHotPathKeyedByRunID|TestHotWritesFindRunsByPrimaryKey",
		},
	)
}

func init() {
	register(Mutant{
		Name: "plan/index-planned",
		Mechanism: "the batch statements that update runs by key (finishes, claims) are planned with sequential scans off, " +
			"so the plans their connections keep find runs through an index at any table size",
		Edits: []Edit{{File: "internal/sysdb/indexplan.go",
			Find:    "const planSettings = `SELECT set_config('enable_seqscan', 'off', true), ",
			Replace: "const planSettings = `SELECT "}},
		Pkg: ".", Tests: "^TestGenericPlansFromASmallTable$",
	}, Mutant{
		Name:      "plan/generic-at-once",
		Mechanism: "the batch statements that update runs by key get their generic plan at their first execution on a connection, with no custom plans before it",
		Edits: []Edit{{File: "internal/sysdb/indexplan.go",
			Find:    ", set_config('plan_cache_mode', 'force_generic_plan', true)`",
			Replace: "`"}},
		Pkg: "internal/sysdb", Tests: "^TestIndexPlannedOncePerConnection$",
	})
}
