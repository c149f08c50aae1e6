// Package errs holds the sentinel errors that internal packages return
// and the root package exports: each exported ErrX of the root package is
// the value defined here, so errors.Is matches it whichever side made the
// error. One file per area; the ones of the whole engine are here.
package errs

import "errors"

var (
	// Shutdown: the engine is shutting down (durable.ErrShutdown).
	Shutdown = errors.New("durable: engine shutting down")
	// Cancelled: the workflow was cancelled (durable.ErrCancelled).
	Cancelled = errors.New("durable: workflow cancelled")
	// Fenced: this executor lost ownership of the run (durable.ErrFenced).
	Fenced = errors.New("durable: executor no longer owns the workflow")
)
