// Package pgtest holds test helpers for running tests against a real
// PostgreSQL server.
//
// It is for tests only: import it from _test.go files (and test-support
// code), never from library code. It must not import the root package
// github.com/durable-go/durable, so that the root package's own tests can use
// it without an import cycle.
//
// Typical use:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		pool := pgtest.Pool(t)
//		schema := pgtest.Schema(t)
//		...
//	}
//
// Under Main, Pool is one pool per URL shared by every test of the process,
// and Reused hands out schemas prepared once (sysdbtest.Migrated: migrated)
// and emptied between tests: on a virtual machine a new server connection
// costs tens of milliseconds of server CPU and a migrated schema half a
// second, which is most of what the tests cost the server. A test must
// leave no session state on the shared pool's connections (use SET LOCAL;
// LISTEN on a connection of its own). Run with PGTEST_STATS=1 to see how
// many schemas were prepared, reused and dropped.
//
// The server comes from DATABASE_URL. When it is unset, Main starts a private
// throwaway cluster with scripts/pg for the duration of the test binary.
// scripts/test and scripts/with-postgres start one cluster shared by all
// packages and export DATABASE_URL and DURABLE_PG_DIR.
//
// Restart, Stop and Start inject server faults; they only work on a cluster
// started by scripts/pg (DURABLE_PG_DIR set) and skip the test otherwise.
// Note that under scripts/test every package shares one cluster and packages
// run in parallel, so a fault injected by one package is seen by the others.
package pgtest
