package agentkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

func TestOpenAIRequestAndResponseMapping(t *testing.T) {
	t.Parallel()
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: "the answer", InputTokens: 120, OutputTokens: 7, Cost: 0.0025}
	})
	defer srv.Close()
	m, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL + "/", Model: "gpt-test", APIKey: "sk-1",
		Headers: map[string]string{"X-Tenant": "t1"}, ExtraBody: map[string]any{"seed": 7}})
	require.NoError(t, err)
	temp := 0.5
	req := &agentkit.Request{
		Messages: []agentkit.Message{
			agentkit.SystemMessage("be brief"),
			{Role: agentkit.RoleUser, Parts: []agentkit.Part{agentkit.TextPart("what is in "), agentkit.ImagePart("data:image/png;base64,AAAA")}},
			{Role: agentkit.RoleAssistant, ToolCalls: []agentkit.ToolCall{{ID: "c1", Name: "look", Arguments: json.RawMessage(`{"x":1}`)}}},
			agentkit.ToolMessage("c1", "look", "a cat", false),
		},
		Tools:           []agentkit.ToolSpec{{Name: "look", Description: "look at it", Parameters: json.RawMessage(`{"type":"object"}`)}},
		ToolChoice:      "look",
		MaxOutputTokens: 100,
		Temperature:     &temp,
	}
	resp, err := m.Generate(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "the answer", resp.Message.Text())
	require.Equal(t, agentkit.RoleAssistant, resp.Message.Role)
	require.Equal(t, agentkit.FinishStop, resp.Finish)
	require.Equal(t, agentkit.Usage{InputTokens: 120, OutputTokens: 7, CostMicros: 2500, Requests: 1}, resp.Usage)
	require.Equal(t, "chatcmpl-2-1", resp.ID)

	got := srv.Requests()
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, "Bearer sk-1", r.Header.Get("Authorization"))
	require.Equal(t, "t1", r.Header.Get("X-Tenant"))
	require.Equal(t, 2, r.Turn)
	require.Equal(t, []string{"look"}, r.Tools)
	var body map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &body))
	require.Equal(t, "gpt-test", body["model"])
	require.EqualValues(t, 7, body["seed"])
	require.EqualValues(t, 100, body["max_tokens"])
	require.EqualValues(t, 0.5, body["temperature"])
	require.Equal(t, map[string]any{"type": "function", "function": map[string]any{"name": "look"}}, body["tool_choice"])
	msgs := body["messages"].([]any)
	require.Equal(t, map[string]any{"role": "system", "content": "be brief"}, msgs[0])
	require.Equal(t, []any{
		map[string]any{"type": "text", "text": "what is in "},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}},
	}, msgs[1].(map[string]any)["content"])
	asst := msgs[2].(map[string]any)
	require.Nil(t, asst["content"])
	require.Equal(t, []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "look", "arguments": `{"x":1}`}}}, asst["tool_calls"])
	require.Equal(t, map[string]any{"role": "tool", "content": "a cat", "tool_call_id": "c1"}, msgs[3])
}

func TestOpenAIToolCallsAndOddArguments(t *testing.T) {
	t.Parallel()
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		// A model that emits arguments that are not JSON.
		return agentkittest.Reply{Raw: `{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"q\":\"go\"}"}},
			{"id":"b","type":"function","function":{"name":"g","arguments":"not json"}},
			{"id":"c","type":"function","function":{"name":"h","arguments":""}}]},"finish_reason":"tool_calls"}]}`}
	})
	defer srv.Close()
	m := openAI(t, srv)
	resp, err := m.Generate(context.Background(), &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("hi")}})
	require.NoError(t, err)
	require.Equal(t, agentkit.FinishToolCalls, resp.Finish)
	require.Equal(t, []agentkit.ToolCall{
		{ID: "a", Name: "f", Arguments: json.RawMessage(`{"q":"go"}`)},
		{ID: "b", Name: "g", Arguments: json.RawMessage(`"not json"`)},
		{ID: "c", Name: "h", Arguments: json.RawMessage(`{}`)},
	}, resp.Message.ToolCalls)
	require.Equal(t, int64(1), resp.Usage.Requests, "a missing usage still counts the request")

	// The recorded arguments go back to the provider as they came.
	_, err = m.Generate(context.Background(), &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("hi"), resp.Message}})
	require.NoError(t, err)
	var body struct {
		Messages []struct {
			ToolCalls []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[1].Body, &body))
	var args []string
	for _, c := range body.Messages[1].ToolCalls {
		args = append(args, c.Function.Arguments)
	}
	require.Equal(t, []string{`{"q":"go"}`, "not json", "{}"}, args)
}

func TestOpenAIStreaming(t *testing.T) {
	t.Parallel()
	srv := agentkittest.NewServer(agentkittest.Turns(agentkittest.Reply{
		Text:         "Let me look that up for you.",
		ToolCalls:    []agentkit.ToolCall{call("search", `{"query":"durable agents"}`), call("fetch", `{"url":"https://example.com/x"}`)},
		InputTokens:  50,
		OutputTokens: 20,
	}))
	defer srv.Close()
	m := openAI(t, srv)
	var deltas []agentkit.Delta
	resp, err := m.GenerateStream(context.Background(), &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("go")}},
		func(d agentkit.Delta) { deltas = append(deltas, d) })
	require.NoError(t, err)
	require.True(t, srv.Requests()[0].Stream)
	var text strings.Builder
	args := map[int]string{}
	for _, d := range deltas {
		switch d.Type {
		case agentkit.DeltaText:
			text.WriteString(d.Text)
		case agentkit.DeltaToolCall:
			args[d.Index] += d.Arguments
		}
	}
	require.Greater(t, len(deltas), 5, "the text and arguments come in pieces")
	require.Equal(t, "Let me look that up for you.", text.String())
	require.Equal(t, resp.Message.Text(), text.String(), "the deltas add up to the final response")
	require.Equal(t, `{"query":"durable agents"}`, args[0])
	require.Equal(t, []agentkit.ToolCall{
		{ID: "call_1_0", Name: "search", Arguments: json.RawMessage(`{"query":"durable agents"}`)},
		{ID: "call_1_1", Name: "fetch", Arguments: json.RawMessage(`{"url":"https://example.com/x"}`)},
	}, resp.Message.ToolCalls)
	require.Equal(t, agentkit.FinishToolCalls, resp.Finish)
	require.Equal(t, agentkit.Usage{InputTokens: 50, OutputTokens: 20, Requests: 1}, resp.Usage)
}

func TestOpenAIErrorClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		reply      agentkittest.Reply
		stream     bool
		retryable  bool
		status     int
		retryAfter time.Duration
		malformed  bool
		contains   string
	}{
		{name: "429 with Retry-After", reply: agentkittest.Reply{Status: 429, Header: map[string]string{"Retry-After": "2"}}, retryable: true, status: 429, retryAfter: 2 * time.Second},
		{name: "500", reply: agentkittest.Reply{Status: 500}, retryable: true, status: 500},
		{name: "503 streaming", reply: agentkittest.Reply{Status: 503}, stream: true, retryable: true, status: 503},
		{name: "400 with provider message", reply: agentkittest.Reply{Status: 400, Raw: `{"error":{"message":"max_tokens is too large","type":"invalid_request_error","code":"bad_param"}}`},
			status: 400, contains: "max_tokens is too large"},
		{name: "401", reply: agentkittest.Reply{Status: 401}, status: 401},
		{name: "404 with a non-JSON body", reply: agentkittest.Reply{Status: 404, Raw: "<html>no</html>"}, status: 404, contains: "<html>no</html>"},
		{name: "malformed JSON", reply: agentkittest.Reply{Raw: `{"choices":[{"message":`}, retryable: true, malformed: true},
		{name: "no choices", reply: agentkittest.Reply{Raw: `{"id":"x","choices":[]}`}, retryable: true, malformed: true},
		{name: "content of the wrong type", reply: agentkittest.Reply{Raw: `{"choices":[{"message":{"content":42}}]}`}, retryable: true, malformed: true},
		{name: "error object with status 200", reply: agentkittest.Reply{Raw: `{"error":{"message":"overloaded","type":"server_error"}}`}, retryable: true, contains: "overloaded"},
		{name: "stream cut short", reply: agentkittest.Reply{Text: "one two three four", CutStream: true}, stream: true, retryable: true, malformed: true},
		{name: "malformed stream chunk", reply: agentkittest.Reply{Raw: "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {oops\n\n"}, stream: true, retryable: true, malformed: true},
		{name: "error inside the stream", reply: agentkittest.Reply{Raw: "data: {\"error\":{\"message\":\"upstream died\"}}\n\n"}, stream: true, retryable: true, contains: "upstream died"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := agentkittest.NewServer(func(*agentkittest.Request) agentkittest.Reply { return tc.reply })
			defer srv.Close()
			m := openAI(t, srv)
			req := &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("hi")}}
			var err error
			if tc.stream {
				_, err = m.GenerateStream(context.Background(), req, nil)
			} else {
				_, err = m.Generate(context.Background(), req)
			}
			var me *agentkit.ModelError
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.retryable, me.Retryable, "%v", err)
			require.Equal(t, tc.status, me.StatusCode)
			require.Equal(t, tc.retryAfter, me.RetryAfter)
			require.Equal(t, tc.malformed, errors.Is(err, agentkit.ErrMalformedResponse), "%v", err)
			if tc.contains != "" {
				require.Contains(t, err.Error(), tc.contains)
			}
		})
	}
}

func TestOpenAITimeout(t *testing.T) {
	t.Parallel()
	srv := agentkittest.NewServer(func(*agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: "late", Delay: time.Minute}
	})
	defer srv.Close()
	m, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "m", Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	for _, stream := range []bool{false, true} {
		start := time.Now()
		req := &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("hi")}}
		if stream {
			_, err = m.GenerateStream(context.Background(), req, nil)
		} else {
			_, err = m.Generate(context.Background(), req)
		}
		var me *agentkit.ModelError
		require.ErrorAs(t, err, &me)
		require.True(t, me.Retryable)
		require.Equal(t, "timeout", me.Code)
		require.Less(t, time.Since(start), 5*time.Second)
	}
	// The caller's cancellation ends a call too: with a timeout of a
	// minute, only the cancellation can (with the 100 ms one, a loaded
	// machine could see the timeout first).
	patient, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "m", Timeout: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = patient.Generate(ctx, &agentkit.Request{Messages: []agentkit.Message{agentkit.UserMessage("hi")}})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second)

	_, err = agentkit.NewOpenAI(agentkit.OpenAIConfig{})
	require.ErrorContains(t, err, "Model is empty")
}

func TestClassifyHTTP(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{408: true, 409: true, 429: true, 500: true, 502: true, 400: false, 401: false, 403: false, 404: false, 422: false} {
		got, _ := agentkit.ClassifyHTTP(status, http.Header{})
		require.Equal(t, want, got, "status %d", status)
	}
	h := http.Header{}
	h.Set("Retry-After", time.Now().Add(10*time.Second).UTC().Format(http.TimeFormat))
	_, after := agentkit.ClassifyHTTP(429, h)
	require.InDelta(t, 10*time.Second, after, float64(2*time.Second))
}
