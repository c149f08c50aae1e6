package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/durable-go/durable/internal/errs"
)

// Sentinel errors. Match them with [errors.Is]; most are also matched by the
// typed errors below and by errors read back from the database.
var (
	// ErrWorkflowNotFound: no workflow with that ID exists.
	ErrWorkflowNotFound = errors.New("durable: workflow not found")
	// ErrWorkflowConflict: the workflow ID is taken by a run of another
	// workflow, or by a run of the same workflow with another input
	// (then [ErrInputMismatch] matches too).
	ErrWorkflowConflict = errs.WorkflowConflict
	// ErrInputMismatch: a start reused the workflow ID of a run whose
	// recorded input differs from the one given. See [StartOpts].ID.
	ErrInputMismatch = errors.New("durable: workflow ID already used with a different input")
	// ErrNotRegistered: no workflow is registered under that name in this binary.
	ErrNotRegistered = errs.NotRegistered
	// ErrNotLaunched: the engine must be launched before workflows start.
	ErrNotLaunched = errors.New("durable: engine not launched")
	// ErrShutdown: the engine is shutting down; the run stays pending and is
	// resumed by the next executor.
	ErrShutdown = errs.Shutdown
	// ErrPermanent marks an error that must not be retried. See [Permanent].
	ErrPermanent = errors.New("durable: permanent failure")
	// ErrCancelled: the workflow was cancelled.
	ErrCancelled = errs.Cancelled
	// ErrFenced: this executor lost ownership of the run to another one; its
	// write was rejected and the run stopped here.
	ErrFenced = errs.Fenced
	// ErrNonDeterministic: replay met a step other than the one recorded.
	ErrNonDeterministic = errors.New("durable: non-deterministic workflow")
	// ErrPayloadTooLarge: an encoded input or output exceeds Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("durable: payload too large")
	// ErrDecode: a stored payload cannot be decoded into the Go type asked for.
	ErrDecode = errors.New("durable: cannot decode stored payload")
	// ErrPanic: workflow or step code panicked.
	ErrPanic = errors.New("durable: panic in user code")
	// ErrDeadLetter: the run exceeded its recovery attempts and was moved to
	// the dead-letter status.
	ErrDeadLetter = errors.New("durable: workflow dead-lettered")
	// ErrInvalidArgument: a call got a bad argument; the message says which.
	ErrInvalidArgument = errs.InvalidArgument
	// ErrRunAgain is returned by an [IntentStep] resolver to run the effect again.
	ErrRunAgain = errors.New("durable: run the effect again")
	// ErrSchemaOutdated: the database schema is older than this library and
	// Config.SkipMigrate forbids migrating it.
	ErrSchemaOutdated = errors.New("durable: database schema is out of date")
	// ErrEventNotSet: the run of an [OnEvent] case finished without
	// setting its event (the case's Value).
	ErrEventNotSet = errors.New("durable: the run finished without setting the event")
)

// Permanent wraps err so that step retries stop at once. The result matches
// both err and [ErrPermanent] with errors.Is.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// ConflictError reports a workflow ID already used by a run of another
// workflow, or (InputDiffers) by a run of the same workflow started with
// another input. It matches [ErrWorkflowConflict], and [ErrInputMismatch]
// when InputDiffers.
type ConflictError struct {
	WorkflowID   string
	Existing     string // name of the recorded run
	Requested    string // name asked for
	InputDiffers bool   // same workflow, but the recorded input is not the one given
}

func (e *ConflictError) Error() string {
	if e.InputDiffers {
		return fmt.Sprintf("durable: workflow ID %q is already used by a run of %q with a different input: "+
			"reuse an ID only with the same input, or set AcceptDifferentInput to get the existing run", e.WorkflowID, e.Existing)
	}
	return fmt.Sprintf("durable: workflow ID %q is already used by workflow %q (requested %q)", e.WorkflowID, e.Existing, e.Requested)
}
func (e *ConflictError) Is(target error) bool {
	return target == ErrWorkflowConflict || (e.InputDiffers && target == ErrInputMismatch)
}

// NonDeterminismError reports a replay that called a step other than the
// one recorded at the same position. The run is stopped with status error.
type NonDeterminismError struct {
	WorkflowID string
	Pos        int
	Recorded   string // step name in the database
	Called     string // step name the code called
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("durable: non-deterministic workflow %q: step %d is recorded as %q but the code called %q",
		e.WorkflowID, e.Pos, e.Recorded, e.Called)
}
func (e *NonDeterminismError) Is(target error) bool { return target == ErrNonDeterministic }

// PanicError is a panic recovered from workflow or step code.
type PanicError struct {
	Value string
	Stack string
}

func (e *PanicError) Error() string        { return "durable: panic: " + e.Value }
func (e *PanicError) Is(target error) bool { return target == ErrPanic || target == ErrPermanent }

// PayloadTooLargeError reports an encoded payload over the configured limit.
type PayloadTooLargeError struct {
	What  string // "input of workflow \"x\"", "output of step \"y\"", ...
	Size  int
	Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("durable: %s is %d bytes encoded, over the limit of %d (Config.MaxPayloadBytes); store large data by reference", e.What, e.Size, e.Limit)
}
func (e *PayloadTooLargeError) Is(target error) bool {
	return target == ErrPayloadTooLarge || target == ErrPermanent
}

