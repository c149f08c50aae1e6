package main

// The mutants of the client: what it writes is what an engine writes and
// wakes the executors, its waits are woken by notifications, and a queue
// it declares keeps its limits at the first executor's declaration.

func init() {
	register(
		Mutant{
			Name:      "client/start-notify",
			Mechanism: "a start outside an executor (Client.Start, StartTx) notifies the executors on commit ('n:')",
			Edits: []Edit{{File: "submit.go",
				Find:    `NotifyPayload: "n:" + id,`,
				Replace: `NotifyPayload: "",`}},
			Pkg: ".", Tests: "^TestClient$/^(SameRowsAndNotifications|PickedUpAtOnce)$",
		},
		Mutant{
			Name:      "client/enqueue-notify",
			Mechanism: "Client.Enqueue wakes the queue's dispatchers on commit ('q:')",
			Edits: []Edit{{File: "client.go",
				Find:    "c.submitter().enqueue(ctx, c.pool, workflow, queue, input, opts, !c.cfg.PollOnly)",
				Replace: "c.submitter().enqueue(ctx, c.pool, workflow, queue, input, opts, false)"}},
			Pkg: ".", Tests: "^TestClient$/^(SameRowsAndNotifications|PickedUpAtOnce)$",
		},
		Mutant{
			Name:      "client/enqueue-tx-notify",
			Mechanism: "Client.EnqueueTx wakes the queue's dispatchers on commit ('q:')",
			Edits: []Edit{{File: "client.go",
				Find:    "c.submitter().enqueue(ctx, tx, workflow, queue, input, opts, !c.cfg.PollOnly)",
				Replace: "c.submitter().enqueue(ctx, tx, workflow, queue, input, opts, false)"}},
			Pkg: ".", Tests: "^TestClient$/^SameRowsAndNotifications$",
		},
		Mutant{
			Name:      "client/dedup",
			Mechanism: "a client's enqueue stores EnqueueOpts.DedupID",
			Edits: []Edit{{File: "submit.go",
				Find:    "PartitionKey: o.PartitionKey, DedupID: o.DedupID,",
				Replace: "PartitionKey: o.PartitionKey,"}},
			Pkg: ".", Tests: "^TestClient$/^Dedup$",
		},
		Mutant{
			Name:      "client/watch",
			Mechanism: "a Result waiting in another process asks for the finish's notification (WatchWorkflow)",
			Edits: []Edit{{File: "watcher.go",
				Find:    "if !info.notify && w.notify {",
				Replace: "if false {"}},
			Pkg: ".", Tests: "^TestClient$/^ResultWaits$",
		},
		Mutant{
			Name:      "client/listen",
			Mechanism: "a client's wait opens a LISTEN connection",
			Edits: []Edit{{File: "client.go",
				Find:    "\t\tw.listen = c.listen.hold\n",
				Replace: "\t\t_ = c.listen.hold\n"}},
			Pkg: ".", Tests: "^TestClient$/^ResultWaits$",
		},
		Mutant{
			Name:      "client/notified-finish",
			Mechanism: "a client's listener wakes the Result waits of a finished run ('d:')",
			Edits: []Edit{{File: "client.go",
				Find:    "case 'd': // a run finished\n\t\tc.hub.Notified(payload[2:])",
				Replace: "case 'd': // a run finished"}},
			Pkg: ".", Tests: "^TestClient$/^ResultWaits$",
		},
		Mutant{
			Name:      "client/notified-event",
			Mechanism: "a client's listener wakes the GetEvent waits of a run that set an event ('e:')",
			Edits: []Edit{{File: "client.go",
				Find:    "case 'e': // an event was set\n\t\tc.hub.Notified(payload)",
				Replace: "case 'e': // an event was set"}},
			Pkg: ".", Tests: "^TestClient$/^ResultWaits$",
		},
		Mutant{
			Name:      "client/look-again-when-listening",
			Mechanism: "every client wait looks again once its LISTEN is in place (a finish notified before it is not lost)",
			Edits: []Edit{{File: "client.go",
				Find:    "nl.OnConnected = c.hub.WakeAll",
				Replace: "nl.OnConnected = func() {}"}},
			Pkg: ".", Tests: "^TestClient$/^ResultFinishBeforeListen$",
		},
		Mutant{
			Name:      "client/watch-wakes-claimers",
			Mechanism: "a watch on a run not claimed yet wakes those that may claim it (a claim skipped the row it locked)",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find: "SELECT (CASE WHEN status = 'enqueued' THEN ` + n(`'q:' || queue_name`) + `\n" +
					"\tWHEN executor_id IS NULL AND (wake_at IS NULL OR wake_at <= now()) THEN ` + n(`'n:' || id`) + ` END)::text FROM u",
				Replace: "SELECT NULL::text FROM u"}},
			Pkg: "./internal/sysdb", Tests: "TestWatchWorkflow$",
		},
		Mutant{
			Name:      "client/declare-pins-limits",
			Mechanism: "a queue a client declares with limits is marked as declared by the schema",
			Edits: []Edit{{File: "client.go",
				Find:    "o, declared = *opts, sysdb.DeclaredBySchema",
				Replace: "o = *opts"}},
			Pkg: ".", Tests: "^TestClient$/^DeclareQueue$",
		},
		Mutant{
			Name:      "client/first-executor-keeps-limits",
			Mechanism: "the first declaration by code of a queue declared by the schema keeps its limits",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find:    "WHERE name = $1 AND declared = '` + DeclaredBySchema + `'",
				Replace: "WHERE false"}},
			Pkg: "./internal/sysdb", Tests: "TestClientCreateQueue",
		},
		Mutant{
			Name:      "client/first-executor-keeps-limits-engine",
			Mechanism: "the first declaration by code of a queue declared by the schema keeps its limits (through an engine)",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find:    "WHERE name = $1 AND declared = '` + DeclaredBySchema + `'",
				Replace: "WHERE false"}},
			Pkg: ".", Tests: "^TestClient$/^DeclareQueue$",
		},
	)
}
