//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/durable-go/durable/examples/internal/demotest"
	"github.com/durable-go/durable/internal/proctest"
)

// envArgs makes the test binary run cli with the arguments proctest.ArgsEnv
// put in it, as the example's binary would.
const envArgs = "BOOKING_TEST_ARGS"

func TestMain(m *testing.M) {
	self = func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), proctest.ArgsEnv(envArgs, args...))
		return cmd
	}
	proctest.MainArgs(m, envArgs, func(args []string) int { return cli(context.Background(), os.Stdout, args) })
}

// TestBooking runs the saga as the README does: b-1 books, b-2 is refused
// by the airline and compensated.
func TestBooking(t *testing.T) {
	demotest.NeedDatabase(t)
	var out strings.Builder
	if code := cli(context.Background(), &out, []string{"-schema", "booking_test"}); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "\nOK: ") {
		t.Fatal("no OK verdict")
	}
}

// TestBookingCrashInUndo: the process running the sagas is SIGKILLed
// inside the refund (the provider took it, its step is not recorded); a
// new process finishes the compensation: the refund is made again under
// the same idempotency key (the provider dedupes it: one refund, two
// calls) and the seat is released.
func TestBookingCrashInUndo(t *testing.T) {
	demotest.NeedDatabase(t)
	var out proctest.Buffer
	if code := cli(context.Background(), &out, []string{"-schema", "booking_crash_test", "-crash-in-undo"}); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "\nOK: b-2 was refunded and its seat released, once each (the refund's key got 2 call(s))") {
		t.Fatal("no OK verdict")
	}
}
