package errs

import "errors"

// The engine-wide errors the services need.
var (
	// WorkflowConflict is durable.ErrWorkflowConflict.
	WorkflowConflict = errors.New("durable: workflow ID already used by another workflow")
	// NotRegistered is durable.ErrNotRegistered.
	NotRegistered = errors.New("durable: workflow not registered")
	// Shutdown is durable.ErrShutdown.
	Shutdown = errors.New("durable: engine shutting down")
	// InvalidArgument is durable.ErrInvalidArgument.
	InvalidArgument = errors.New("durable: invalid argument")
	// Cancelled is durable.ErrCancelled.
	Cancelled = errors.New("durable: workflow cancelled")
	// Fenced is durable.ErrFenced.
	Fenced = errors.New("durable: executor no longer owns the workflow")
)
