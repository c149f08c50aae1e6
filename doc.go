// Package durable makes plain Go functions durable workflows, recorded in
// the application's own Postgres.
//
// Every step's output is checkpointed as it completes. When a process dies
// (SIGKILL, OOM, deploy, lost connection) the run resumes on the next boot of
// any executor at its first unrecorded step; recorded outputs are replayed,
// never recomputed, so a model answer is never re-sampled and a side effect
// guarded by its idempotency key happens once.
//
// # Overview
//
//	eng, err := durable.New(pool, &durable.Config{AppVersion: "2026-11-29"})
//	onboard := durable.Register(eng, "onboard", func(wctx durable.Context, in Signup) (Receipt, error) {
//		ws, err := durable.Step(wctx, "provision", provision, nil)       // plain step, retried by policy
//		n, err := durable.TxStep(wctx, "record-seat", recordSeat, nil)   // app writes + checkpoint in one transaction
//		...
//	})
//	err = eng.Launch(ctx)                       // migrate, resume pending runs, start services
//	h, err := onboard.Start(ctx, in, &durable.StartOpts{ID: "signup-42"})
//	receipt, err := h.Result(ctx)
//	err = eng.Shutdown(ctx)
//
// A process that only submits work needs neither the workflows' code nor
// an engine: a [Client] starts, enqueues, messages and waits for runs by
// workflow name ([ClientWorkflow] for the typed form), and can declare a
// queue before any executor works it (docs/client.md).
//
// Cost: one database round trip per step on the live path. A run's recorded
// steps are loaded once when it resumes and replayed from memory; each new
// checkpoint is a single INSERT that also checks ownership (fencing).
// Config.DeferStepCheckpoints lets a plain step return before its
// checkpoint commits (written before the run's next durable call, with its
// finish, or 2 ms later), which saves the last step's round trip of a run at
// the price of a slightly longer at-least-once window for that step.
//
// # Ownership and recovery
//
// Every executor holds a lease row renewed by heartbeats. Launch resumes
// the pending runs of its own ExecutorID (give each replica a stable one);
// a live executor takes over the runs of an executor whose lease expired.
// Each change of owner bumps the run's epoch, and every checkpoint write
// checks it, so a paused "zombie" executor can never write into a run it no
// longer owns. A run whose executor keeps dying is dead-lettered after
// Config.MaxRecoveryAttempts. Runs are only resumed by executors with the
// same Config.AppVersion that register their workflow name. The heartbeat
// and the ownership checks go through two connections of their own, in a
// pool made at Launch from the pool's config (it connects the same way,
// PgBouncer included): a pool busy with the application's work never costs
// a live executor its lease. Recovery is bounded: at most
// Config.RecoveryConcurrency recovered runs execute at once in an
// executor, and their recorded steps are loaded a few MiB at a time.
//
// # What a caller has seen stays true
//
// An outcome, once a caller can see it ([Handle.Result], a status,
// [Engine.ListWorkflows], the CLI, the dashboard, a parent awaiting its
// child, a [GetEvent] reader), is never changed by a later crash of the
// process or of Postgres. Every write that makes an outcome visible waits
// for its WAL flush before anyone is told, the finish included: Postgres
// shows a synchronous commit to other sessions only once it is flushed,
// and Result returns only after the finish statement's commit. The
// alternative designs were weighed and left: an asynchronous finish is
// re-created by replay only while the run's code, version and limits still
// allow it (a deadline that passed in between, a recovery limit, a deploy
// of another AppVersion would each change the outcome), and a Result that
// waits for a later flush still leaves other readers seeing the unflushed
// row. The cost is one WAL flush per run, shared by the runs finishing
// together (group commit), and nothing per step.
//
// A run that [Engine.Shutdown] stops at a step boundary is handed back
// without counting as a recovery attempt: only runs whose process died
// under them count toward Config.MaxRecoveryAttempts.
//
// # Database outages
//
// When Postgres goes away (restart, failover, a cut network), runs in
// flight keep their progress in memory and keep retrying their checkpoint
// writes with backoff; nothing is marked failed because the database was
// unreachable, and everything resumes when it is back, without restarting
// executors. A live executor renews its lease within a second of the
// database's return, and an executor that was itself cut off waits
// LeaseTTL/2 before it takes over peers' runs, so an outage shorter than
// LeaseTTL moves no run. Calls made while the database is down (Start,
// Enqueue, Send, Result) return the connection error. Such a Start may
// still have committed: the run then executes; call Start again with the
// same ID to get its handle. A step whose own code uses the database fails
// and retries by its policy like any other error; a TxStep retries
// connection errors until the database is back.
//
// # Tracing and logs
//
// With Config.TracerProvider set (OpenTelemetry; the global provider is never
// used), the engine makes spans:
//
//	durable.start <workflow>        Start, StartTx, StartChild, a schedule's tick;
//	                                durable.enqueue / durable.fork for Enqueue and Fork
//	  durable.run <workflow>        one per execution of the run, in whichever process
//	    durable.step <step>         one per executed step; kind step, tx or intent
//	    durable.sleep               an in-memory sleep
//	    durable.recv <topic>        a wait for a message
//	    durable.await               a wait for a child run
//
// The start span is a child of the span in the caller's ctx, if any, and
// its W3C trace context is written with the run's row by the start
// statement itself (no extra statement). Every execution's run span is a
// child of it: a run interrupted by a crash and resumed by another process,
// or parked for days and woken anywhere, stays one trace (a run started
// without a provider has no stored context: each of its executions starts
// a trace of its own). A child workflow's
// start span is a child of its parent's run span, so the child is in the
// parent's trace. Replayed steps make no spans (the run span's
// durable.replayed_steps counts them); each failed attempt of a step that
// is retried is an exception event on the step's span, with its attempt
// number and the delay before the next one. The run span ends with
// durable.workflow.status (success, error, cancelled, or pending when the
// execution stopped without finishing: durable.stop_reason parked, shutdown
// or fenced), and for an enqueued run it carries durable.queue.wait_ms, the
// time from enqueue to start. Step code's ctx carries the step's span, so
// spans of instrumented clients called from a step nest under it. Without a
// provider (or with a no-op one) tracing costs a nil check per hook.
//
// Logs go to Config.Logger. Those about a run carry workflow_id and
// workflow; those about a step also step, step_pos and attempt; with
// tracing, trace_id and span_id too. [Logger] returns a logger with the
// same attributes for workflow code (pass wctx) and step code (pass the
// step's ctx).
//
// # Metrics
//
// Config.MeterProvider (OpenTelemetry's global provider when nil) receives
// counters of the runs started and finished, histograms of workflow, step
// and queue-wait durations and of group-commit batch sizes, the recoveries,
// and gauges of the queues' depth and the parked runs (read from the
// database at each collection). Attributes have bounded values: workflow
// and queue names, statuses, kinds; docs/metrics.md lists them.
// [ReadActivity] gives the recent activity the dashboard charts.
//
// # Determinism rules
//
// Workflow code is re-executed from the top when a run resumes, with
// recorded steps answered from the database. So workflow code (not step
// code) must:
//   - do all I/O, and anything that may differ between executions, inside
//     steps: Step, TxStep, IntentStep;
//   - call steps in the same order with the same names for the same input
//     (a different name at a recorded position stops the run with a
//     [*NonDeterminismError]);
//   - use [Now] and [NewID] instead of time.Now and random IDs, and [Sleep]
//     instead of time.Sleep;
//   - receive messages with [Recv], publish progress with [SetEvent] and
//     tag the run with [SetTag];
//   - branch changed code on [Patched] so in-flight runs keep their path;
//   - start child workflows with [Workflow.StartChild], which records the
//     start, rather than Start, and wait for them with [Handle.Await];
//   - run steps in parallel with [Go], started in a deterministic order;
//   - not branch on a step error's concrete Go type: a step error is
//     returned as recorded ([*StepError] wrapping a [*RecordedError]); use
//     errors.Is with the package's sentinels instead.
//
// Step results must survive a JSON round trip; the value a step returns is
// the decoded record, live and on replay alike.
//
// # Operating
//
// Every run stays in the database after it finishes, with its steps,
// messages, events and stream entries. [Engine.Prune] deletes the runs
// that finished before a cutoff, in short batches that skip rows anyone
// else holds, so it runs next to live work; Config.Retention makes one
// executor at a time do it every Config.RetentionInterval.
// Runs carry tags (StartOpts.Tags, [SetTag]) that [Engine.ListWorkflows]
// filters on (ListParams.Tags).
// [Engine.ListWorkflows], [Engine.Inspect], [Engine.ListSteps],
// [Engine.ListQueues], [Engine.ListSchedules], [Engine.Cancel],
// [Engine.Resume], [Engine.Fork], [Send] and [Engine.TriggerSchedule] work
// from a process that registers nothing and is never launched: the
// durable command (cmd/durable) is such a process.
//
// # Errors
//
//	situation                                        error
//	-----------------------------------------------  ------------------------------------------
//	Start of an ID used by another workflow          *ConflictError (ErrWorkflowConflict)
//	Start/Enqueue of an ID with another input        *ConflictError (ErrInputMismatch)
//	handle of an ID that does not exist              ErrWorkflowNotFound
//	input or output over Config.MaxPayloadBytes      *PayloadTooLargeError (ErrPayloadTooLarge)
//	bad name, ID, config field or option             ErrInvalidArgument, naming the field
//	input, message or event JSON cannot encode       ErrInvalidArgument (and ErrPermanent)
//	Start before Launch / during Shutdown            ErrNotLaunched / ErrShutdown
//	step failed for good                             *StepError wrapping the recorded cause
//	step or workflow panicked                        ErrPanic (with the stack recorded)
//	replay met another step than recorded            *NonDeterminismError (ErrNonDeterministic)
//	stored payload no longer decodes                 ErrDecode
//	run kept crashing its executor                   *DeadLetterError (ErrDeadLetter), status dead
//	executor lost ownership of a run                 ErrFenced (the run goes on elsewhere)
//	schema too old with Config.SkipMigrate           ErrSchemaOutdated
//	enqueue on a queue nobody declared               ErrQueueNotFound
//	dedup ID held by a queued or running run         *DuplicateError (ErrDuplicate)
//	an item of EnqueueMany/StartMany refused         *BatchItemError wrapping the item's error
//	send to a finished run                           ErrWorkflowFinished
//	run cancelled                                    ErrCancelled (also matches context.Canceled)
//	run past its deadline (StartOpts.Timeout)        matches context.DeadlineExceeded
//	bad cron spec, zone or schedule option           ErrInvalidArgument
//	unknown schedule                                 ErrScheduleNotFound
//	write to a closed stream                         ErrStreamClosed
//
// Errors read back from the database are [*RecordedError] values whose Kind
// keeps the cause class: errors.Is still matches ErrPermanent, ErrCancelled,
// context.Canceled, context.DeadlineExceeded and the sentinels above.
package durable
