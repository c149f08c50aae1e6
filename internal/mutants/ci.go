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
// of its test binary (about 10 s of the two cores) and its tests: keep CI
// well under 15 minutes. Of the fencing mutants CI runs those of the hot
// paths (the batched step and finish, the transaction step, the park, the
// claim of a stray run); the single-statement twins, the stream, the
// intent and the dead letter fences run in scripts/mutants.
var ciSet = map[string]bool{
	"fence/steps-batch": true, "fence/finish-batch": true, "fence/tx-step": true, "fence/park": true,
	"fence/claim-stray": true,
	"finish/synchronous": true, "shutdown/hand-back": true, "sleep/recorded-wake": true,
	"commit/error-to-all": true, "step/recorded-not-error": true,
	"queue/global": true, "queue/partition": true, "queue/rate": true, "queue/dedup": true,
	"queue/fair-share": true, "queue/key-rate": true, "debounce/merge-lock": true, "batch/max-items": true,
	"notify/queue": true, "schedule/tick-once": true, "message/consume-once-update": true,
	"deadletter/limit": true, "intent/record": true,
	"step/idempotency-key": true, "txstep/same-transaction": true, "lease/takeover": true,
}
