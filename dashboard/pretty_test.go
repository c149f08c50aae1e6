package dashboard

import (
	"encoding/json"
	"testing"
)

func TestPretty(t *testing.T) {
	for in, want := range map[string]string{
		`"\u003cb\u003e \u0026"`:     `"<b> &"`,
		`"\\u003cb"`:                 `"\\u003cb"`, // an escaped backslash, then text
		`"\\\u003c"`:                 `"\\<"`,
		`"\u00e9\n\"q\""`:            `"\u00e9\n\"q\""`,
		`{"a":[1,2]}`:                "{\n  \"a\": [\n    1,\n    2\n  ]\n}",
		`not json <b>`:               `not json <b>`,
		`"trailing \u003`:            `"trailing \u003`,
		`"\u003C upper \u003E"`:      `"< upper >"`,
		`["\u0026amp;", "\\\\"]`:     "[\n  \"&amp;\",\n  \"\\\\\\\\\"\n]",
		`"x\\"`:                      `"x\\"`,
		`"` + "\u2028" + `"`:         `"` + "\u2028" + `"`,
		`{"k":"\u003cscript\u003e"}`: "{\n  \"k\": \"<script>\"\n}",
	} {
		if got := pretty([]byte(in)); got != want {
			t.Errorf("pretty(%s) = %q, want %q", in, got, want)
		}
	}
}

func FuzzUnescapeHTML(f *testing.F) {
	f.Add(`"\u003cb\u003e"`)
	f.Add(`"\\u003c"`)
	f.Fuzz(func(t *testing.T, s string) {
		b, _ := json.Marshal(s) // escapes <, > and &
		var want, got string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Skip()
		}
		if err := json.Unmarshal([]byte(unescapeHTML(string(b))), &got); err != nil {
			t.Fatalf("unescapeHTML(%s) is no longer valid JSON: %v", b, err)
		}
		if got != want {
			t.Fatalf("unescapeHTML(%s) decodes to %q, want %q", b, got, want)
		}
	})
}
