package errs

import "errors"

// ScheduleNotFound is durable.ErrScheduleNotFound.
var ScheduleNotFound = errors.New("durable: schedule not found")
