package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

var checkApp struct {
	once sync.Once
	path string
	err  error
}

// checkAppBin builds testdata/checkapp once for the package's tests.
func checkAppBin(t *testing.T) string {
	t.Helper()
	checkApp.once.Do(func() {
		checkApp.path = filepath.Join(filepath.Dir(bin), "checkapp")
		out, err := exec.Command("go", "build", "-o", checkApp.path, "./testdata/checkapp").CombinedOutput()
		if err != nil {
			checkApp.err = errors.New(string(out))
		}
	})
	require.NoError(t, checkApp.err)
	return checkApp.path
}

// TestCheckCommand: `durable check -- PROGRAM` runs the program with the
// check's options in its environment and prints what the check of its
// build found: the runs a renamed step would stop (exit status 1), none
// for a build with the same steps (0). `durable history export` writes a
// history that durable.ReadHistory reads.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	var order *durable.Workflow[int, int]
	e := newEnv(t, func(eng *durable.Engine) {
		order = durable.Register(eng, "order", func(wctx durable.Context, n int) (int, error) {
			for _, name := range []string{"reserve", "charge"} {
				if _, err := durable.Step(wctx, name, func(context.Context) (int, error) { return n, nil }, nil); err != nil {
					return 0, err
				}
			}
			return 0, durable.Sleep(wctx, time.Hour)
		}, nil)
	})
	ctx := ctxT(t)
	for _, id := range []string{"order-1", "order-2"} {
		_, err := order.Start(ctx, 1, &durable.StartOpts{ID: id})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		runs, _, err := e.eng.ListWorkflows(ctx, &durable.ListParams{Statuses: []durable.Status{durable.StatusPending}})
		require.NoError(t, err)
		return len(runs) == 2 && runs[0].Executor == "" && runs[1].Executor == ""
	}, 30*time.Second, 5*time.Millisecond)
	app := checkAppBin(t)

	check := func(build string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"check"}, args...)...)
		cmd.Env = append(os.Environ(), "CHECKAPP_SCHEMA="+e.schema, "CHECKAPP_BUILD="+build)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return result{out.String(), errb.String(), code}
	}

	r := check("renamed", "--", app)
	require.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "checked 2 in-flight runs of app version v1: the build would stop 2")
	for _, id := range []string{"order-1", "order-2"} {
		require.Regexp(t, id+` +order +v1 +1 +nondeterminism +recorded "charge", the build calls "charge-card"`, r.stdout)
	}
	require.Contains(t, r.stderr, "checkapp: starting") // the program's own output goes to stderr
	require.Contains(t, r.stderr, "durable: check: the build would stop in-flight runs")

	r = check("renamed", "--json", "--workflow", "order,other", "--app-version", "*", "--", app)
	require.Equal(t, 1, r.code, r.stderr)
	var rep durable.CheckReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, 2, rep.Checked)
	require.Equal(t, []string{"order", "other"}, rep.Workflows)
	require.Empty(t, rep.AppVersions) // all of them
	require.Len(t, rep.Problems, 2)
	require.Equal(t, durable.ProblemNonDeterminism, rep.Problems[0].Kind)
	require.Equal(t, "charge-card", rep.Problems[0].Called)

	r = check("same", "--", app)
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "checked 2 in-flight runs of app version v1: the build resumes them all")

	// A program that does not call durable.CheckFromEnv, or no program.
	r = check("same", "--", "true")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "printed no check report")
	r = check("same")
	require.Equal(t, 2, r.code)

	out := e.ok("history", "export", "order-1")
	h, err := durable.ReadHistory(strings.NewReader(out))
	require.NoError(t, err)
	require.Equal(t, "order", h.Workflow)
	require.Equal(t, "v1", h.AppVersion)
	require.Len(t, h.Steps, 3)
	require.Equal(t, "charge", h.Steps[1].Name)
	r = e.run("history", "import", "order-1")
	require.Equal(t, 2, r.code)
}
