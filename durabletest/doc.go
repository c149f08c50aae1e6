// Package durabletest helps test code built on durable, as httptest does
// for HTTP handlers. It gives a test:
//
//   - a Postgres: [URL], [Pool] and [Schema] (a schema per test, dropped
//     at its end) on DATABASE_URL, or on a private cluster started once
//     per test binary when the PostgreSQL server binaries are installed
//     (removed by [Main] at exit); without either the test is skipped, or
//     fails with DURABLE_TEST_REQUIRE_DB=1;
//   - an engine on its own schema with a clock the test moves ([New],
//     [Env], [Clock]): sleeps, timeouts, deadlines, retries' backoff and
//     schedules follow it, so a workflow that sleeps two days is tested in
//     milliseconds;
//   - crash injection for the test's own workflows ([CrashMatrix]): the
//     workflow is stopped at each step boundary as a crash would stop it,
//     resumed by a new engine, and checked to reach the same result with
//     each effect once; the report names the first boundary where replay
//     diverged.
//
// docs/testing.md in the repository walks through them.
package durabletest
