// Package agentkittest holds offline test helpers for agents, like
// net/http/httptest: a scripted OpenAI-compatible model server that logs
// every request, and an idempotent provider that records which
// idempotency keys it saw.
//
// A script decides each reply from the request, typically by its turn
// (the number of assistant messages in the conversation), so a test can
// assert from the log that no recorded turn was requested again.
package agentkittest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/agentkit"
)

// Reply is one scripted answer.
type Reply struct {
	// Text is the assistant's text.
	Text string
	// ToolCalls are the calls the assistant asks for; an empty ID gets
	// "call_<turn>_<index>".
	ToolCalls []agentkit.ToolCall
	// InputTokens and OutputTokens are the reported usage. Default: the
	// request's text length / 4, and the reply's text length / 4 + 1.
	InputTokens, OutputTokens int64
	// Cost is reported as usage.cost (dollars) when positive.
	Cost float64
	// Finish is the finish reason. Default: "tool_calls" with calls,
	// else "stop".
	Finish string
	// Status, when not 2xx, makes an error reply with an OpenAI-style
	// error body (or Raw).
	Status int
	// Header is added to the reply (e.g. Retry-After).
	Header map[string]string
	// Raw is sent as the body verbatim, for malformed replies.
	Raw string
	// Delay holds the reply back; the client hanging up ends it.
	Delay time.Duration
	// Hold holds the reply back until the channel is closed or the client
	// hangs up.
	Hold <-chan struct{}
	// CutStream ends a streamed reply halfway, without a finish reason or
	// [DONE].
	CutStream bool
}

// Message is a message of a logged request, in wire form.
type Message struct {
	Role       string              `json:"role"`
	Content    string              `json:"content"`
	ToolCalls  []agentkit.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string              `json:"tool_call_id,omitempty"`
}

// Request is a logged request.
type Request struct {
	// Turn is the turn the request is for, from 1 as agentkit counts
	// them: one more than the assistant messages in the request.
	Turn int
	// Attempt counts the requests of this turn so far, from 1.
	Attempt  int
	Stream   bool
	Model    string
	Messages []Message
	Tools    []string
	// ResponseFormat is the request's response_format, as sent.
	ResponseFormat json.RawMessage
	Header         http.Header
	Body           []byte
	At             time.Time
}

