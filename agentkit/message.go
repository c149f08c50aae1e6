package agentkit

import (
	"encoding/json"
	"strings"
)

// Role is the author of a [Message].
type Role string

// Roles of messages. They map one to one onto the roles of the OpenAI and
// Anthropic APIs, langchaingo and eino (genkit calls the assistant "model").
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartType is the kind of a [Part].
type PartType string

// Part types.
const (
	PartText      PartType = "text"      // Text
	PartImageURL  PartType = "image_url" // URL (an https: or data: URL), MIME
	PartReasoning PartType = "reasoning" // Text; Data keeps a provider's signature, if any
)

// Part is one piece of a message's content. One struct for every kind
// (rather than an interface per kind) keeps recorded outputs plain JSON.
type Part struct {
	Type PartType `json:"type"`
	Text string   `json:"text,omitempty"`
	URL  string   `json:"url,omitempty"`
	MIME string   `json:"mime,omitempty"`
	// Ref points at content stored by reference (see [BlobStore]); the
	// model step loads it into Text before calling the model.
	Ref *BlobRef `json:"ref,omitempty"`
	// Data is provider-specific payload kept verbatim, such as the
	// signature of an Anthropic thinking block.
	Data json.RawMessage `json:"data,omitempty"`
}

// TextPart returns a text part.
func TextPart(text string) Part { return Part{Type: PartText, Text: text} }

// ImagePart returns an image part for an https: or data: URL.
func ImagePart(url string) Part { return Part{Type: PartImageURL, URL: url} }

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	// ID correlates the call with its result. The agent loop replaces an
	// ID that is empty, repeated within the run, longer than 64 bytes or
	// made of other characters than letters, digits, '_', '-' and '.' with
	// "t<turn>c<index>", deterministically, so it can name steps and keys.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON the model produced. A provider's arguments
	// that are not valid JSON are kept as a JSON string holding the text.
	Arguments json.RawMessage `json:"arguments"`
}

// Message is one message of a conversation.
type Message struct {
	Role  Role   `json:"role"`
	Parts []Part `json:"parts,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message.
	Name string `json:"name,omitempty"`
	// IsError marks a tool message that reports a failure to the model.
	IsError bool `json:"is_error,omitempty"`
}

// Text returns the concatenated text parts of m.
func (m Message) Text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// SystemMessage returns a system message with one text part.
func SystemMessage(text string) Message { return textMessage(RoleSystem, text) }

// UserMessage returns a user message with one text part.
func UserMessage(text string) Message { return textMessage(RoleUser, text) }

// AssistantMessage returns an assistant message with one text part.
func AssistantMessage(text string) Message { return textMessage(RoleAssistant, text) }

// ToolMessage returns the result of call callID of tool name.
func ToolMessage(callID, name, text string, isError bool) Message {
	m := textMessage(RoleTool, text)
	m.ToolCallID, m.Name, m.IsError = callID, name, isError
	return m
}

func textMessage(role Role, text string) Message {
	m := Message{Role: role}
	if text != "" {
		m.Parts = []Part{TextPart(text)}
	}
	return m
}

// Usage is what model calls consumed.
type Usage struct {
	InputTokens     int64 `json:"input_tokens,omitempty"`
	OutputTokens    int64 `json:"output_tokens,omitempty"`
	CacheReadTokens int64 `json:"cache_read_tokens,omitempty"` // part of InputTokens served from a prompt cache
	// CostMicros is the cost in millionths of the currency unit, as
	// reported by the provider or computed by AgentConfig.Pricing.
	CostMicros int64 `json:"cost_micros,omitempty"`
	// Requests counts model calls.
	Requests int64 `json:"requests,omitempty"`
}

// Tokens returns InputTokens + OutputTokens, the figure limited by
// Limits.MaxTokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:     u.InputTokens + v.InputTokens,
		OutputTokens:    u.OutputTokens + v.OutputTokens,
		CacheReadTokens: u.CacheReadTokens + v.CacheReadTokens,
		CostMicros:      u.CostMicros + v.CostMicros,
		Requests:        u.Requests + v.Requests,
	}
}

// PricingFunc computes the cost of one model response in millionths of
// the currency unit. It runs inside the model step, so its result is
// recorded with the response.
type PricingFunc func(model string, u Usage) int64

// PerMillionTokens prices input and output tokens at the given cost per
// million tokens, in millionths of the currency unit (a model at $3 per
// million input tokens and $15 per million output tokens is
// PerMillionTokens(3_000_000, 15_000_000)).
func PerMillionTokens(input, output int64) PricingFunc {
	return func(_ string, u Usage) int64 {
		return (u.InputTokens*input + u.OutputTokens*output) / 1_000_000
	}
}
