//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/examples/internal/demotest"
	"github.com/durable-go/durable/internal/proctest"
)

// envArgs makes the test binary run cli with the arguments proctest.ArgsEnv
// put in it, as the example's binary would.
const envArgs = "APPROVAL_TEST_ARGS"

func TestMain(m *testing.M) {
	proctest.MainArgs(m, envArgs, func(args []string) int { return cli(context.Background(), os.Stdout, args) })
}

// startCLI runs the example as a child process.
func startCLI(t *testing.T, out *proctest.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), proctest.ArgsEnv(envArgs, args...))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApprovalAcrossRestart starts the agent, SIGKILLs it while the refund
// waits for approval, starts it again, approves from another process, and
// checks the refund was issued once.
func TestApprovalAcrossRestart(t *testing.T) {
	demotest.NeedDatabase(t)
	ctx := context.Background()
	const schema = "approval_test"
	var out proctest.Buffer
	defer func() { t.Log("\n" + out.String()) }()
	if code := cli(ctx, &out, []string{"-schema", schema, "reset"}); code != 0 {
		t.Fatalf("reset: exit %d", code)
	}
	agentArgs := []string{"-schema", schema, "agent", "-ticket", "ticket-1"}
	a1 := startCLI(t, &out, agentArgs...)
	waitFor(t, "the first agent to ask for approval", func() bool { return strings.Contains(out.String(), "approve ticket-1 call_1_0") })
	if err := a1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a1.Wait()
	out.Write([]byte("[test] SIGKILLed the agent process while it waited for approval\n"))

	// The decision can be sent while no agent runs; here it is sent after
	// the restart, once the new process waits again.
	a2 := startCLI(t, &out, agentArgs...)
	waitFor(t, "the restarted agent to wait again", func() bool {
		return strings.Count(out.String(), "approve ticket-1 call_1_0") == 2
	})
	var cliOut proctest.Buffer
	if code := cli(ctx, &cliOut, []string{"-schema", schema, "approve", "ticket-1", "call_1_0"}); code != 0 {
		t.Fatalf("approve: exit %d: %s", code, cliOut.String())
	}
	out.Write([]byte("[test] " + cliOut.String()))
	done := make(chan error, 1)
	go func() { done <- a2.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = a2.Process.Kill()
		t.Fatal("the agent did not finish after the approval")
	}
	for _, want := range []string{"finished (completed): Done. Tool said: refund rf_1 of 49.99 EUR issued", "refunds issued: 1 (provider calls: 1)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}
	// A second decision is refused: the call is no longer pending.
	if code := cli(ctx, &cliOut, []string{"-schema", schema, "deny", "ticket-1", "call_1_0"}); code != 1 {
		t.Fatalf("a second decision: exit %d, want 1", code)
	}
}

// TestDeny denies the refund from another process: the model is told why,
// and nothing is refunded.
func TestDeny(t *testing.T) {
	demotest.NeedDatabase(t)
	ctx := context.Background()
	const schema = "approval_test_deny"
	var out proctest.Buffer
	defer func() { t.Log("\n" + out.String()) }()
	if code := cli(ctx, &out, []string{"-schema", schema, "reset"}); code != 0 {
		t.Fatalf("reset: exit %d", code)
	}
	a := startCLI(t, &out, "-schema", schema, "agent", "-ticket", "ticket-2")
	waitFor(t, "the agent to ask for approval", func() bool { return strings.Contains(out.String(), "deny ticket-2 call_1_0") })
	var pend proctest.Buffer
	if code := cli(ctx, &pend, []string{"-schema", schema, "pending", "ticket-2"}); code != 0 || !strings.HasPrefix(pend.String(), "call_1_0 refund ") {
		t.Fatalf("pending: exit %d: %q", code, pend.String())
	}
	if code := cli(ctx, &out, []string{"-schema", schema, "deny", "ticket-2", "call_1_0", "over the limit"}); code != 0 {
		t.Fatalf("deny: exit %d", code)
	}
	kill := time.AfterFunc(30*time.Second, func() { _ = a.Process.Kill() })
	defer kill.Stop()
	if err := a.Wait(); err != nil {
		t.Fatalf("agent: %v", err)
	}
	for _, want := range []string{"Reason: over the limit", "refunds issued: 0 (provider calls: 0)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}
}
