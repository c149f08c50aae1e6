package agentkit

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Defaults of [OpenAIConfig].
const (
	OpenAIBaseURLDefault = "https://api.openai.com/v1"
	OpenAITimeoutDefault = 2 * time.Minute
	// maxErrorBody bounds how much of an error body is read.
	maxErrorBody = 64 << 10
	// maxSSELine bounds one line of a stream.
	maxSSELine = 4 << 20
)

// OpenAIConfig configures [NewOpenAI].
type OpenAIConfig struct {
	// BaseURL is the API root; requests go to BaseURL + "/chat/completions".
	// Any OpenAI-compatible server works (vLLM, llama.cpp, Ollama, LiteLLM,
	// OpenRouter, Azure's compatible endpoint). Defaults to
	// OpenAIBaseURLDefault.
	BaseURL string
	// APIKey is sent as a bearer token when set. Defaults to none.
	APIKey string
	// Model is the model name sent with each request. Required.
	Model string
	// HTTPClient sends the requests. Defaults to a new http.Client.
	HTTPClient *http.Client
	// Timeout bounds each call, streaming included. Defaults to
	// OpenAITimeoutDefault.
	Timeout time.Duration
	// Headers are added to each request. Defaults to none.
	Headers map[string]string
	// ExtraBody fields are merged into each request body (for example
	// "seed" or a gateway's routing options). Defaults to none.
	ExtraBody map[string]any
}

// OpenAI is a [StreamingModel] over the Chat Completions API of OpenAI and
// compatible servers, in plain net/http. It never retries by itself: errors
// are [*ModelError] values classified for the step's retry policy.
type OpenAI struct {
	cfg    OpenAIConfig
	url    string
	client *http.Client
}

var _ StreamingModel = (*OpenAI)(nil)

// NewOpenAI returns a Chat Completions client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, errors.New("agentkit: OpenAIConfig.Model is empty")
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("agentkit: OpenAIConfig.Timeout is negative")
	}
	cfg.BaseURL = strings.TrimRight(cmp.Or(cfg.BaseURL, OpenAIBaseURLDefault), "/")
	cfg.Timeout = cmp.Or(cfg.Timeout, OpenAITimeoutDefault)
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	return &OpenAI{cfg: cfg, url: cfg.BaseURL + "/chat/completions", client: client}, nil
}

// Generate makes one non-streaming call.
func (m *OpenAI) Generate(ctx context.Context, req *Request) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	resp, err := m.post(ctx, req, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	return decodeCompletion(body)
}

// GenerateStream makes one streaming call (server-sent events), calling
// sink with each fragment, and returns the accumulated response.
func (m *OpenAI) GenerateStream(ctx context.Context, req *Request, sink func(Delta)) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	resp, err := m.post(ctx, req, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		// Some servers ignore "stream" and answer in one piece.
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, transportError(ctx, err)
		}
		out, err := decodeCompletion(body)
		if err == nil && sink != nil && out.Message.Text() != "" {
			sink(Delta{Type: DeltaText, Text: out.Message.Text()})
		}
		return out, err
	}
	out, err := readStream(resp.Body, sink)
	if err != nil && ctx.Err() != nil {
		return nil, transportError(ctx, err)
	}
	return out, err
}

func (m *OpenAI) post(ctx context.Context, req *Request, stream bool) (*http.Response, error) {
	body, err := m.encodeRequest(req, stream)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("agentkit: openai: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	if m.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+m.cfg.APIKey)
	}
	for k, v := range m.cfg.Headers {
		hreq.Header.Set(k, v)
	}
	resp, err := m.client.Do(hreq)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpError(resp.StatusCode, resp.Header, b)
	}
	return resp, nil
}

// transportError classifies an error without an HTTP status: timeouts and
// network failures are retryable.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &ModelError{Retryable: true, Code: "timeout", Message: "no complete answer before the timeout", Err: err}
	}
	return &ModelError{Retryable: true, Err: err}
}

