package main

// The mutants of operating an install: Launch waiting for its database,
// step attempts that survive crashes, the set-up script, the SQL views and
// the doctor.

func init() {
	const (
		attempts  = "internal/sysdb/attempt_queries.go"
		control   = "internal/sysdb/control_queries.go"
		retention = "internal/sysdb/retention_queries.go"
		views     = "migrations/018_views_v1.sql"
		doctorSQL = "internal/sysdb/doctor_queries.go"
		bothCrash = "TestStepAttemptsSurviveSIGKILL|TestStepAttemptsCarryAcrossExecutions"
	)
	register(
		Mutant{
			Name:      "boot/await-database",
			Mechanism: "Launch waits with backoff for a database that is not reachable yet",
			Edits: []Edit{{File: "dbos.go",
				Find:    "if err := awaitDatabase(ctx, e.pool, e.log); err != nil { // boot.go",
				Replace: "if err := e.pool.Ping(ctx); err != nil { // boot.go"}},
			Pkg: ".", Tests: "TestLaunchWaitsForDatabase$",
		},
		Mutant{
			Name:      "boot/fail-fast",
			Mechanism: "Launch fails at once on an error waiting cannot fix (not connection-class)",
			Edits: []Edit{{File: "boot.go",
				Find:    "func(ctx context.Context) error { return pool.Ping(ctx) }",
				Replace: `func(ctx context.Context) error { if err := pool.Ping(ctx); err != nil { return fmt.Errorf("%v: %w", err, context.DeadlineExceeded) }; return nil }`}},
			Pkg: ".", Tests: "TestLaunchFailsAtOnceWhenWaitingCannotHelp$",
		},
		Mutant{
			Name:      "attempts/record",
			Mechanism: "a step's failed attempt is recorded before its retry",
			Edits: []Edit{{File: "step.go",
				Find: `		if err := recordAttempt(r, pos, name, n, err); err != nil { // attempts.go
			return out, n, err
		}
`,
				Replace: ""}},
			Pkg: ".", Tests: bothCrash,
		},
		Mutant{
			Name:      "attempts/record-tx",
			Mechanism: "a transaction step's failed attempt is recorded before its retry",
			Edits: []Edit{{File: "step.go",
				Find: `		if rerr := recordAttempt(r, pos, name, n, err); rerr != nil { // attempts.go
			return zero, rerr
		}
`,
				Replace: ""}},
			Pkg: ".", Tests: "TestStepAttemptsCarryAcrossExecutions$",
		},
		Mutant{
			Name:      "attempts/carried",
			Mechanism: "a resumed run goes on from the recorded failed attempts of its steps",
			Edits: []Edit{{File: "resume.go",
				Find:    "	r.failed = failed\n",
				Replace: ""}},
			Pkg: ".", Tests: bothCrash,
		},
		Mutant{
			Name:      "attempts/resumed",
			Mechanism: "StepInfo.Resumed is set on the first attempt of a step an earlier execution began",
			Edits: []Edit{{File: "attempts.go",
				Find:    "	return failed > 0 || intent",
				Replace: "	return false"}},
			Pkg: ".", Tests: bothCrash + "|TestIntentStepResumed",
		},
		Mutant{
			Name:      "attempts/fenced",
			Mechanism: "only the owner of a pending run at its epoch records its steps' attempts",
			Edits: []Edit{{File: attempts,
				Find:    "WHERE w.id = $1 AND w.epoch = $6 AND w.status = 'pending'",
				Replace: "WHERE w.id = $1"}},
			Pkg: "internal/sysdb", Tests: "TestRecordAttempt$",
		},
		Mutant{
			Name:      "attempts/intent-counts",
			Mechanism: "the failed attempts of an IntentStep whose intent is recorded are loaded",
			Edits: []Edit{{File: attempts,
				Find:    "s.pos = a.pos AND s.status <> 'intent')",
				Replace: "s.pos = a.pos)"}},
			Pkg: "internal/sysdb", Tests: "TestLoadAttempts$",
		},
		Mutant{
			Name:      "attempts/resume-clears",
			Mechanism: "Resume of a failed or cancelled run gives its steps a new retry budget",
			Edits: []Edit{{File: control,
				Find:    "a AS (DELETE FROM {{schema}}.step_attempts WHERE workflow_id IN (SELECT id FROM u))",
				Replace: "a AS (SELECT 1)"}},
			Pkg: "internal/sysdb", Tests: "TestResumeClearsAttempts$",
		},
		Mutant{
			Name:      "attempts/retention",
			Mechanism: "retention deletes the attempt counts of the runs it deletes",
			Edits: []Edit{{File: retention,
				Find:    "sa AS (DELETE FROM {{schema}}.step_attempts WHERE workflow_id IN (SELECT id FROM victims)),",
				Replace: "sa AS (SELECT 1),"}},
			Pkg: "internal/sysdb", Tests: "TestPruneBatchDeletesAttempts$",
		},
		Mutant{
			Name:      "retention/creation-log",
			Mechanism: "retention deletes the creation log entries of the runs it deletes",
			Edits: []Edit{{File: retention,
				Find:    "c AS (DELETE FROM {{schema}}.workflows_created WHERE run_id = ANY(ARRAY(SELECT id FROM victims))),",
				Replace: "c AS (SELECT 1),"}},
			Pkg: "internal/sysdb", Tests: "TestPruneBatch$",
		},
		Mutant{
			Name:      "retention/finish-time-index",
			Mechanism: "retention's batches and the dashboard's activity find finished runs by finish time in an index (migration 027)",
			Edits: []Edit{{File: "migrations/027_finish_time_index.sql",
				Find:    "    ON {{schema}}.workflows (updated_at)\n",
				Replace: "    ON {{schema}}.workflows (app_version)\n"}},
			Pkg: "internal/sysdb", Tests: "TestFinishTimeReadersReadFewRows$",
		},
		Mutant{
			Name:      "install/apt-get",
			Mechanism: "scripts/install-postgres installs the server with apt-get as root on Debian/Ubuntu",
			Edits: []Edit{{File: "scripts/install-postgres",
				Find:    "		run apt-get install -y -qq postgresql\n",
				Replace: ""}},
			Pkg: "internal/pgtest", Tests: "TestInstallPostgres$",
		},
		Mutant{
			Name:      "install/with-postgres",
			Mechanism: "scripts/with-postgres installs the server (or says what to run) before it starts a cluster",
			Edits: []Edit{{File: "scripts/with-postgres",
				Find:    "\"$here/install-postgres\"\n",
				Replace: ""}},
			Pkg: "internal/pgtest", Tests: "TestWithPostgresInstallsFirst$",
		},
		Mutant{
			Name:      "migrate/script-applies-missing",
			Mechanism: "the DBA script runs only the migrations the schema lacks, so it applies again",
			Edits: []Edit{{File: "internal/sysdb/migrate.go",
				Find:    "IF NOT EXISTS (SELECT FROM %s.schema_migrations WHERE version = %d) THEN",
				Replace: "IF '%s' <> '' OR %d > 0 THEN"}},
			Pkg: ".", Tests: "^TestMigrate$/^SQLForDBAs$",
		},
		Mutant{
			Name:      "views/finished-at",
			Mechanism: "runs_v1.finished_at is the finish time of a finished run",
			Edits: []Edit{{File: views,
				Find:    "THEN w.updated_at END AS finished_at",
				Replace: "THEN w.created_at END AS finished_at"}},
			Pkg: ".", Tests: "TestViewsV1$",
		},
		Mutant{
			Name:      "views/retrying",
			Mechanism: "steps_v1 shows a step waiting for its next attempt as retrying",
			Edits: []Edit{{File: views,
				Find:    "    'retrying'::text,",
				Replace: "    'error'::text,"}},
			Pkg: ".", Tests: "TestViewsV1$",
		},
		Mutant{
			Name:      "views/enqueued",
			Mechanism: "queues_v1.enqueued counts the ready and the delayed runs",
			Edits: []Edit{{File: views,
				Find:    "    e.ready + e.delayed AS enqueued,",
				Replace: "    e.ready AS enqueued,"}},
			Pkg: ".", Tests: "TestViewsV1$",
		},
		Mutant{
			Name:      "views/owner-rights",
			Mechanism: "the views read the tables with their owner's rights: a role granted only them reads them",
			Edits: []Edit{{File: views,
				Find:    "CREATE OR REPLACE VIEW {{schema}}.runs_v1 AS",
				Replace: "CREATE OR REPLACE VIEW {{schema}}.runs_v1 WITH (security_invoker) AS"}},
			Pkg: ".", Tests: "TestViewsReadOnlyRole$",
		},
		Mutant{
			Name:      "doctor/xmin-snapshot",
			Mechanism: "the doctor reports a session whose snapshot holds the xmin horizon, not only one with a transaction ID",
			Edits: []Edit{{File: doctorSQL,
				Find:    "WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) AND",
				Replace: "WHERE (a.backend_xid IS NOT NULL) AND"}},
			Pkg: "internal/sysdb", Tests: "TestDoctorXminHolders$",
		},
		Mutant{
			Name:      "doctor/dead-share",
			Mechanism: "the doctor reports a table whose rows are mostly dead",
			Edits: []Edit{{File: "doctor_checks.go",
				Find:    "		if share >= 0.2 {",
				Replace: "		if share >= 2 {"}},
			Pkg: ".", Tests: "TestDoctorFindsProblems$",
		},
		Mutant{
			Name:      "doctor/lease-expired",
			Mechanism: "the doctor reports executors whose lease expired, not live ones",
			Edits: []Edit{{File: doctorSQL,
				Find:    "WHERE e.lease_expires_at < now() - $1 * interval '1 millisecond' AND o.n > 0",
				Replace: "WHERE o.n > 0"}},
			Pkg: "internal/sysdb", Tests: "TestDoctorDeadExecutorsAndLiveVersions$",
		},
		Mutant{
			Name:      "doctor/unclaimed-age",
			Mechanism: "the doctor reports runs unowned for longer than UnclaimedAge, not those just handed back",
			Edits: []Edit{{File: doctorSQL,
				Find:    "	AND w.updated_at < now() - $1 * interval '1 millisecond'\n",
				Replace: "\n"}},
			Pkg: "internal/sysdb", Tests: "TestDoctorStrayRuns$",
		},
		Mutant{
			Name:      "doctor/executors-checked",
			Mechanism: "durable doctor reports an executor that died owning runs",
			Edits: []Edit{{File: "doctor.go",
				Find:    "d.tables, d.horizon, d.runs, d.executors}",
				Replace: "d.tables, d.horizon, d.runs}"}},
			Pkg: "cmd/durable", Tests: "TestDoctor$",
		},
		Mutant{
			Name:      "doctor/exit-code",
			Mechanism: "durable doctor exits non-zero when it finds a problem",
			Edits: []Edit{{File: "cmd/durable/doctor.go",
				Find:    "		return &problemsFound{n: n}",
				Replace: "		return nil"}},
			Pkg: "cmd/durable", Tests: "TestDoctor$",
		},
	)
}
