package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestShowManySteps: show reads a long run's steps a window at a time
// (never more than showWindow per read) and prints every step once, in
// order: the text table as one table would, the JSON byte for byte as
// encoding the whole run at once did.
func TestShowManySteps(t *testing.T) {
	// Not parallel: it swaps the package's listStepWindow.
	const n = 5*200 + 37 // five full default windows and a partial one
	var long *durable.Workflow[int, int]
	e := newEnv(t, func(eng *durable.Engine) {
		long = durable.Register(eng, "long", func(wctx durable.Context, n int) (int, error) {
			for i := range n {
				if _, err := durable.Step(wctx, fmt.Sprintf("step-%04d", i), func(context.Context) (string, error) {
					return fmt.Sprintf("out <%d>", i), nil
				}, nil); err != nil {
					return 0, err
				}
			}
			return n, nil
		}, nil)
	})
	ctx := ctxT(t)
	h, err := long.Start(ctx, n, &durable.StartOpts{ID: "long-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	var calls, widest int
	orig := listStepWindow
	t.Cleanup(func() { listStepWindow = orig })
	listStepWindow = func(eng *durable.Engine, ctx context.Context, id string, from, limit int) ([]durable.StepRecord, int, error) {
		calls++
		steps, total, err := orig(eng, ctx, id, from, limit)
		widest = max(widest, limit, len(steps))
		return steps, total, err
	}
	show := func(args ...string) string {
		t.Helper()
		calls, widest = 0, 0
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"show", "long-1", "--schema", e.schema}, args...), &out, &errb)
		require.Equal(t, exitOK, code, errb.String())
		require.Equal(t, n/showWindow+1, calls, "one read per window")
		require.LessOrEqual(t, widest, showWindow)
		return out.String()
	}

	text := show()
	rows := regexp.MustCompile(`(?m)^(\d+)\s+step-(\d{4})\s+done\s`).FindAllStringSubmatch(text, -1)
	require.Len(t, rows, n)
	for i, r := range rows {
		require.Equal(t, fmt.Sprint(i), r[1])
		require.Equal(t, fmt.Sprintf("%04d", i), r[2])
	}
	require.Equal(t, 1, strings.Count(text, "POS "), "one header")
	require.NotContains(t, text, "(no steps recorded)")

	// The JSON is what encoding the whole run at once gives.
	info, err := e.eng.Inspect(ctx, "long-1")
	require.NoError(t, err)
	all, err := e.eng.ListSteps(ctx, "long-1")
	require.NoError(t, err)
	whole := struct {
		Run   runJSON    `json:"run"`
		Steps []stepJSON `json:"steps"`
	}{Run: toRunJSON(info)}
	for _, s := range all {
		whole.Steps = append(whole.Steps, toStepJSON(s))
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(whole))
	require.Equal(t, want.String(), show("--json"))

	// A run with no step: the same empty list.
	h0, err := long.Start(ctx, 0, &durable.StartOpts{ID: "long-0"})
	require.NoError(t, err)
	_, err = h0.Result(ctx)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run(ctx, []string{"show", "long-0", "--schema", e.schema, "--json"}, &out, &errb), errb.String())
	info, err = e.eng.Inspect(ctx, "long-0")
	require.NoError(t, err)
	want.Reset()
	require.NoError(t, enc.Encode(struct {
		Run   runJSON    `json:"run"`
		Steps []stepJSON `json:"steps"`
	}{Run: toRunJSON(info), Steps: []stepJSON{}}))
	require.Equal(t, want.String(), out.String())
	out.Reset()
	require.Equal(t, exitOK, run(ctx, []string{"show", "long-0", "--schema", e.schema}, &out, &errb), errb.String())
	require.True(t, strings.HasSuffix(out.String(), "\n\n(no steps recorded)\n"), out.String())
}
