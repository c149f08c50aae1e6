package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// TestLargeOutputsByReference: tool outputs over the threshold are stored
// once, by hash, in agentkit_blobs; the step records only the reference,
// and the model still gets the whole output.
func TestLargeOutputsByReference(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	require.NoError(t, agentkit.Migrate(ctx, v.pool, v.schema))
	require.NoError(t, agentkit.Migrate(ctx, v.pool, v.schema), "Migrate is idempotent")
	blobs, err := agentkit.NewPGBlobStore(v.pool, v.schema)
	require.NoError(t, err)
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // 200 KiB
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("dump", `{}`), call("txdump", `{}`), call("small", `{}`)}}
		}
		var sizes []string
		for _, c := range r.ToolResults() {
			sizes = append(sizes, fmt.Sprint(len(c)))
		}
		return agentkittest.Reply{Text: "sizes " + strings.Join(sizes, ",")}
	})
	defer srv.Close()
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "dumper", agentkit.AgentConfig{Model: openAI(t, srv), Blobs: blobs, Tools: []*agentkit.Tool{
			agentkit.StepTool("dump", "", nil, func(context.Context, struct{}) (string, error) { return big, nil }, nil),
			agentkit.TxTool("txdump", "", nil, func(context.Context, pgx.Tx, struct{}) (string, error) { return big, nil }, nil),
			agentkit.StepTool("small", "", nil, func(context.Context, struct{}) (string, error) { return "tiny", nil }, nil),
		}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "dump"}, &durable.StartOpts{ID: "dump-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("sizes %d,%d,4", len(big), len(big)), res.Final, "the model saw the whole outputs")
	steps, err := e.ListSteps(ctx, "dump-1")
	require.NoError(t, err)
	for _, s := range steps {
		require.Less(t, len(s.Output), 1024, "step %s records a reference, not the output", s.Name)
		if strings.HasPrefix(s.Name, "agentkit.tool:") && !strings.Contains(s.Name, "small") {
			require.Contains(t, string(s.Output), `"sha256"`)
		}
	}
	var n int
	require.NoError(t, v.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{v.schema, "agentkit_blobs"}.Sanitize()).Scan(&n))
	require.Equal(t, 1, n, "equal outputs are stored once")

	_, err = agentkit.NewPGBlobStore(v.pool, "bad schema")
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = blobs.Get(ctx, agentkit.BlobRef{SHA256: "00"})
	require.ErrorIs(t, err, agentkit.ErrBlobNotFound)
}

