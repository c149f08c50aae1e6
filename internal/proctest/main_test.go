package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const envChild = "PROCTEST_TEST_CHILD"

// The test binary is its own child: it prints its arguments and exits 3.
func TestMain(m *testing.M) {
	MainArgs(m, envChild, func(args []string) int {
		fmt.Println(strings.Join(args, "|"))
		return 3
	})
}

// TestMainRunsChild: a test binary started with ArgsEnv runs the child
// with those arguments and exits with its code, running no test; one
// started with an environment that does not decode exits 2.
func TestMainRunsChild(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ArgsEnv(envChild, "-schema", "a b", ""))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v, want exit 3", err)
	}
	if string(out) != "-schema|a b|\n" {
		t.Fatalf("child printed %q", out)
	}

	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=not json")
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("child with a bad environment: %v, want exit 2", err)
	}
}
