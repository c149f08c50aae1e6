// Package errs holds the sentinel errors that internal packages return and
// the root package exports under its own names (durable.ErrX = errs.X), so
// errors.Is matches either.
package errs

import "errors"

// QueueNotFound is durable.ErrQueueNotFound: no queue of that name is
// declared in the database.
var QueueNotFound = errors.New("durable: queue not found")