// LastUser returns the content of the last user message.
func (r *Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// ToolResults returns the contents of the tool messages, in order.
func (r *Request) ToolResults() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

// Digest is a short hash of the request's messages: two requests with the
// same conversation have the same digest.
func (r *Request) Digest() string {
	b, _ := json.Marshal(r.Messages)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Script chooses the reply to a request.
type Script func(req *Request) Reply

// Turns is a script replying replies[0] to a request of turn 1,
// replies[1] to turn 2 and so on, and HTTP 500 past the end.
func Turns(replies ...Reply) Script {
	return func(req *Request) Reply {
		if req.Turn <= len(replies) {
			return replies[req.Turn-1]
		}
		return Reply{Status: http.StatusInternalServerError, Raw: `{"error":{"message":"script exhausted","type":"server_error"}}`}
	}
}

// Server is a scripted OpenAI Chat Completions server (POST
// /v1/chat/completions, JSON or server-sent events).
type Server struct {
	// URL is the base URL to give the client (it ends in /v1).
	URL string

	srv    *httptest.Server
	script Script

	mu       sync.Mutex
	log      []*Request
	attempts map[int]int
}

// NewServer starts a server playing script. Close it when done.
func NewServer(script Script) *Server {
	s := &Server{script: script, attempts: map[int]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL + "/v1"
	return s
}

// Close shuts the server down.
func (s *Server) Close() { s.srv.Close() }

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.log...)
}

// TurnCounts returns how many requests each turn received.
func (s *Server) TurnCounts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for k, v := range s.attempts {
		out[k] = v
	}
	return out
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type wireRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	Stream         bool            `json:"stream"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, "bad JSON: "+err.Error())
		return
	}
	req := &Request{Turn: 1, Stream: wr.Stream, Model: wr.Model, ResponseFormat: wr.ResponseFormat, Header: r.Header.Clone(), Body: body, At: time.Now()}
	for _, m := range wr.Messages {
		msg := Message{Role: m.Role, Content: contentText(m.Content), ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			args := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(args) {
				args, _ = json.Marshal(tc.Function.Arguments)
			}
			msg.ToolCalls = append(msg.ToolCalls, agentkit.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		if m.Role == "assistant" {
			req.Turn++
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range wr.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	s.mu.Lock()
	s.attempts[req.Turn]++
	req.Attempt = s.attempts[req.Turn]
	s.log = append(s.log, req)
	s.mu.Unlock()

	rep := s.script(req)
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Status != 0 && rep.Status/100 != 2 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		if rep.Raw != "" {
			io.WriteString(w, rep.Raw)
		} else {
			fmt.Fprintf(w, `{"error":{"message":%q,"type":"scripted_error"}}`, http.StatusText(rep.Status))
		}
		return
	}
	if rep.Raw != "" {
		w.Header().Set("Content-Type", "application/json")
		if wr.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		io.WriteString(w, rep.Raw)
		return
	}
	rep.ToolCalls = append([]agentkit.ToolCall(nil), rep.ToolCalls...) // scripts may share them
	for i := range rep.ToolCalls {
		if rep.ToolCalls[i].ID == "" {
			rep.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", req.Turn, i)
		}
		if len(rep.ToolCalls[i].Arguments) == 0 {
			rep.ToolCalls[i].Arguments = json.RawMessage("{}")
		}
	}
	if rep.Finish == "" {
		rep.Finish = "stop"
		if len(rep.ToolCalls) > 0 {
			rep.Finish = "tool_calls"
		}
	}
	if rep.InputTokens == 0 {
		n := 0
		for _, m := range req.Messages {
			n += len(m.Content)
			for _, c := range m.ToolCalls {
				n += len(c.Arguments)
			}
		}
		rep.InputTokens = int64(n/4 + 1)
	}
	if rep.OutputTokens == 0 {
		rep.OutputTokens = int64(len(rep.Text)/4 + 1)
	}
	id := fmt.Sprintf("chatcmpl-%d-%d", req.Turn, req.Attempt)
	if wr.Stream {
		s.stream(w, id, wr.Model, rep)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "model": wr.Model,
		"choices": []any{map[string]any{"index": 0, "message": wireAssistant(rep), "finish_reason": rep.Finish}},
		"usage":   usage(rep),
	})
}

func wireAssistant(rep Reply) map[string]any {
	m := map[string]any{"role": "assistant", "content": nil}
	if rep.Text != "" {
		m["content"] = rep.Text
	}
	if len(rep.ToolCalls) > 0 {
		var calls []any
		for _, c := range rep.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": string(c.Arguments)}})
		}
		m["tool_calls"] = calls
	}
	return m
}

func usage(rep Reply) map[string]any {
	u := map[string]any{"prompt_tokens": rep.InputTokens, "completion_tokens": rep.OutputTokens,
		"total_tokens": rep.InputTokens + rep.OutputTokens}
	if rep.Cost > 0 {
		u["cost"] = rep.Cost
	}
	return u
}

func (s *Server) stream(w http.ResponseWriter, id, model string, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	io.WriteString(w, ": scripted stream\n\n")
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	words := strings.SplitAfter(rep.Text, " ")
	for i, wd := range words {
		if wd == "" {
			continue
		}
		if rep.CutStream && i >= len(words)/2 && len(words) > 1 {
			return
		}
		send(chunk(map[string]any{"content": wd}, nil))
	}
	for i, c := range rep.ToolCalls {
		send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil))
		args := string(c.Arguments)
		half := len(args) / 2
		for _, piece := range []string{args[:half], args[half:]} {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil))
		}
	}
	if rep.CutStream {
		return
	}
	send(chunk(map[string]any{}, rep.Finish))
	send(map[string]any{"id": id, "object": "chat.completion.chunk", "model": model, "choices": []any{}, "usage": usage(rep)})
	io.WriteString(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b bytes.Buffer
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}
