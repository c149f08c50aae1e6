package main

// The mutants of the data layer's conflict clauses: each ON CONFLICT turns
// a write that meets an existing row into the outcome the engine expects
// (nothing written and no error, or the row updated), where a plain
// INSERT would fail with a unique violation.

func init() {
	register(
		Mutant{
			Name:      "conflict/enqueue",
			Mechanism: "an enqueue under a taken run ID or dedup ID inserts nothing and fails nothing",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find:    "$12, $13::jsonb FROM q\n\tON CONFLICT DO NOTHING\n",
				Replace: "$12, $13::jsonb FROM q\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestQueueEnqueue$",
		},
		Mutant{
			Name:      "conflict/enqueue-many",
			Mechanism: "EnqueueMany skips the runs whose ID or dedup ID is taken and inserts the others",
			Edits: []Edit{{File: "internal/sysdb/batch_queries.go",
				Find:    "ORDER BY u.id) u\n\tON CONFLICT DO NOTHING\n",
				Replace: "ORDER BY u.id) u\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestBatchEnqueueMany$",
		},
		Mutant{
			Name:      "conflict/start-many",
			Mechanism: "StartMany skips the runs whose ID is taken and inserts the others",
			Edits: []Edit{{File: "internal/sysdb/batch_queries.go",
				Find:    "\t\tORDER BY u.id) u\n\tON CONFLICT (id) DO NOTHING\n",
				Replace: "\t\tORDER BY u.id) u\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestBatchStartMany$",
		},
		Mutant{
			Name:      "conflict/start-unowned",
			Mechanism: "a start of an unowned run (InsertWorkflow) under a taken ID inserts nothing and sends no notification",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $9, $10, $11::jsonb)\n\tON CONFLICT (id) DO NOTHING\n",
				Replace: "VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $9, $10, $11::jsonb)\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestInsertWorkflow$",
		},
		Mutant{
			Name:      "conflict/start-batch",
			Mechanism: "a batch of starts (InsertWorkflows) skips the runs whose ID is taken and inserts the others",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "AS u(id, name, input, parent_id, deadline, trace_context, tags)\nON CONFLICT (id) DO NOTHING\n",
				Replace: "AS u(id, name, input, parent_id, deadline, trace_context, tags)\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestInsertWorkflows$",
		},
		Mutant{
			Name:      "conflict/create-queue",
			Mechanism: "a client's CreateQueue of a queue that exists changes nothing and fails nothing",
			Edits: []Edit{{File: "internal/sysdb/client_queries.go",
				Find:    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)\nON CONFLICT (name) DO NOTHING`",
				Replace: "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`"}},
			Pkg: "./internal/sysdb", Tests: "^TestClientCreateQueue$",
		},
		Mutant{
			Name:      "conflict/declare-queue",
			Mechanism: "a queue declared again (a restart, another executor) updates its row instead of failing",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find: "WHERE NOT EXISTS (SELECT 1 FROM adopt)\nON CONFLICT (name) DO UPDATE SET global_concurrency = EXCLUDED.global_concurrency,\n" +
					"\tworker_concurrency = EXCLUDED.worker_concurrency, partition_concurrency = EXCLUDED.partition_concurrency,\n" +
					"\trate_limit = EXCLUDED.rate_limit, rate_period_ms = EXCLUDED.rate_period_ms,\n" +
					"\trelease_parked = EXCLUDED.release_parked, fair_share = EXCLUDED.fair_share,\n" +
					"\tpartition_rate_limit = EXCLUDED.partition_rate_limit, partition_rate_period_ms = EXCLUDED.partition_rate_period_ms,\n" +
					"\tdeclared = EXCLUDED.declared, updated_at = now()\n" +
					"WHERE q.declared IS DISTINCT FROM EXCLUDED.declared`",
				Replace: "WHERE NOT EXISTS (SELECT 1 FROM adopt)`"}},
			Pkg: "./internal/sysdb", Tests: "^TestQueueDeclare$",
		},
		Mutant{
			Name:      "conflict/partition-limits",
			Mechanism: "a key's limits set again replace the ones it had",
			Edits: []Edit{{File: "internal/sysdb/partition_queries.go",
				Find:    "ON CONFLICT (queue_name, partition_key) DO UPDATE SET concurrency = EXCLUDED.concurrency,\n\tweight = EXCLUDED.weight, updated_at = now()\n",
				Replace: ""}},
			Pkg: "./internal/sysdb", Tests: "^TestPartitionCursorAndLimits$",
		},
		Mutant{
			Name:      "conflict/schedule",
			Mechanism: "a schedule declared again (a restart, another replica) updates its row instead of failing",
			Edits: []Edit{{File: "internal/sysdb/schedule_queries.go",
				Find: "ON CONFLICT (name) DO UPDATE SET\n" +
					"\tworkflow_name = EXCLUDED.workflow_name,\n" +
					"\tspec = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)\n" +
					"\t\tTHEN EXCLUDED.spec ELSE s.spec END,\n" +
					"\tlocation = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)\n" +
					"\t\tTHEN EXCLUDED.location ELSE s.location END,\n" +
					"\tcursor_at = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)\n" +
					"\t\tTHEN EXCLUDED.cursor_at ELSE s.cursor_at END,\n" +
					"\tnext_tick = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)\n" +
					"\t\tTHEN CASE WHEN s.paused THEN NULL ELSE EXCLUDED.next_tick END ELSE s.next_tick END,\n" +
					"\tcatch_up = CASE WHEN s.code_catch_up <> EXCLUDED.code_catch_up THEN EXCLUDED.catch_up ELSE s.catch_up END,\n" +
					"\tcode_spec = EXCLUDED.code_spec, code_location = EXCLUDED.code_location, code_catch_up = EXCLUDED.code_catch_up,\n" +
					"\tversion = s.version + 1, updated_at = now()\n" +
					"WHERE (s.workflow_name, s.code_spec, s.code_location, s.code_catch_up)\n" +
					"\t<> (EXCLUDED.workflow_name, EXCLUDED.code_spec, EXCLUDED.code_location, EXCLUDED.code_catch_up)`",
				Replace: "`"}},
			Pkg: "./internal/sysdb", Tests: "^TestScheduleUpsert$",
		},
		Mutant{
			Name:      "conflict/stream-append",
			Mechanism: "a stream entry written again (a retry after a lost acknowledgement) is skipped, not a failure",
			Edits: []Edit{{File: "internal/sysdb/stream_queries.go",
				Find:    "\tON CONFLICT (workflow_id, key, off) DO NOTHING)\n",
				Replace: ")\n"}},
			Pkg: "./internal/sysdb", Tests: "^TestStreamAppend$",
		},
		Mutant{
			Name:      "conflict/set-event",
			Mechanism: "an event set again replaces its value",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "\tON CONFLICT (workflow_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()\n",
				Replace: ""}},
			Pkg: "./internal/sysdb", Tests: "^TestWaitSetEvent$",
		},
		Mutant{
			Name:      "conflict/debounce",
			Mechanism: "an enqueue with the debounce key of a queued run collapses into it instead of failing",
			Edits: []Edit{{File: "internal/sysdb/debounce_queries.go",
				Find:    "\tON CONFLICT (queue_name, debounce_key) WHERE debounce_key IS NOT NULL AND status = 'enqueued'\n\tDO UPDATE SET input = EXCLUDED.input, not_before = ` + start + `,\n\t\tdeadline = EXCLUDED.deadline, updated_at = now()\n\tWHERE w.name = EXCLUDED.name AND NOT $14::bool\n",
				Replace: ""}},
			Pkg: "./internal/sysdb", Tests: "^TestDebounceStatements$",
		},
		Mutant{
			Name:      "conflict/migration-record",
			Mechanism: "the migration script records a migration an earlier run of it recorded without failing (it runs again on an upgraded schema)",
			Edits: []Edit{{File: "internal/sysdb/migrate.go",
				Find:    "VALUES (%d, %s) ON CONFLICT DO NOTHING;\\nCOMMIT;\\n\"",
				Replace: "VALUES (%d, %s);\\nCOMMIT;\\n\""}},
			Pkg: ".", Tests: "^TestMigrate$/^SQLForDBAs$",
		},
	)
}
