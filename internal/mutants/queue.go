package main

// The mutants of queues, notifications, schedules, messages, dead letters,
// intents, idempotency keys, transaction steps and leases.

func init() {
	register(
		// Queue limits: the dispatch transaction counts under the queue's
		// row lock and claims at most what each limit leaves.
		Mutant{
			Name:      "queue/global",
			Mechanism: "the global concurrency limit of a queue's dispatch",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\t\tn = min(n, s.GlobalConcurrency-c.Running)\n",
				Replace: "\t\t\t// global limit not applied\n"}},
			// TestQueueLimitsAcrossProcesses catches it only when the three
			// executors happen to run their runs at the same moments.
			Pkg: "./internal/dispatch", Tests: "TestLimits/global",
		},
		Mutant{
			Name:      "queue/worker",
			Mechanism: "the per-executor concurrency limit of a queue's dispatch",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\tif s.WorkerConcurrency > 0 {\n\t\t\tn = min(n, s.WorkerConcurrency-running)",
				Replace: "\t\tif s.WorkerConcurrency > 0 && running < 0 {\n\t\t\tn = min(n, s.WorkerConcurrency-running)"}},
			Pkg: ".", Tests: "TestQueueLimitsAcrossProcesses",
		},
		Mutant{
			Name:      "queue/partition",
			Mechanism: "the per-partition-key concurrency limit counts the key's runs holding a slot (claimKeyed)",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "room = min(room, limit-st.Running)",
				Replace: "room = min(room, limit)"}},
			Pkg: ".", Tests: "TestQueueLimitsAcrossProcesses",
		},
		// Flow control: fair sharing, weights, limits per key.
		Mutant{
			Name:      "queue/fair-share",
			Mechanism: "a fair queue gives each slot to the least loaded key (the water fill)",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "a, b := (k.running+k.taken+k.quota)*o.weight, (o.running+o.taken+o.quota)*k.weight",
				Replace: "a, b := 0, 0 // no load: the first key takes what it can"}},
			Pkg: ".", Tests: "TestQueueFlowControlAcrossProcesses",
		},
		Mutant{
			Name:      "queue/fair-weight",
			Mechanism: "a key's weight scales its share under fair sharing",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "weight: max(st.Weight, 1)",
				Replace: "weight: 1"}},
			Pkg: ".", Tests: "TestQueueFlowControlAcrossProcesses",
		},
		Mutant{
			Name:      "queue/key-skip-scan",
			Mechanism: "a keyed pass reads each key's first runs, not a window of the queue's first runs",
			Edits: []Edit{{File: "internal/sysdb/partition_queries.go",
				Find:    "UNION ALL\n(SELECT key FROM k WHERE key IS NOT NULL LIMIT $4)",
				Replace: "UNION ALL\n(SELECT key FROM k WHERE key IS NOT NULL LIMIT 1)"}},
			Pkg: "./internal/dispatch", Tests: "TestKeyed/no-head-of-line",
		},
		Mutant{
			Name:      "queue/key-limit",
			Mechanism: "a key's own concurrency limit, set at run time, replaces the queue's",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "cmp.Or(st.Concurrency, s.PartitionConcurrency)",
				Replace: "cmp.Or(s.PartitionConcurrency, st.Concurrency)"}},
			Pkg: ".", Tests: "TestQueueFlowControlAcrossProcesses",
		},
		Mutant{
			Name:      "queue/key-rate",
			Mechanism: "the rate limit per partition key",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "\t\t\troom = min(room, left)\n",
				Replace: "\t\t\t// key rate not applied\n"}},
			Pkg: ".", Tests: "TestQueueFlowControlAcrossProcesses",
		},
		Mutant{
			Name:      "queue/key-rate-recorded",
			Mechanism: "a claim records its start for a queue with a rate per key only",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "rated := s.RateLimit > 0 || s.PartitionRateLimit > 0",
				Replace: "rated := s.RateLimit > 0"}},
			Pkg: "./internal/dispatch", Tests: "TestKeyed/key-rate",
		},
		Mutant{
			Name:      "queue/fair-cursor",
			Mechanism: "a keyed pass goes on after the last key the previous one read",
			Edits: []Edit{{File: "internal/dispatch/keyed.go",
				Find:    "After: row.FairCursor, Limit: want, WithKeyless: true",
				Replace: "Limit: want, WithKeyless: true"}},
			Pkg: "./internal/dispatch", Tests: "TestKeyed/cursor",
		},
		Mutant{
			Name:      "queue/rate",
			Mechanism: "the rate limit of a queue's dispatch",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\t\tn = min(n, s.RateLimit-c.Recent)\n",
				Replace: "\t\t\t// rate limit not applied\n"}},
			Pkg: ".", Tests: "TestQueueLimitsAcrossProcesses",
		},
		Mutant{
			Name:      "queue/dedup",
			Mechanism: "the unique index that holds a dedup ID for one queued or running run",
			Edits: []Edit{{File: "migrations/002_queues.sql",
				Find:    "CREATE UNIQUE INDEX IF NOT EXISTS workflows_queue_dedup_idx",
				Replace: "CREATE INDEX IF NOT EXISTS workflows_queue_dedup_idx"}},
			Pkg: ".", Tests: "^TestQueue$/^DedupUnderConcurrentEnqueues$",
		},
		Mutant{
			Name:      "queue/dedup-ignored",
			Mechanism: "the enqueue stores EnqueueOpts.DedupID",
			Edits: []Edit{{File: "submit.go",
				Find:    "PartitionKey: o.PartitionKey, DedupID: o.DedupID,",
				Replace: "PartitionKey: o.PartitionKey,"}},
			Pkg: ".", Tests: "^TestQueue$/^DedupUnderConcurrentEnqueues$",
		},
		// Debounce: one queued run per key, merges serialised, the bound.
		Mutant{
			Name:      "debounce/one-queued-run",
			Mechanism: "the unique index that holds a debounce key for one queued run",
			Edits: []Edit{{File: "migrations/019_flow_control.sql",
				Find:    "CREATE UNIQUE INDEX IF NOT EXISTS workflows_queue_debounce_idx",
				Replace: "CREATE INDEX IF NOT EXISTS workflows_queue_debounce_idx"}},
			Pkg: ".", Tests: "^TestDebounce$/^LatestInputWins$",
		},
		Mutant{
			Name:      "debounce/merge-lock",
			Mechanism: "a merge locks the queued run before it reads its input",
			Edits: []Edit{{File: "internal/sysdb/debounce_queries.go",
				Find:    "WHERE queue_name = $1 AND debounce_key = $2 AND status = 'enqueued' FOR UPDATE`",
				Replace: "WHERE queue_name = $1 AND debounce_key = $2 AND status = 'enqueued'`"}},
			Pkg: ".", Tests: "^TestDebounce$/^MergeConcurrent$",
		},
		Mutant{
			Name:      "debounce/max-wait",
			Mechanism: "a collapse moves the start no later than MaxWait after the first enqueue",
			Edits: []Edit{{File: "internal/sysdb/debounce_queries.go",
				Find:    "ELSE least(EXCLUDED.not_before, w.debounce_until) END`",
				Replace: "ELSE EXCLUDED.not_before END`"}},
			Pkg: ".", Tests: "^TestDebounce$/^MaxWait$",
		},
		// Batches: a full batch starts and frees its key.
		Mutant{
			Name:      "batch/max-items",
			Mechanism: "a batch that holds MaxItems items starts at once and takes no more",
			Edits: []Edit{{File: "batcher.go",
				Find:    "return merged, len(items) >= bo.MaxItems, err",
				Replace: "return merged, false, err"}},
			Pkg: ".", Tests: "TestQueueFlowControlAcrossProcesses",
		},
		Mutant{
			Name:      "batch/close-frees-key",
			Mechanism: "a full batch gives up its key, so the next item opens a new batch",
			Edits: []Edit{{File: "internal/sysdb/debounce_queries.go",
				Find:    "debounce_key = CASE WHEN $5::bool THEN NULL ELSE w.debounce_key END,",
				Replace: "debounce_key = w.debounce_key,"}},
			Pkg: ".", Tests: "^TestBatcher$/^Concurrent$",
		},
		// The dispatch service (internal/dispatch), with its unit tests.
		Mutant{
			Name:      "queue/pause",
			Mechanism: "a pass claims nothing from a paused queue",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "if err != nil || row.Paused {",
				Replace: "if err != nil {"}},
			Pkg: "./internal/dispatch", Tests: "TestLimits/paused",
		},
		Mutant{
			Name:      "queue/rate-wait",
			Mechanism: "a rate-limited queue looks again when its oldest start leaves the period",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\t\t\twait = min(wait, max(*c.RateFree, time.Millisecond))\n",
				Replace: "\t\t\t\t// no wait for the rate\n"}},
			Pkg: "./internal/dispatch", Tests: "TestLimits/rate",
		},
		Mutant{
			Name:      "queue/worker-counts-claims",
			Mechanism: "the runs a pass claims count toward the per-executor limit until they end",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\tq.take(len(got))\n",
				Replace: "\t\t// not counted\n"}},
			Pkg: "./internal/dispatch", Tests: "TestWorkerLimitAndRelease",
		},
		Mutant{
			Name:      "queue/release-wakes",
			Mechanism: "a run that ends here gives its slot back and wakes its queue's loop (Queue.Release)",
			Edits: []Edit{{File: "internal/dispatch/queue.go",
				Find:    "\tq.running -= n\n\tq.mu.Unlock()\n\tq.Wake()\n",
				Replace: "\tq.running -= n\n\tq.mu.Unlock()\n"}},
			Pkg: "./internal/dispatch", Tests: "TestWorkerLimitAndRelease",
		},
		Mutant{
			Name:      "queue/wake",
			Mechanism: "a wake-up starts a pass at once, not at the next poll",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\tcase <-q.kick:\n",
				Replace: ""}},
			Pkg: "./internal/dispatch", Tests: "TestWakeStartsAPass",
		},
		Mutant{
			Name:      "queue/batch-growth",
			Mechanism: "a pass that took all it asked for doubles the next one, up to BatchMax",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "batch = min(2*batch, BatchMax)",
				Replace: "batch = min(batch, BatchMax)"}},
			Pkg: "./internal/dispatch", Tests: "TestBatchGrows",
		},
		Mutant{
			Name:      "queue/requeue-wakes",
			Mechanism: "Requeue wakes the loops of the queues that got runs back",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "\t\tif q := d.byName[b.Queue]; q != nil {\n\t\t\tq.Wake()\n",
				Replace: "\t\tif q := d.byName[b.Queue]; q != nil {\n\t\t\t_ = q\n"}},
			Pkg: "./internal/dispatch", Tests: "TestRequeueWakesItsQueue",
		},
		Mutant{
			Name:      "queue/stop-waits",
			Mechanism: "the dispatcher's Stop returns only once every pass ended (no run launched after it)",
			Edits: []Edit{{File: "internal/dispatch/dispatch.go",
				Find:    "func (d *Dispatcher) Stop(ctx context.Context) error { return d.Loop.Stop(ctx) }",
				Replace: "func (d *Dispatcher) Stop(ctx context.Context) error { go d.Loop.Stop(ctx); return nil }"}},
			Pkg: "./internal/dispatch", Tests: "TestStopWaitsForThePass",
		},

		// Notifications: the waiters below poll every few minutes, so only
		// a notification wakes them within their tests' bounds.
		Mutant{
			Name:      "notify/queue",
			Mechanism: "the 'q:' notification after an Enqueue (sendQueueNotify)",
			Edits: []Edit{{File: "queue_set.go",
				Find:    `err := qs.e.q.Notify(qs.e.hardCtx, qs.e.pool, "q:"+name)`,
				Replace: `_, err := qs.e.pool.Exec(qs.e.hardCtx, "SELECT $1::text", "q:"+name)`}},
			Pkg: ".", Tests: "TestQueueWakeUpAcrossProcesses",
		},
		Mutant{
			Name:      "notify/queue-tx",
			Mechanism: "the 'q:' notification an EnqueueTx sends on commit (Enqueue statement)",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find:    "THEN ` + n(`'q:' || $5::text`) + ` END FROM ins",
				Replace: "THEN $5::text END FROM ins"}},
			Pkg: ".", Tests: "TestQueueWakeUpAcrossProcesses",
		},
		Mutant{
			Name:      "notify/queue-coalesce",
			Mechanism: "the 'q:' notifications asked for while one is in flight wait for it (dispatch.Notifier)",
			Edits: []Edit{{File: "internal/dispatch/notifier.go",
				Find:    "\tif n.inflight[queue] {",
				Replace: "\tif false && n.inflight[queue] {"}},
			Pkg: "./internal/dispatch", Tests: "TestNotifierCoalesces",
		},
		Mutant{
			Name:      "notify/queue-pending",
			Mechanism: "the 'q:' notifications asked for while one is in flight are sent after it (dispatch.Notifier)",
			Edits: []Edit{{File: "internal/dispatch/notifier.go",
				Find:    "\t\t\tif !n.pending[queue] {",
				Replace: "\t\t\tif true {"}},
			Pkg: "./internal/dispatch", Tests: "TestNotifierCoalesces",
		},
		Mutant{
			Name:      "notify/message",
			Mechanism: "the 'm:' notification of Send to a receiver waiting in memory",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "CASE WHEN NOT parked THEN 'm:' || id",
				Replace: "CASE WHEN NOT parked THEN NULL"}},
			Pkg: ".", Tests: "TestMessageWakeUpAcrossProcesses/in-memory",
		},
		Mutant{
			Name:      "notify/message-parked",
			Mechanism: "the 'n:' notification of Send to a parked receiver",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE 'n:' || id END`) + ` FROM w)::text",
				Replace: "WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE NULL END`) + ` FROM w)::text"}},
			Pkg: ".", Tests: "TestMessageWakeUpAcrossProcesses/parked",
		},
		Mutant{
			Name:      "notify/event",
			Mechanism: "the 'e:' notification of SetEvent",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "SELECT ` + n(`'e:' || workflow_id`) + `::text FROM ev",
				Replace: "SELECT workflow_id::text FROM ev"}},
			Pkg: ".", Tests: "TestWaitersInOtherProcessesAreNotified",
		},

		Mutant{
			Name:      "schedule/tick-once",
			Mechanism: "a tick's run has one workflow ID on every replica (tickID), so one insert wins",
			Edits: []Edit{
				{File: "internal/schedule/fire.go", Find: "\t\"fmt\"\n\t\"time\"\n", Replace: "\t\"fmt\"\n\t\"os\"\n\t\"time\"\n"},
				{File: "internal/schedule/fire.go",
					Find:    "id := tickID(row.Name, tick)",
					Replace: "id := tickID(fmt.Sprintf(\"%s:%d:%p\", row.Name, os.Getpid(), s), tick)"}},
			Pkg: ".", Tests: "TestScheduleExactlyOnceAcrossReplicas",
		},

		Mutant{
			Name:      "message/consume-once-filter",
			Mechanism: "Recv takes only unconsumed messages",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "WHERE m.workflow_id = w.id AND m.topic = $3 AND m.consumed_at IS NULL",
				Replace: "WHERE m.workflow_id = w.id AND m.topic = $3"}},
			Pkg: ".", Tests: "^TestWaits$/^MessagesAndEvents$",
		},
		Mutant{
			Name:      "message/consume-once-update",
			Mechanism: "Recv marks the message consumed in the statement of its checkpoint",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "UPDATE {{schema}}.messages SET consumed_at = now()",
				Replace: "UPDATE {{schema}}.messages SET consumed_at = NULL"}},
			Pkg: ".", Tests: "^TestWaits$/^MessagesAndEvents$",
		},

		Mutant{
			Name:      "deadletter/limit",
			Mechanism: "a claimed run over its recovery limit is dead-lettered, not run (startClaimed)",
			Edits: []Edit{{File: "resume.go",
				Find:    "case c.Attempts > def.maxRecovery:",
				Replace: "case c.Attempts > def.maxRecovery+1000:"}},
			Pkg: ".", Tests: "TestDeadLetterAfterRepeatedCrashes",
		},
		Mutant{
			Name:      "deadletter/count",
			Mechanism: "boot recovery counts a recovery attempt (ClaimOwn)",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find:    "SET epoch = w.epoch + 1, recovery_attempts = w.recovery_attempts + 1, wait_topic = NULL",
				Replace: "SET epoch = w.epoch + 1, recovery_attempts = w.recovery_attempts, wait_topic = NULL"}},
			Pkg: ".", Tests: "TestDeadLetterAfterRepeatedCrashes",
		},

		Mutant{
			Name:      "intent/record",
			Mechanism: "IntentStep records its intent before the call (here: after it)",
			Edits: []Edit{{File: "step.go",
				Find: "\t\tif rec == nil {\n\t\t\tif err := r.checkpoint(pos, name, stepIntent, nil, nil, 0, started); err != nil {\n\t\t\t\treturn zero, err\n\t\t\t}\n" +
					"\t\t} else if err := r.interrupted(); err != nil {\n\t\t\treturn zero, err\n\t\t}\n" +
					"\t\tout, attempts, runErr = attempt(r, sp, pos, name, policy, timeout, fn)\n",
				Replace: "\t\tout, attempts, runErr = attempt(r, sp, pos, name, policy, timeout, fn)\n" +
					"\t\tif rec == nil {\n\t\t\tif err := r.checkpoint(pos, name, stepIntent, nil, nil, 0, started); err != nil {\n\t\t\t\treturn zero, err\n\t\t\t}\n\t\t}\n"}},
			Pkg: ".", Tests: "^TestReplay$/^ReturnsRecordedValues$",
		},
		Mutant{
			Name:      "intent/resolve",
			Mechanism: "a replay that finds an unfinished intent calls resolve, not fn",
			Edits: []Edit{{File: "step.go",
				Find:    "if rec != nil && resolve != nil {",
				Replace: "if false && rec != nil && resolve != nil {"}},
			Pkg: ".", Tests: "^TestReplay$/^ReturnsRecordedValues$",
		},

		Mutant{
			Name:      "step/idempotency-key",
			Mechanism: "the idempotency key is workflow ID + position only (here: + the process)",
			Edits: []Edit{
				{File: "step.go",
					Find:    "func (s StepInfo) IdempotencyKey() string { return s.WorkflowID + \"/\" + strconv.Itoa(s.Pos) }",
					Replace: "func (s StepInfo) IdempotencyKey() string { return s.WorkflowID + \"/\" + strconv.Itoa(s.Pos) + \"/\" + strconv.Itoa(os.Getpid()) }"},
				{File: "step.go",
					Find:    "\t\"math\"\n\t\"runtime/debug\"\n",
					Replace: "\t\"math\"\n\t\"os\"\n\t\"runtime/debug\"\n"},
			},
			Pkg: ".", Tests: "TestCrashMatrix/^after-effect-2$",
		},
		Mutant{
			Name:      "step/idempotency-key-retry",
			Mechanism: "the idempotency key is the same on every retry of a step (here: + the attempt)",
			Edits: []Edit{{File: "step.go",
				Find:    "func (s StepInfo) IdempotencyKey() string { return s.WorkflowID + \"/\" + strconv.Itoa(s.Pos) }",
				Replace: "func (s StepInfo) IdempotencyKey() string { return s.WorkflowID + \"/\" + strconv.Itoa(s.Pos) + \"/\" + strconv.Itoa(s.Attempt) }"}},
			Pkg: ".", Tests: "^TestWorkflow$/^StepRetriesAndPermanentErrors$",
		},

		Mutant{
			Name:      "txstep/same-transaction",
			Mechanism: "a transaction step's checkpoint is written inside its transaction (here: after the COMMIT)",
			Edits: []Edit{{File: "step.go",
				Find: "\tr.e.q.QueueInsertStepTx(batch, sysdb.InsertStepParams{WorkflowID: r.id, Pos: pos, Name: name, Status: stepDone, Output: output,\n" +
					"\t\tAttempts: n, StartedAt: started, Epoch: r.epoch})\n\tbatch.Queue(\"COMMIT\")\n" +
					"\tbr := c.Conn().SendBatch(ctx, batch)\n\t_, insErr := br.Exec()\n\t_, commitErr := br.Exec()\n",
				Replace: "\tbatch.Queue(\"COMMIT\")\n\tr.e.q.QueueInsertStepTx(batch, sysdb.InsertStepParams{WorkflowID: r.id, Pos: pos, Name: name, Status: stepDone, Output: output,\n" +
					"\t\tAttempts: n, StartedAt: started, Epoch: r.epoch})\n" +
					"\tbr := c.Conn().SendBatch(ctx, batch)\n\t_, commitErr := br.Exec()\n\t_, insErr := br.Exec()\n"}},
			Pkg: ".", Tests: "TestFencingRejectsPausedOwner/tx",
		},

		Mutant{
			Name:      "lease/takeover",
			Mechanism: "the sweep takes over the runs of an executor whose lease expired (ClaimOrphans)",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find:    "WHERE $5::bool AND o.status = 'pending' AND o.executor_id IS NOT NULL AND o.executor_id <> $1",
				Replace: "WHERE false AND $5::bool AND o.status = 'pending' AND o.executor_id IS NOT NULL AND o.executor_id <> $1"}},
			Pkg: ".", Tests: "TestTakeoverAfterExecutorDies",
		},
		Mutant{
			Name:      "lease/live-owner",
			Mechanism: "the sweep leaves the runs of an executor whose lease is live (ClaimOrphans)",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find: "\t\t\tAND NOT EXISTS (SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())\n" +
					"\t\tORDER BY o.created_at LIMIT $4 FOR UPDATE SKIP LOCKED) orphaned",
				Replace: "\t\tORDER BY o.created_at LIMIT $4 FOR UPDATE SKIP LOCKED) orphaned"}},
			Pkg: ".", Tests: "TestLiveOwnerKeepsItsRuns",
		},
		Mutant{
			Name:      "lease/heartbeat",
			Mechanism: "the heartbeat renews the executor's lease every LeaseTTL/3",
			Edits: []Edit{{File: "internal/lease/lease.go",
				Find:    "\tperiod := s.cfg.LeaseTTL / 3\n\tt := time.NewTimer(period)",
				Replace: "\tperiod := 1000 * s.cfg.LeaseTTL\n\tt := time.NewTimer(period)"}},
			Pkg: ".", Tests: "TestLiveOwnerKeepsItsRuns",
		},
	)
}
