package main

// ciSet names the mutants CI runs (scripts/test, flag -ci): a sample of
// the guarantees the README lists, one mutant of each family (fencing of
// the batched step and finish and of the park, synchronous finishes,
// handing runs back, queue limits and fair sharing, debounce, pushed
// wake-ups, schedules' one tick, messages consumed once, transaction
// steps, leases). Each costs CI a build of its test binary and its tests,
// about 15 s of the two cores: CI must stay well under 15 minutes.
// scripts/mutants runs every mutant (the other fences, the twins, the
// typed statements' guards, the services' mechanics, the edges), and a
// change to a mechanism runs its own with -run before it lands.
var ciSet = map[string]bool{
	"fence/steps-batch": true, "fence/finish-batch": true, "fence/park": true,
	"finish/synchronous": true, "shutdown/hand-back": true,
	"queue/global": true, "queue/fair-share": true, "debounce/merge-lock": true,
	"notify/queue": true, "schedule/tick-once": true, "message/consume-once-update": true,
	"txstep/same-transaction": true, "lease/takeover": true,
}
