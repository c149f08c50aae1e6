package errs

import "errors"

// StreamClosed: a write to a closed stream (durable.ErrStreamClosed).
var StreamClosed = errors.New("durable: stream closed")