// DecodeError reports a stored payload that cannot be decoded.
type DecodeError struct {
	WorkflowID string
	What       string // "input", "output", "step 3 output", ...
	Err        error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("durable: workflow %q: cannot decode stored %s: %v", e.WorkflowID, e.What, e.Err)
}
func (e *DecodeError) Unwrap() error        { return e.Err }
func (e *DecodeError) Is(target error) bool { return target == ErrDecode || target == ErrPermanent }

// StepError is what a step returns to workflow code when it failed for good
// (permanent error or retries exhausted). Err is the recorded cause: the same
// value on the live path and on replay.
type StepError struct {
	WorkflowID string
	Step       string
	Pos        int
	Attempts   int
	Err        error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("durable: step %d %q of workflow %q failed after %d attempt(s): %v", e.Pos, e.Step, e.WorkflowID, e.Attempts, e.Err)
}
func (e *StepError) Unwrap() error { return e.Err }

// DeadLetterError is the error of a run moved to the dead-letter status.
type DeadLetterError struct {
	WorkflowID string
	Attempts   int
	Limit      int
}

func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("durable: workflow %q dead-lettered after %d recovery attempts (limit %d): its executor kept dying while running it",
		e.WorkflowID, e.Attempts, e.Limit)
}
func (e *DeadLetterError) Is(target error) bool { return target == ErrDeadLetter }

// RecordedError is an error read back from the database. Its Kind keeps the
// cause class, so errors.Is still matches [ErrPermanent], [ErrCancelled],
// [context.Canceled], [context.DeadlineExceeded], [ErrPanic],
// [ErrNonDeterministic] and the other sentinels after a restart.
type RecordedError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
}

func (e *RecordedError) Error() string { return e.Message }

// Is matches the sentinel of the recorded kind.
func (e *RecordedError) Is(target error) bool {
	switch e.Kind {
	case kindPermanent:
		return target == ErrPermanent
	case kindCancelled:
		return target == ErrCancelled || target == context.Canceled
	case kindDeadline:
		return target == context.DeadlineExceeded
	case kindPanic:
		return target == ErrPanic || target == ErrPermanent
	case kindNonDeterminism:
		return target == ErrNonDeterministic
	case kindDecode:
		return target == ErrDecode || target == ErrPermanent
	case kindTooLarge:
		return target == ErrPayloadTooLarge || target == ErrPermanent
	case kindDeadLetter:
		return target == ErrDeadLetter
	case kindNotRegistered:
		return target == ErrNotRegistered
	case kindCompensationFailed:
		return target == ErrCompensationFailed
	}
	return false
}

const (
	kindError              = "error"
	kindPermanent          = "permanent"
	kindCancelled          = "cancelled"
	kindDeadline           = "deadline"
	kindPanic              = "panic"
	kindNonDeterminism     = "nondeterminism"
	kindDecode             = "decode"
	kindTooLarge           = "payload_too_large"
	kindDeadLetter         = "dead_letter"
	kindNotRegistered      = "not_registered"
	kindCompensationFailed = "compensation_failed"
)

// classify returns the recorded kind of err. The order matters: the most
// specific class wins.
func classify(err error) string {
	var re *RecordedError
	switch {
	case errors.Is(err, ErrCompensationFailed):
		return kindCompensationFailed
	case errors.As(err, &re):
		return re.Kind
	case errors.Is(err, ErrNonDeterministic):
		return kindNonDeterminism
	case errors.Is(err, ErrPanic):
		return kindPanic
	case errors.Is(err, ErrDecode):
		return kindDecode
	case errors.Is(err, ErrPayloadTooLarge):
		return kindTooLarge
	case errors.Is(err, ErrDeadLetter):
		return kindDeadLetter
	case errors.Is(err, ErrNotRegistered):
		return kindNotRegistered
	case errors.Is(err, ErrCancelled), errors.Is(err, context.Canceled):
		return kindCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return kindDeadline
	case errors.Is(err, ErrPermanent):
		return kindPermanent
	}
	return kindError
}

// encodeError turns err into the stored envelope.
func encodeError(err error) []byte {
	rec := RecordedError{Kind: classify(err), Message: err.Error()}
	var pe *PanicError
	var re *RecordedError
	switch {
	case errors.As(err, &pe):
		rec.Stack = pe.Stack
	case errors.As(err, &re):
		rec.Stack = re.Stack
	}
	b, _ := json.Marshal(rec) // a struct of strings always encodes
	return b
}

// decodeError restores a stored envelope. A malformed envelope still gives
// an error carrying the raw text, never nil.
func decodeError(b []byte) error {
	if b == nil {
		return nil
	}
	var rec RecordedError
	if err := json.Unmarshal(b, &rec); err != nil || rec.Message == "" {
		// Valid UTF-8 only, so recording this error again stores the same text.
		return &RecordedError{Kind: kindError, Message: "durable: undecodable recorded error: " + strings.ToValidUTF8(string(b), "\uFFFD")}
	}
	return &rec
}
