package main

// ciSet names the mutants CI runs (scripts/test, flag -ci): a sample of
// the guarantees the README lists (fencing of the batched step and
// finish, synchronous finishes, queue limits, debounce, pushed wake-ups,
// transaction steps, leases). Each costs CI a build of its test binary and its tests,
// about 15 s of the two cores: CI must stay well under 15 minutes.
// scripts/mutants runs every mutant (the other fences, the twins, the
// typed statements' guards, the services' mechanics, the edges), and a
// change to a mechanism runs its own with -run before it lands.
var ciSet = map[string]bool{
	"fence/steps-batch": true, "fence/finish-batch": true, "finish/synchronous": true,
	"queue/global": true, "debounce/merge-lock": true, "notify/queue": true,
	"txstep/same-transaction": true, "lease/takeover": true,
}
