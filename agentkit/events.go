package agentkit

import (
	"context"
	"iter"

	"github.com/durable-go/durable"
)

// EventsKey is the key of a run's event stream (see [Events]).
const EventsKey = "agentkit.events"

// EventType is the kind of an [Event].
type EventType string

// Event types. Lifecycle events are written by the loop's workflow code:
// exactly once, in order, also across crashes. Model-attempt and delta
// events are written from inside the model step: at least once per attempt.
const (
	EventRunStarted       EventType = "run_started"
	EventTurnStarted      EventType = "turn_started"
	EventModelAttempt     EventType = "model_attempt" // a model call (re)starts: drop the turn's deltas seen so far
	EventDelta            EventType = "delta"         // a streamed fragment (Delta)
	EventAssistant        EventType = "assistant"     // the turn's recorded answer (Message, Usage)
	EventToolCalled       EventType = "tool_called"   // Call
	EventToolResult       EventType = "tool_result"   // Call, Result, IsError
	EventApprovalPending  EventType = "approval_pending"
	EventApprovalResolved EventType = "approval_resolved"
	EventCompacted        EventType = "compacted" // the history was summarised before continuing as a new run
	EventDone             EventType = "done"      // Outcome, Text (the final answer), Usage, NextRunID
)

// Event is one entry of a run's event stream. Only the fields of its type
// are set.
type Event struct {
	Type      EventType        `json:"type"`
	Turn      int              `json:"turn,omitempty"`
	Attempt   int              `json:"attempt,omitempty"`
	Delta     *Delta           `json:"delta,omitempty"`
	Message   *Message         `json:"message,omitempty"`
	Call      *ToolCall        `json:"call,omitempty"`
	Result    string           `json:"result,omitempty"`
	IsError   bool             `json:"is_error,omitempty"`
	Approval  *PendingApproval `json:"approval,omitempty"`
	Usage     *Usage           `json:"usage,omitempty"`
	Outcome   Outcome          `json:"outcome,omitempty"`
	Text      string           `json:"text,omitempty"`
	NextRunID string           `json:"next_run_id,omitempty"`
}

// Events follows the event stream of run runID from offset from: entries
// as they are written, ending after the run's last one. A UI that lost its
// connection re-joins with the offset after the last entry it saw. Only
// agents with AgentConfig.Stream write events. A run that continued as a
// new run ends with a done event naming the next run (NextRunID).
func Events(ctx context.Context, e *durable.Engine, runID string, from int64) iter.Seq2[durable.StreamEntry[Event], error] {
	return durable.StreamRead[Event](ctx, e, runID, EventsKey, from)
}

// Transcript folds events into what a UI shows: per turn, the text of the
// latest model attempt (deltas of an attempt that was cut short and
// retried are dropped), replaced by the recorded answer once it comes.
type Transcript struct {
	Turns map[int]string
	Done  *Event
}

// Apply folds one event into t.
func (t *Transcript) Apply(ev Event) {
	if t.Turns == nil {
		t.Turns = map[int]string{}
	}
	switch ev.Type {
	case EventModelAttempt:
		t.Turns[ev.Turn] = ""
	case EventDelta:
		if ev.Delta != nil && ev.Delta.Type == DeltaText {
			t.Turns[ev.Turn] += ev.Delta.Text
		}
	case EventAssistant:
		if ev.Message != nil {
			t.Turns[ev.Turn] = ev.Message.Text()
		}
	case EventDone:
		e := ev
		t.Done = &e
	}
}
