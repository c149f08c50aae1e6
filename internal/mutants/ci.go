package main

// ciSet names the mutants CI runs (scripts/test, flag -ci): those of the
// guarantees the README lists (fencing, synchronous finishes, handing
// runs back, queue limits, notifications, schedules' one tick, messages,
// dead letters, intents, idempotency keys, transaction steps, leases).
// The others (the typed statements' guards, the services' mechanics, the
// edges: dashboard, CLI, poolers, migrations, listings) run with
// scripts/mutants, which runs every mutant; keep CI well under 15 minutes.
var ciSet = map[string]bool{
	"fence/step": true, "fence/steps-batch": true, "fence/tx-step": true, "fence/finish": true,
	"fence/finish-batch": true, "fence/park": true, "fence/stream": true, "fence/complete-intent": true,
	"fence/dead-letter": true, "fence/claim-stray": true, "fence/requeue-stray": true,
	"finish/synchronous": true, "finish/synchronous-batch": true, "finish/batch-wakes-parent": true,
	"shutdown/hand-back": true, "sleep/recorded-wake": true,
	"commit/error-to-all": true, "hub/outcome": true, "start/batch-first-wins": true, "step/recorded-not-error": true,
	"queue/global": true, "queue/worker": true, "queue/partition": true, "queue/rate": true,
	"queue/dedup": true, "queue/dedup-ignored": true,
	"notify/queue": true, "notify/queue-tx": true, "notify/message": true, "notify/message-parked": true, "notify/event": true,
	"schedule/tick-once": true, "message/consume-once-filter": true, "message/consume-once-update": true,
	"deadletter/limit": true, "deadletter/count": true, "intent/record": true, "intent/resolve": true,
	"step/idempotency-key": true, "step/idempotency-key-retry": true, "txstep/same-transaction": true,
	"lease/own-pool": true, "lease/takeover": true, "lease/live-owner": true, "lease/heartbeat": true,
}
