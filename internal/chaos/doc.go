// Package chaos is the chaos test of durable: three executor processes run a
// mixed workload (plain and transaction steps, queues under limits, sleeps,
// messages, child workflows, scheduled ticks, agent runs against a scripted
// model server) while the test SIGKILLs and restarts them at random, stops
// Postgres hard, and cancels and later resumes some runs as an operator
// would, then computes a verdict from what the database and an external
// ledger recorded: nothing lost, nothing done twice. The
// executors of the first slot run with Config.DeferStepCheckpoints, so a
// run moves between executors that defer step checkpoints and executors
// that do not.
//
// It has no code outside its tests. `go test ./internal/chaos` runs the
// short variant (every scripts/test run); DURABLE_CHAOS=long runs the long
// one, DURABLE_CHAOS_DURATION (a Go duration) sets the chaos phase's length
// and DURABLE_CHAOS_SEED replays a run: the seed is logged at the start.
package chaos
