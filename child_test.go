package durable_test

// maybeRunChild is replaced by the crash tests' child entry point.
func maybeRunChild() bool { return runChildIfAsked() }
