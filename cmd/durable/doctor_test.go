package main

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestDoctor: durable doctor says so and exits 0 on a healthy install;
// with an executor that died owning a run, it reports it (text and JSON)
// and exits 3.
func TestDoctor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(e *durable.Engine) {})
	require.Contains(t, e.ok("doctor"), "no problem found in schema "+e.schema)

	s := pgx.Identifier{e.schema}.Sanitize()
	_, err := e.pool.Exec(ctxT(t), `INSERT INTO `+s+`.executors (id, incarnation, app_version, hostname, pid, lease_expires_at)
			VALUES ('ghost', 'i', 'old', 'gone-host', 4242, now() - interval '1 hour');
		INSERT INTO `+s+`.workflows (id, name, status, app_version, executor_id) VALUES ('haunted', 'legacy', 'pending', 'old', 'ghost')`)
	require.NoError(t, err)
	r := e.run("doctor")
	require.Equal(t, exitProblems, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "CRITICAL  dead_executor  ghost\n")
	require.Contains(t, r.stdout, "what to do: start an executor of AppVersion old")
	require.Empty(t, r.stderr)

	r = e.run("doctor", "--json")
	require.Equal(t, exitProblems, r.code, r.stderr)
	var report durable.DoctorReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	require.Equal(t, e.schema, report.Schema)
	var found []durable.Finding
	for _, f := range report.Findings {
		if f.Check == durable.CheckDeadExecutor {
			found = append(found, f)
		}
	}
	require.Len(t, found, 1, "%+v", report.Findings)
	require.Equal(t, []any{durable.SeverityCritical, "ghost"}, []any{found[0].Severity, found[0].Subject})
	require.NotEmpty(t, found[0].Advice)
}
