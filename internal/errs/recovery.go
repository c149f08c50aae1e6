package errs

import "errors"

// NotRegistered is durable.ErrNotRegistered: no workflow is registered
// under that name in this binary.
var NotRegistered = errors.New("durable: workflow not registered")
