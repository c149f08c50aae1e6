package main

// The mutants of running behind a connection pooler (PgBouncer in
// transaction mode): migrations, payloads in every exec mode,
// notifications.

func init() {
	register(
		Mutant{
			Name:      "pooler/migration-xact-lock",
			Mechanism: "migrations take a transaction-scoped advisory lock (a session lock leaks on a pooled connection)",
			Edits: []Edit{{File: "internal/sysdb/migrate.go",
				Find:    `const lockStmt = "SELECT pg_advisory_xact_lock(hashtext($1))"`,
				Replace: `const lockStmt = "SELECT pg_advisory_lock(hashtext($1))"`}},
			Pkg: ".", Tests: "^TestMigrate$/^ConcurrentThroughPooler$",
		},
		Mutant{
			Name:      "migrate/recheck-under-lock",
			Mechanism: "a migration checks again, under the lock, that it is still missing",
			Edits: []Edit{{File: "internal/sysdb/migrate.go",
				Find:    "Scan(&done); err != nil || done {",
				Replace: "Scan(&done); err != nil {"}},
			Pkg: ".", Tests: "^TestMigrate$/^Concurrent$",
		},
		Mutant{
			Name:      "pooler/json-payloads",
			Mechanism: "payloads go to json columns as json.RawMessage, which every pgx exec mode sends as json",
			Edits: []Edit{{File: "internal/sysdb/arrays.go",
				Find:    "func (a jsonArray) Value() (driver.Value, error) { return []json.RawMessage(a), nil }",
				Replace: "func (a jsonArray) Value() (driver.Value, error) { b := make([][]byte, len(a)); for i := range a { b[i] = a[i] }; return b, nil }"}, {File: "internal/sysdb/wait_queries.go",
				Find:    "q.send, p.WorkflowID, p.Topic, p.Payload, key)",
				Replace: "q.send, p.WorkflowID, p.Topic, []byte(p.Payload), key)"}},
			Pkg: ".", Tests: "^TestPoolers$/^ExecModes$",
		},
		Mutant{
			Name:      "pooler/array-valuers",
			Mechanism: "the batch statements' array types are driver.Valuers of plain slices, which the exec modes that know no parameter type can send",
			Edits: []Edit{{File: "internal/sysdb/arrays.go",
				Find:    "func (a textArray) Value() (driver.Value, error) { return []string(a), nil }",
				Replace: "func (a textArray) value() (driver.Value, error) { return []string(a), nil }"}},
			Pkg: "./internal/sysdb", Tests: "^TestArrays$",
		},
		Mutant{
			Name:      "pooler/poll-only-silent",
			Mechanism: "with PollOnly no statement sends a notification",
			Edits: []Edit{{File: "dbos.go",
				Find:    "q := sysdb.New(c.Schema, !c.PollOnly)",
				Replace: "q := sysdb.New(c.Schema, true)"}},
			Pkg: ".", Tests: "^TestPoolers$/^PollOnlySendsNoNotifications$",
		},
		Mutant{
			Name:      "pooler/poll-only-silent-hand-back",
			Mechanism: "with PollOnly the boot hand-back of runs sends no notification either",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find:    "THEN ` + n(\"'n:'\") + ` END)::text",
				Replace: "THEN pg_notify('` + ChannelName(schema) + `', 'n:') END)::text"}},
			Pkg: "./internal/sysdb", Tests: "TestHandBackOwn",
		},
		Mutant{
			Name:      "pooler/listen-check",
			Mechanism: "Launch finds a LISTEN that delivers nothing and polls instead",
			Edits: []Edit{{File: "listen.go",
				Find:    "\t\treturn errDeafListen",
				Replace: "\t\treturn nil"}},
			Pkg: ".", Tests: "^TestPoolers$/^LaunchChecksListen$",
		},
		Mutant{
			Name:      "pooler/listen-check-renews-lease",
			Mechanism: "after a LISTEN check that timed out, Launch renews its lease before it claims runs",
			Edits: []Edit{{File: "dbos.go",
				Find:    "if _, err := e.lease.Renew(ctx); err != nil {",
				Replace: "if err := ctx.Err(); err != nil {"}},
			Pkg: ".", Tests: "^TestPoolers$/^LaunchChecksListen$",
		},
	)
}