func httpError(status int, h http.Header, body []byte) error {
	retryable, after := ClassifyHTTP(status, h)
	e := &ModelError{StatusCode: status, Retryable: retryable, RetryAfter: after}
	var eb struct {
		Error *wireError `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil {
		e.Message, e.Code = eb.Error.Message, eb.Error.code()
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 500 {
			e.Message = e.Message[:500] + "..."
		}
	}
	return e
}

// Wire types of the Chat Completions API.

type wireRequest struct {
	Model          string         `json:"model"`
	Messages       []wireMessage  `json:"messages"`
	Tools          []wireTool     `json:"tools,omitempty"`
	ToolChoice     any            `json:"tool_choice,omitempty"`
	MaxTokens      int            `json:"max_tokens,omitempty"`
	Temperature    *float64       `json:"temperature,omitempty"`
	Stream         bool           `json:"stream,omitempty"`
	StreamOptions  map[string]any `json:"stream_options,omitempty"`
	ResponseFormat any            `json:"response_format,omitempty"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wirePart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url,omitempty"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
	Cost *float64 `json:"cost,omitempty"` // gateways such as OpenRouter report it, in dollars
}

type wireError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

func (w *wireError) code() string {
	switch c := w.Code.(type) {
	case string:
		return c
	case float64:
		return fmt.Sprint(c)
	}
	return w.Type
}

type wireResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Refusal          string          `json:"refusal"`
			ToolCalls        []wireToolCall  `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
	Error *wireError `json:"error"`
}

type wireChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string        `json:"content"`
			ReasoningContent string         `json:"reasoning_content"`
			ToolCalls        []wireToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
	Error *wireError `json:"error"`
}

func (m *OpenAI) encodeRequest(req *Request, stream bool) ([]byte, error) {
	w := wireRequest{Model: m.cfg.Model, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature, Stream: stream}
	if stream {
		w.StreamOptions = map[string]any{"include_usage": true}
	}
	for _, msg := range req.Messages {
		wm, err := toWireMessage(msg)
		if err != nil {
			return nil, err
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	if f := req.ResponseFormat; f != nil {
		w.ResponseFormat = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema}}
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		w.ToolChoice = req.ToolChoice
	default:
		w.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": req.ToolChoice}}
	}
	b, err := json.Marshal(w)
	if err != nil || len(m.cfg.ExtraBody) == 0 {
		return b, err
	}
	var merged map[string]any
	if err := json.Unmarshal(b, &merged); err != nil {
		return nil, err
	}
	for k, v := range m.cfg.ExtraBody {
		merged[k] = v
	}
	return json.Marshal(merged)
}

func toWireMessage(m Message) (wireMessage, error) {
	w := wireMessage{Role: string(m.Role), ToolCallID: m.ToolCallID}
	switch m.Role {
	case RoleSystem, RoleTool:
		w.Content = m.Text()
	case RoleAssistant:
		if t := m.Text(); t != "" || len(m.ToolCalls) == 0 {
			w.Content = t
		}
		for _, tc := range m.ToolCalls {
			wc := wireToolCall{ID: tc.ID, Type: "function"}
			wc.Function.Name = tc.Name
			wc.Function.Arguments = argumentsToWire(tc.Arguments)
			w.ToolCalls = append(w.ToolCalls, wc)
		}
	case RoleUser:
		simple := true
		for _, p := range m.Parts {
			if p.Type != PartText {
				simple = false
			}
		}
		if simple {
			w.Content = m.Text()
			break
		}
		var parts []wirePart
		for _, p := range m.Parts {
			switch p.Type {
			case PartText:
				parts = append(parts, wirePart{Type: "text", Text: p.Text})
			case PartImageURL:
				wp := wirePart{Type: "image_url"}
				wp.ImageURL = &struct {
					URL string `json:"url"`
				}{p.URL}
				parts = append(parts, wp)
			}
		}
		w.Content = parts
	default:
		return w, fmt.Errorf("agentkit: openai: message role %q is not supported", m.Role)
	}
	return w, nil
}

// argumentsToWire turns recorded arguments back into the string the API
// carries: a JSON string holding non-JSON text gives that text back.
func argumentsToWire(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil && !json.Valid([]byte(s)) {
			return s
		}
	}
	return string(raw)
}

// argumentsFromWire keeps valid JSON as is; other text becomes a JSON
// string, so the recorded response always encodes.
func argumentsFromWire(s string) json.RawMessage {
	t := strings.TrimSpace(s)
	if t == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(s)
	return b
}

func decodeCompletion(body []byte) (*Response, error) {
	var w wireResponse
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, &ModelError{Retryable: true, Message: snippet(body), Err: fmt.Errorf("%w: %v", ErrMalformedResponse, err)}
	}
	if w.Error != nil {
		return nil, &ModelError{Retryable: true, Code: w.Error.code(), Message: w.Error.Message}
	}
	if len(w.Choices) == 0 {
		return nil, &ModelError{Retryable: true, Message: snippet(body), Err: fmt.Errorf("%w: no choices", ErrMalformedResponse)}
	}
	c := w.Choices[0]
	out := &Response{ID: w.ID, Model: w.Model, Finish: FinishReason(c.FinishReason), Message: Message{Role: RoleAssistant}}
	if c.Message.ReasoningContent != "" {
		out.Message.Parts = append(out.Message.Parts, Part{Type: PartReasoning, Text: c.Message.ReasoningContent})
	}
	text, err := contentText(c.Message.Content)
	if err != nil {
		return nil, &ModelError{Retryable: true, Message: snippet(body), Err: fmt.Errorf("%w: content: %v", ErrMalformedResponse, err)}
	}
	if text == "" && c.Message.Refusal != "" {
		text = c.Message.Refusal
	}
	if text != "" {
		out.Message.Parts = append(out.Message.Parts, TextPart(text))
	}
	for _, tc := range c.Message.ToolCalls {
		out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: argumentsFromWire(tc.Function.Arguments)})
	}
	out.Usage = usageFromWire(w.Usage)
	return out, nil
}

// contentText reads a content field: a string, null, or an array of parts.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []wirePart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func usageFromWire(u *wireUsage) Usage {
	out := Usage{Requests: 1}
	if u == nil {
		return out
	}
	out.InputTokens, out.OutputTokens = u.PromptTokens, u.CompletionTokens
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.Cost != nil && *u.Cost > 0 {
		out.CostMicros = int64(math.Round(*u.Cost * 1e6))
	}
	return out
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// readStream reads a Chat Completions event stream to its end.
func readStream(r io.Reader, sink func(Delta)) (*Response, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	out := &Response{Message: Message{Role: RoleAssistant}}
	var text, reasoning strings.Builder
	calls := map[int]*wireToolCall{}
	var usage *wireUsage
	done, finished := false, false
	var data strings.Builder
	emit := func(d Delta) {
		if sink != nil {
			sink(d)
		}
	}
	handle := func(payload string) error {
		if payload == "[DONE]" {
			done = true
			return nil
		}
		var ch wireChunk
		if err := json.Unmarshal([]byte(payload), &ch); err != nil {
			return &ModelError{Retryable: true, Message: snippet([]byte(payload)), Err: fmt.Errorf("%w: stream chunk: %v", ErrMalformedResponse, err)}
		}
		if ch.Error != nil {
			return &ModelError{Retryable: true, Code: ch.Error.code(), Message: ch.Error.Message}
		}
		if ch.ID != "" {
			out.ID = ch.ID
		}
		if ch.Model != "" {
			out.Model = ch.Model
		}
		if ch.Usage != nil {
			usage = ch.Usage
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			if d := c.Delta.ReasoningContent; d != "" {
				reasoning.WriteString(d)
				emit(Delta{Type: DeltaReasoning, Text: d})
			}
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				text.WriteString(*c.Delta.Content)
				emit(Delta{Type: DeltaText, Text: *c.Delta.Content})
			}
			for i, tc := range c.Delta.ToolCalls {
				idx := i
				if tc.Index != nil {
					idx = *tc.Index
				}
				acc := calls[idx]
				if acc == nil {
					acc = &wireToolCall{}
					calls[idx] = acc
				}
				if tc.ID != "" {
					acc.ID = tc.ID
				}
				if tc.Function.Name != "" {
					acc.Function.Name += tc.Function.Name
				}
				acc.Function.Arguments += tc.Function.Arguments
				emit(Delta{Type: DeltaToolCall, Index: idx, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				out.Finish = FinishReason(*c.FinishReason)
				finished = true
			}
		}
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				if err := handle(data.String()); err != nil {
					return nil, err
				}
				data.Reset()
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		// Comments (":") and other fields (event:, id:, retry:) are ignored.
		if done {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &ModelError{Retryable: true, Err: fmt.Errorf("%w: reading stream: %v", ErrMalformedResponse, err)}
	}
	if !done && data.Len() > 0 {
		if err := handle(data.String()); err != nil {
			return nil, err
		}
	}
	if !done && !finished {
		return nil, &ModelError{Retryable: true, Err: fmt.Errorf("%w: stream ended before the response was complete", ErrMalformedResponse)}
	}
	if reasoning.Len() > 0 {
		out.Message.Parts = append(out.Message.Parts, Part{Type: PartReasoning, Text: reasoning.String()})
	}
	if text.Len() > 0 {
		out.Message.Parts = append(out.Message.Parts, TextPart(text.String()))
	}
	idxs := make([]int, 0, len(calls))
	for i := range calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		c := calls[i]
		out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: argumentsFromWire(c.Function.Arguments)})
	}
	out.Usage = usageFromWire(usage)
	return out, nil
}
