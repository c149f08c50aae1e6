package main

// ciSet names the mutants CI runs (scripts/test, flag -ci): one or more
// per guarantee the README lists (fencing, synchronous finishes, handing
// runs back, queue limits, notifications, schedules' one tick, messages,
// dead letters, intents, idempotency keys, transaction steps, leases).
// Where two mutants of one guarantee are caught by the same test (the
// single and the batched statement, the in-memory and the parked wait),
// CI runs one; scripts/mutants runs every mutant, the twins, the typed
// statements' guards, the services' mechanics and the edges (dashboard,
// CLI, poolers, migrations, listings) too. Each mutant costs CI a build
// of its test binary (about 10 s of the two cores): keep CI well under
// 15 minutes.
var ciSet = map[string]bool{
	"fence/step": true, "fence/steps-batch": true, "fence/tx-step": true, "fence/finish": true,
	"fence/finish-batch": true, "fence/park": true, "fence/stream": true, "fence/complete-intent": true,
	"fence/dead-letter": true, "fence/claim-stray": true, "fence/requeue-stray": true,
	"finish/synchronous": true, "finish/batch-wakes-parent": true,
	"shutdown/hand-back": true, "sleep/recorded-wake": true,
	"commit/error-to-all": true, "hub/outcome": true, "start/batch-first-wins": true, "step/recorded-not-error": true,
	"queue/global": true, "queue/worker": true, "queue/partition": true, "queue/rate": true, "queue/dedup": true,
	"queue/fair-share": true, "queue/key-rate": true,
	"debounce/one-queued-run": true, "debounce/merge-lock": true, "batch/max-items": true,
	"notify/queue": true, "notify/message": true, "notify/event": true,
	"schedule/tick-once": true, "message/consume-once-filter": true, "message/consume-once-update": true,
	"deadletter/limit": true, "intent/record": true,
	"step/idempotency-key": true, "txstep/same-transaction": true,
	"lease/own-pool": true, "lease/takeover": true, "lease/live-owner": true,
}
