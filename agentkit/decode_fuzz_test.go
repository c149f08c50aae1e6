package agentkit

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCallIDs: whatever tool call IDs a model returns, the run uses IDs
// that are unique in the run and safe in step names, event keys, topics
// and idempotency keys, and keeps a model's ID when it already is.
func FuzzCallIDs(f *testing.F) {
	f.Add("call_1\ncall_2", "call_1")
	f.Add("\ncall_1\ncall_1", "")
	f.Add("'; DROP TABLE steps; --\nx\x00y\n\xff\n"+strings.Repeat("a", 65), "t0c1")
	f.Add("t1c0\nt1c0x\nt1c0", "t1c0")
	f.Fuzz(func(t *testing.T, ids, seen string) {
		rs := &runState{seen: map[string]bool{}}
		for _, s := range strings.Split(seen, "\n") {
			if s != "" {
				rs.seen[s] = true
			}
		}
		before := len(rs.seen)
		msg := &Message{Role: RoleAssistant}
		for _, id := range strings.Split(ids, "\n") {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: id, Name: "f"})
		}
		orig := append([]ToolCall(nil), msg.ToolCalls...)
		wasSeen := func(id string) bool { _, ok := rs.seen[id]; return ok }
		kept := map[int]bool{}
		for i, c := range orig {
			kept[i] = callIDRE.MatchString(c.ID) && !wasSeen(c.ID)
		}
		rs.normalize(msg, 3)
		got := map[string]bool{}
		for i, c := range msg.ToolCalls {
			if !callIDRE.MatchString(c.ID) || got[c.ID] {
				t.Fatalf("call %d: ID %q unusable or repeated (from %q)", i, c.ID, orig[i].ID)
			}
			got[c.ID] = true
			if i == 0 && kept[0] && c.ID != orig[0].ID {
				t.Fatalf("valid fresh ID %q replaced by %q", orig[0].ID, c.ID)
			}
		}
		if len(rs.seen) != before+len(got) {
			t.Fatalf("seen grew by %d for %d calls (or reused a seen ID)", len(rs.seen)-before, len(got))
		}
	})
}

// FuzzArguments: any arguments text from a provider is recorded as valid
// JSON and sent back to the provider as the text it sent (valid JSON
// trimmed of surrounding space).
func FuzzArguments(f *testing.F) {
	for _, s := range []string{`{"a":1}`, ` {"a":1} `, `{"a":`, ``, `   `, `not json`, `"str"`, `[1,2]`, `null`, "{\"a\":\"\x00\"}", `"\"x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := argumentsFromWire(s)
		if !json.Valid(raw) {
			t.Fatalf("arguments %q recorded as invalid JSON %q", s, raw)
		}
		if !utf8.ValidString(s) {
			return // encoding/json records U+FFFD for invalid UTF-8
		}
		back := argumentsToWire(raw)
		trimmed := strings.TrimSpace(s)
		switch {
		case trimmed == "":
			if back != "{}" {
				t.Fatalf("empty arguments sent back as %q", back)
			}
		case json.Valid([]byte(trimmed)):
			var str string
			if json.Unmarshal([]byte(trimmed), &str) == nil && !json.Valid([]byte(str)) {
				return // a JSON string is ambiguous with recorded non-JSON text
			}
			if back != trimmed {
				t.Fatalf("JSON arguments %q sent back as %q", s, back)
			}
		default:
			if back != s {
				t.Fatalf("text arguments %q sent back as %q", s, back)
			}
		}
	})
}

// FuzzTranscript: any stored event (a stream entry, possibly written by
// another version) folds into a transcript without a panic.
func FuzzTranscript(f *testing.F) {
	for _, s := range []string{`{"type":"delta","turn":1,"delta":{"type":"text","text":"hi"}}`, `{"type":"model_attempt","turn":-5}`,
		`{"type":"assistant","turn":2,"message":{"role":"assistant","parts":[{"type":"text","text":"a"}]}}`, `{"type":"done"}`,
		`{"type":"delta"}`, `{"type":"assistant"}`, `null`, `{"turn":1e30}`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ev Event
		if json.Unmarshal([]byte(s), &ev) != nil {
			return
		}
		var tr Transcript
		tr.Apply(ev)
		tr.Apply(ev)
		if _, err := json.Marshal(tr); err != nil {
			t.Fatalf("transcript of %q does not encode: %v", s, err)
		}
	})
}
