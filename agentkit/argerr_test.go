package agentkit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArgsError: arguments that do not decode are described in JSON's
// terms, never Go's, with what the model sent (cut when long).
func TestArgsError(t *testing.T) {
	type inner struct {
		N int `json:"n"`
	}
	type args struct {
		Key   string   `json:"key"`
		Tags  []string `json:"tags"`
		Inner inner    `json:"inner"`
		Ok    bool     `json:"ok"`
		Ratio float64  `json:"ratio"`
	}
	describe := func(raw string) string {
		var a args
		err := json.Unmarshal([]byte(raw), &a)
		require.Error(t, err, raw)
		return argsError(json.RawMessage(raw), err)
	}
	for raw, want := range map[string]string{
		`{"key":5}`:           `field "key" must be a string, not a number. You sent: {"key":5}`,
		`{"tags":"a"}`:        `field "tags" must be an array, not a string. You sent: {"tags":"a"}`,
		`{"inner":{"n":1.5}}`: `field "inner.n" must be an integer, not the number 1.5. You sent: {"inner":{"n":1.5}}`,
		`{"ok":"yes"}`:        `field "ok" must be true or false, not a string. You sent: {"ok":"yes"}`,
		`{"ratio":[1]}`:       `field "ratio" must be a number, not an array. You sent: {"ratio":[1]}`,
		`["key"]`:             `they must be an object, not an array. You sent: ["key"]`,
		`{"key": "a",}`:       `they are not valid JSON (invalid character '}' looking for beginning of object key string, at byte 13). You sent: {"key": "a",}`,
		`{"key": "unfinished`: `they are not valid JSON (unexpected end of JSON input, at byte 19). You sent: {"key": "unfinished`,
	} {
		got := describe(raw)
		require.Equal(t, want, got, raw)
		require.NotContains(t, got, "Go", raw)
		require.NotContains(t, got, "args", raw)
	}
	long := `{"key":` + strings.Repeat("1", 2000) + `}`
	got := describe(long)
	require.True(t, strings.HasSuffix(got, "… (2008 bytes in all)"), got)
	require.Less(t, len(got), sentMax+200)
}