// TestContinueAsNew: a run that took AfterTurns turns summarises its
// history with a model call and continues as a new run, linked to it and
// carrying the limits and what was spent; Agent.Result follows the chain.
func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	var work atomic.Int32
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.LastUser() == agentkit.SummaryPromptDefault {
			return agentkittest.Reply{Text: fmt.Sprintf("SUMMARY: %d results so far", len(r.ToolResults())), InputTokens: 10, OutputTokens: 10}
		}
		n := work.Add(1)
		if n == 7 {
			return agentkittest.Reply{Text: "finished", InputTokens: 10, OutputTokens: 10}
		}
		return agentkittest.Reply{Text: fmt.Sprintf("working %d", n), ToolCalls: []agentkit.ToolCall{call("step", fmt.Sprintf(`{"key":"s%d"}`, n))},
			InputTokens: 10, OutputTokens: 10}
	})
	defer srv.Close()
	var a, capped *agentkit.Agent
	step := agentkit.StepTool("step", "", nil, func(_ context.Context, a keyArgs) (string, error) { return "did " + a.Key, nil }, nil)
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "chain", agentkit.AgentConfig{Model: openAI(t, srv), Tools: []*agentkit.Tool{step},
			Continue: agentkit.ContinuePolicy{AfterTurns: 3, KeepTurns: 1}})
		capped = agentkit.Define(e, "capped", agentkit.AgentConfig{Model: openAI(t, srv), Tools: []*agentkit.Tool{step},
			Limits: agentkit.Limits{MaxTurns: 5}, Continue: agentkit.ContinuePolicy{AfterTurns: 2}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "long task"}, &durable.StartOpts{ID: "chain-1"})
	require.NoError(t, err)
	first, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeContinued, first.Outcome)
	require.Equal(t, "chain-1/cont-1", first.NextRunID)
	require.Equal(t, 3, first.Turns)

	res, err := a.Result(ctx, "chain-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, "finished", res.Final)
	require.Equal(t, "chain-1/cont-2", res.RunID)
	require.Equal(t, "chain-1/cont-1", res.PreviousRunID)
	require.Equal(t, 7, res.Spent.Turns)
	require.EqualValues(t, 7+2, res.Spent.Usage.Requests, "seven turns and two summaries")

	// The continuation's first request holds the task, the summary and the
	// last turn kept verbatim, not the whole history.
	var firstOfSecond *agentkittest.Request
	for _, r := range srv.Requests() {
		if len(r.Messages) > 1 && strings.HasPrefix(r.Messages[1].Content, "Summary of the work so far (run chain-1)") {
			firstOfSecond = r
			break
		}
	}
	require.NotNil(t, firstOfSecond)
	require.Equal(t, "long task", firstOfSecond.Messages[0].Content)
	require.Contains(t, firstOfSecond.Messages[1].Content, "SUMMARY: 3 results so far")
	require.Len(t, firstOfSecond.Messages, 4, "task, summary, the kept assistant message and its tool result")
	require.Equal(t, []string{"did s3"}, firstOfSecond.ToolResults())

	// A chain cannot exceed its limits: five turns in all.
	work.Store(-100) // never finish
	h, err = capped.Start(ctx, agentkit.Input{Prompt: "capped task"}, &durable.StartOpts{ID: "capped-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)
	res, err = capped.Result(ctx, "capped-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTurns, res.Outcome)
	require.Equal(t, "capped-1/cont-2", res.RunID)
	require.Equal(t, 1, res.Turns)
	require.Equal(t, 5, res.Spent.Turns)
}

// TestScheduledAgent: an agent on a cron schedule gets its prompt from the
// tick, and runs once per tick.
func TestScheduledAgent(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: "report: " + r.LastUser()}
	})
	defer srv.Close()
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "reporter", agentkit.AgentConfig{Model: openAI(t, srv), Limits: agentkit.Limits{MaxTurns: 2}})
		prompt := func(tick time.Time) string { return "Summarise the sales of " + tick.Format("2006-01-02 15:04:05") }
		require.NoError(t, agentkit.Schedule(a, "daily-report", "0 9 * * *", prompt, nil))
		require.NoError(t, agentkit.Schedule(a, "every-second", "* * * * * *", prompt, nil))
		require.ErrorIs(t, agentkit.Schedule(a, "bad", "not a spec", prompt, nil), durable.ErrInvalidArgument)
		require.ErrorIs(t, agentkit.Schedule(a, "nil", "@daily", nil, nil), durable.ErrInvalidArgument)
	})
	tick := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	id, err := e.TriggerSchedule(ctx, "daily-report", tick)
	require.NoError(t, err)
	res, err := a.Result(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "report: Summarise the sales of 2026-11-28 09:00:00", res.Final)
	again, err := e.TriggerSchedule(ctx, "daily-report", tick)
	require.NoError(t, err)
	require.Equal(t, id, again, "one run per tick")

	require.Eventually(t, func() bool {
		for _, r := range srv.Requests() {
			if strings.HasPrefix(r.LastUser(), "Summarise the sales of ") && !strings.Contains(r.LastUser(), "2026-11-28 09:00:00") {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the every-second schedule fires")
}

// TestPruneBlobs: a blob stays while a run refers to it (a tool's recorded
// result, or a history handed to a run as input) and goes once no run
// does; one put recently stays however unreferenced, and putting old
// content again makes it recent.
func TestPruneBlobs(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	require.NoError(t, agentkit.Migrate(ctx, v.pool, v.schema))
	blobs, err := agentkit.NewPGBlobStore(v.pool, v.schema)
	require.NoError(t, err)
	big := strings.Repeat("0123456789abcdef", 100<<10/16) // 100 KiB
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("dump", `{}`)}}
		}
		return agentkittest.Reply{Text: "done"}
	})
	defer srv.Close()
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "dumper", agentkit.AgentConfig{Model: openAI(t, srv), Blobs: blobs, Tools: []*agentkit.Tool{
			agentkit.StepTool("dump", "", nil, func(context.Context, struct{}) (string, error) { return big, nil }, nil),
		}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "dump"}, &durable.StartOpts{ID: "prune-blobs-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	table := pgx.Identifier{v.schema, "agentkit_blobs"}.Sanitize()
	age := func(ref agentkit.BlobRef) {
		_, err := v.pool.Exec(ctx, "UPDATE "+table+" SET created_at = now() - interval '1 day' WHERE sha256 = $1", ref.SHA256)
		require.NoError(t, err)
	}
	exists := func(ref agentkit.BlobRef) bool {
		_, err := blobs.Get(ctx, ref)
		if errors.Is(err, agentkit.ErrBlobNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	bigRef, err := blobs.Put(ctx, []byte(big)) // the same content: the tool's blob
	require.NoError(t, err)
	orphan, err := blobs.Put(ctx, []byte("no run refers to this"))
	require.NoError(t, err)
	fresh, err := blobs.Put(ctx, []byte("put a moment ago"))
	require.NoError(t, err)
	inInput, err := blobs.Put(ctx, []byte("handed to a run in its history"))
	require.NoError(t, err)
	age(bigRef)
	age(orphan)
	age(inInput)
	// A run whose input carries a reference (a history handed over).
	_, err = v.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{v.schema, "workflows"}.Sanitize()+
		" (id, name, status, app_version, input) VALUES ('with-history', 'x', 'success', 'v', $1)",
		fmt.Sprintf(`{"history":[{"parts":[{"type":"text","ref":{"sha256":%q,"size":%d}}]}]}`, inInput.SHA256, inInput.Size))
	require.NoError(t, err)

	_, err = blobs.Prune(ctx, time.Minute)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	n, err := blobs.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.False(t, exists(orphan), "unreferenced and old")
	require.True(t, exists(bigRef), "a tool's recorded result refers to it")
	require.True(t, exists(inInput), "a run's input refers to it")
	require.True(t, exists(fresh), "put a moment ago")

	// The runs go: their blobs follow, unless put again meanwhile.
	_, err = v.pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{v.schema, "workflows"}.Sanitize()+" WHERE id = 'with-history'")
	require.NoError(t, err)
	res, err := e.Prune(ctx, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	require.Positive(t, res.Runs)
	_, err = blobs.Put(ctx, []byte("handed to a run in its history")) // over a minute old: refreshed
	require.NoError(t, err)
	n, err = blobs.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.False(t, exists(bigRef))
	require.True(t, exists(inInput), "put again: recent")
	require.True(t, exists(fresh))

	other, err := agentkit.NewPGBlobStore(v.pool, "agentkit_no_runs_here")
	require.NoError(t, err)
	_, err = other.Prune(ctx, time.Hour)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}
