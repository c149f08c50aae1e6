package agentkit

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadStream: any byte stream gives a response that encodes (it is
// recorded) or an error; never a panic.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n")
	f.Add(": comment\nevent: x\ndata: {\"error\":{\"message\":\"no\"}}\n\n")
	f.Add("data: {oops\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		resp, err := readStream(strings.NewReader(s), func(Delta) {})
		if err != nil {
			return
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatalf("a parsed stream does not encode: %v", err)
		}
	})
}

// FuzzDecodeCompletion: any body gives a response that encodes or an
// error.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(`{"choices":[{"message":{"content":"hi","tool_calls":[{"id":"a","function":{"name":"f","arguments":"nope"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"cost":0.5}}`)
	f.Add(`{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}`)
	f.Add(`{"error":{"message":"x","code":429}}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		resp, err := decodeCompletion([]byte(s))
		if err != nil {
			return
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatalf("a decoded response does not encode: %v", err)
		}
	})
}
