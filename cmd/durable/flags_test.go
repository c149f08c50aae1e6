package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// exitCode runs cmd and returns its exit code, stdout and stderr.
func exitCode(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// TestGlobalFlagsBeforeCommand: the flags every command takes work before
// the command name as well as after it; a later one wins.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	t.Parallel()
	var wf *durable.Workflow[string, string]
	e := newEnv(t, func(eng *durable.Engine) {
		wf = durable.Register(eng, "echo", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, "x", &durable.StartOpts{ID: "before-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	durableCmd := func(args ...string) *exec.Cmd {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return exec.CommandContext(ctx, bin, args...)
	}

	code, out, errOut := exitCode(t, durableCmd("--schema", e.schema, "list"))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "before-1")

	// -database-url before the command, with no DATABASE_URL to fall back on.
	cmd := durableCmd("-database-url", os.Getenv("DATABASE_URL"), "-schema="+e.schema, "--json", "show", "before-1")
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	code, out, errOut = exitCode(t, cmd)
	require.Equal(t, 0, code, errOut)
	var shown struct {
		Run runJSON `json:"run"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, "before-1", shown.Run.ID)

	code, out, errOut = exitCode(t, durableCmd("--schema", "cli_no_such_schema", "show", "before-1", "--schema", e.schema))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "before-1")

	code, _, errOut = exitCode(t, durableCmd("--schema", e.schema))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "usage: durable")
	code, _, errOut = exitCode(t, durableCmd("--limit", "5", "list"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "flag provided but not defined: -limit")
}

// TestGoRunHelp: the command is a package of the root module, so
// "go run ./cmd/durable --help" works from the repository root (and
// "go install github.com/durable-go/durable/cmd/durable@version" resolves).
func TestGoRunHelp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, help := range []string{"--help", "-h", "help"} {
		cmd := exec.CommandContext(ctx, "go", "run", "./cmd/durable", help)
		cmd.Dir = "../.."
		code, out, errOut := exitCode(t, cmd)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "usage: durable")
		require.Contains(t, out, "migrate")
	}
}
