package proctest

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// Main is the TestMain of a package whose code starts its own binary again
// as a child process (the examples' workers and replicas), marking the
// child with the environment variable env. In the test binary started that
// way, the child's entry point runs instead of the tests, and the process
// exits with its code; otherwise the tests run.
func Main(m *testing.M, env string, child func() int) {
	if os.Getenv(env) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// MainArgs is Main for a child that takes command-line arguments: ArgsEnv
// passes them in env (a test binary's own arguments are its test flags).
// A child whose env does not decode exits with code 2, as for a usage
// error.
func MainArgs(m *testing.M, env string, child func(args []string) int) {
	Main(m, env, func() int {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(env)), &args); err != nil {
			fmt.Fprintf(os.Stderr, "proctest: bad %s: %v\n", env, err)
			return 2
		}
		return child(args)
	})
}

// ArgsEnv returns the environment entry that hands args to a child whose
// TestMain is MainArgs(m, env, ...).
func ArgsEnv(env string, args ...string) string {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err) // a []string always encodes
	}
	return env + "=" + string(b)
}
