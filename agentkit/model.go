package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Model generates the next assistant message of a conversation. It is the
// provider-neutral interface the agent loop calls, once per turn, inside a
// recorded step; adapters for SDKs (openai-go, anthropic-sdk-go,
// langchaingo, eino) are a few lines each. Adapters must not retry on
// their own: the step's retry policy does, and a [*ModelError] with
// Retryable false stops it.
type Model interface {
	Generate(ctx context.Context, req *Request) (*Response, error)
}

// StreamingModel is a [Model] that can also stream. GenerateStream calls
// sink with each delta as it arrives and returns the whole final
// response, which is what the agent records. The agent uses it when
// AgentConfig.Stream is set.
type StreamingModel interface {
	Model
	GenerateStream(ctx context.Context, req *Request, sink func(Delta)) (*Response, error)
}

// ModelFunc adapts a function to [Model].
type ModelFunc func(ctx context.Context, req *Request) (*Response, error)

// Generate calls f.
func (f ModelFunc) Generate(ctx context.Context, req *Request) (*Response, error) { return f(ctx, req) }

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Request is one model call.
type Request struct {
	Messages []Message
	Tools    []ToolSpec
	// ToolChoice is "", "auto", "none", "required" or a tool name.
	ToolChoice string
	// MaxOutputTokens bounds the response; 0 leaves the provider's default.
	MaxOutputTokens int
	// Temperature is the sampling temperature; nil leaves the default.
	Temperature *float64
	// ResponseFormat, when set, asks for a final answer that is JSON
	// matching a schema (AgentConfig.Output).
	ResponseFormat *ResponseFormat
}

// ResponseFormat is the JSON schema a model's answer must match.
type ResponseFormat struct {
	Name   string          // letters, digits, '_' and '-'
	Schema json.RawMessage // a JSON schema
}

// FinishReason says why the model stopped.
type FinishReason string

// Finish reasons. Providers' other values are kept as they come.
const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
)

// Response is a model's answer: the part of a model call the agent
// records. It holds no request data, so recorded history grows linearly.
type Response struct {
	Message Message      `json:"message"`
	Usage   Usage        `json:"usage"`
	Finish  FinishReason `json:"finish,omitempty"`
	Model   string       `json:"model,omitempty"` // as reported by the provider
	ID      string       `json:"id,omitempty"`    // the provider's response ID
}

// DeltaType is the kind of a [Delta].
type DeltaType string

// Delta types.
const (
	DeltaText      DeltaType = "text"
	DeltaReasoning DeltaType = "reasoning"
	DeltaToolCall  DeltaType = "tool_call" // a fragment of a tool call: ID and Name first, then Arguments pieces
)

// Delta is one streamed fragment of a response.
type Delta struct {
	Type DeltaType `json:"type"`
	Text string    `json:"text,omitempty"`
	// Index is the tool call's position in the response (DeltaToolCall).
	Index     int    `json:"index,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// ErrMalformedResponse: the provider's answer could not be read (bad JSON,
// a stream cut short, no choices). It is retryable.
var ErrMalformedResponse = errors.New("agentkit: malformed model response")

// ModelError is a failed model call, classified for retries.
type ModelError struct {
	StatusCode int  // HTTP status, 0 when no response came
	Retryable  bool // 408, 409, 429, 5xx, timeouts, network errors, malformed answers
	RetryAfter time.Duration
	Code       string // the provider's error code or type, if any
	Message    string
	Err        error // the underlying error, if any
}

func (e *ModelError) Error() string {
	s := "agentkit: model call failed"
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" with HTTP %d", e.StatusCode)
	}
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ModelError) Unwrap() error { return e.Err }

// ClassifyHTTP says whether an HTTP error status is worth retrying and how
// long the provider asks to wait (from Retry-After, in seconds or as an
// HTTP date). 408, 409, 429 and 5xx are retryable; other 4xx are not.
func ClassifyHTTP(status int, h http.Header) (retryable bool, retryAfter time.Duration) {
	retryable = status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			retryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			retryAfter = max(time.Until(t), 0)
		}
	}
	return retryable, retryAfter
}
