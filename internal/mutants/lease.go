package main

// The mutants of the lease's own connections, bounded resume and the
// waits of stream writers.

func init() {
	register(
		Mutant{
			Name:      "lease/own-pool",
			Mechanism: "the heartbeat renews the lease on connections of its own, never behind the application's work",
			Edits: []Edit{{File: "internal/lease/lease.go",
				Find:    "return s.cfg.Queries.Heartbeat(ctx, s.pool,",
				Replace: "return s.cfg.Queries.Heartbeat(ctx, s.cfg.Pool,"}},
			Pkg: ".", Tests: "^TestBusyPool$/^KeepsLease$",
		},
		Mutant{
			Name:      "lease/fence-check-pool",
			Mechanism: "the ownership check after a refused checkpoint uses the lease's connections",
			Edits: []Edit{{File: "internal/lease/lease.go",
				Find:    "return s.cfg.Queries.OwnershipCheck(ctx, s.pool, p)",
				Replace: "return s.cfg.Queries.OwnershipCheck(ctx, s.cfg.Pool, p)"}},
			Pkg: ".", Tests: "^TestBusyPool$/^FencedTxSteps$",
		},
		Mutant{
			Name:      "lease/judged-with-connection",
			Mechanism: "the takeover decides whether leases may be judged once it holds a connection",
			Edits: []Edit{{File: "internal/recovery/recovery.go",
				Find:    "\tconn, err := s.cfg.Pool.Acquire(ctx)\n\tif err == nil {\n\t\tgot, err = s.cfg.Queries.ClaimOrphans(ctx, conn, sysdb.ClaimOrphansParams{ExecutorID: s.cfg.ExecutorID,\n\t\t\tAppVersion: s.cfg.AppVersion, Names: s.cfg.Names(), Limit: limit, TakeExpired: s.cfg.JudgesLeases()})",
				Replace: "\tjudges := s.cfg.JudgesLeases()\n\tconn, err := s.cfg.Pool.Acquire(ctx)\n\tif err == nil {\n\t\tgot, err = s.cfg.Queries.ClaimOrphans(ctx, conn, sysdb.ClaimOrphansParams{ExecutorID: s.cfg.ExecutorID,\n\t\t\tAppVersion: s.cfg.AppVersion, Names: s.cfg.Names(), Limit: limit, TakeExpired: judges})"}},
			Pkg: ".", Tests: "TestLeaseJudgedWithConnectionInHand",
		},
		Mutant{
			Name:      "lease/requeue-judged-with-connection",
			Mechanism: "the requeue of dead executors' queued runs decides whether leases may be judged once it holds a connection",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\tconn, err := d.cfg.Pool.Acquire(ctx)\n\tif err != nil {\n\t\treturn err\n\t}\n\tdefer conn.Release()\n\tback, err := d.cfg.Queries.Requeue(ctx, conn, sysdb.RequeueParams{ExecutorID: d.cfg.ExecutorID, Own: own, ExpiredLeases: d.cfg.JudgesLeases()})",
				Replace: "\tjudges := d.cfg.JudgesLeases()\n\tconn, err := d.cfg.Pool.Acquire(ctx)\n\tif err != nil {\n\t\treturn err\n\t}\n\tdefer conn.Release()\n\tback, err := d.cfg.Queries.Requeue(ctx, conn, sysdb.RequeueParams{ExecutorID: d.cfg.ExecutorID, Own: own, ExpiredLeases: judges})"}},
			Pkg: ".", Tests: "TestLeaseJudgedWithConnectionInHand",
		},
		Mutant{
			Name:      "resume/slots",
			Mechanism: "a claim by recovery takes no more runs than free recovery slots (Config.RecoveryConcurrency)",
			Edits: []Edit{{File: "internal/recovery/slots.go",
				Find:    "k := min(n, s.free)",
				Replace: "k := n"}},
			Pkg: ".", Tests: "TestResumeBounded",
		},
		Mutant{
			Name:      "resume/load-budget",
			Mechanism: "one load of claimed runs' recorded steps stays within its byte budget",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "WHERE n = 1 OR total <= $2)",
				Replace: "WHERE n = 1 OR total <= $2 OR true)"}},
			Pkg: ".", Tests: "TestResumeBounded",
		},
		Mutant{
			Name:      "resume/window-cap",
			Mechanism: "a read of a run's recorded steps takes at most one window of them",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "k = 1 OR (k <= $3 AND upto <= $2) AS keep",
				Replace: "k = 1 OR upto <= $2 AS keep"}},
			Pkg: ".", Tests: "TestResumeWindowed",
		},
		Mutant{
			Name:      "resume/window-count-once",
			Mechanism: "a read of a run's first window counts the run's steps once, not once per row read",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "taken AS MATERIALIZED (",
				Replace: "taken AS ("}},
			Pkg: "./internal/sysdb", Tests: "TestLoadStepsManyReadsOneWindow",
		},
		Mutant{
			Name:      "resume/window-count-first",
			Mechanism: "a read of a run's later window does not count the run's steps",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "CASE WHEN x.more AND $4 = 0",
				Replace: "CASE WHEN x.more"}},
			Pkg: "./internal/sysdb", Tests: "TestLoadStepsManyReadsOneWindow",
		},
		Mutant{
			Name:      "resume/window-replaced",
			Mechanism: "a resumed run's next window of recorded steps replaces the one it replayed",
			Edits: []Edit{{File: "recorded.go",
				Find:    "\th.recs, h.hi, h.more = w.recs, w.hi, w.more\n",
				Replace: "\tfor p, rec := range h.recs {\n\t\tif w.recs == nil {\n\t\t\tw.recs = map[int]*stepRecord{}\n\t\t}\n\t\tw.recs[p] = rec\n\t}\n\th.recs, h.hi, h.more = w.recs, w.hi, w.more\n"}},
			Pkg: ".", Tests: "TestResumeWindowed",
		},
		Mutant{
			Name:      "resume/window-intents",
			Mechanism: "a resumed run knows the intents it read after its window moved past them (StepInfo.Resumed)",
			Edits: []Edit{{File: "recorded.go",
				Find:    "h.intents[pos] = true",
				Replace: "h.intents[pos] = false"}},
			Pkg: ".", Tests: "TestIntentStepResumed",
		},
		Mutant{
			Name:      "resume/window-reads-on",
			Mechanism: "a resumed run reads the next window of its recorded steps when its replay reaches the end of one",
			Edits: []Edit{{File: "recorded.go",
				Find:    "if pos >= h.hi && h.more {",
				Replace: "if false && pos >= h.hi && h.more {"}},
			Pkg: ".", Tests: "TestResumeWindowed",
		},
		Mutant{
			Name:      "stream/waits-end",
			Mechanism: "a stream writer's wait ends with its run or step (cancel, deadline, step timeout)",
			Edits: []Edit{{File: "internal/stream/run.go",
				Find:    "\t\tcase <-ctx.Done():\n\t\t\treturn rs.r.WaitEnded(ctx, what)\n\t\tcase <-rs.r.Context().Done():\n\t\t\treturn rs.r.WaitEnded(ctx, what)\n",
				Replace: ""}},
			Pkg: ".", Tests: "^TestStream$/^WaitsEnd$",
		},
	)
}
