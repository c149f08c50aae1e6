package agentkit_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/proctest"
)

// crashTurns is the model's side of the crash agent: eleven turns of tool
// calls (some parallel: charges, a ledger write, an approval) and a final
// answer that digests every tool result it was sent.
var crashTurns = [][]agentkit.ToolCall{
	{call("lookup", `{"key":"a"}`), call("lookup", `{"key":"b"}`)},
	{call("charge", `{"amount":10}`)},
	{call("ledger", `{"key":"x"}`)},
	{call("charge", `{"amount":20}`), call("lookup", `{"key":"c"}`)}, // its model call is killed
	{call("ledger", `{"key":"y"}`)},
	{call("charge", `{"amount":30}`), call("charge", `{"amount":40}`), call("lookup", `{"key":"d"}`)}, // killed after charging 30
	{call("lookup", `{"key":"e"}`)},
	{call("refund", `{"amount":15}`), call("lookup", `{"key":"f"}`)}, // killed waiting for approval
	{call("ledger", `{"key":"z"}`)},
	{call("charge", `{"amount":50}`)},
	{call("lookup", `{"key":"g"}`)},
}

func crashScript(hold func(r *agentkittest.Request) <-chan struct{}) agentkittest.Script {
	return func(r *agentkittest.Request) agentkittest.Reply {
		var rep agentkittest.Reply
		if r.Turn <= len(crashTurns) {
			rep = agentkittest.Reply{Text: fmt.Sprintf("Turn %d: working.", r.Turn), ToolCalls: crashTurns[r.Turn-1]}
		} else {
			results := r.ToolResults()
			sum := sha256.Sum256([]byte(strings.Join(results, "\n")))
			rep = agentkittest.Reply{Text: fmt.Sprintf("Done after %d tool results, digest %x.", len(results), sum[:8])}
		}
		if hold != nil {
			rep.Hold = hold(r)
		}
		return rep
	}
}

type crashOutcome struct {
	res    agentkit.Result
	srv    *agentkittest.Server
	prov   *agentkittest.Provider
	ledger []string
	events []agentkit.Event // lifecycle events
}

// runCrashScenario runs the 12-turn crash agent in child processes. With
// crash, the run is SIGKILLed three times: during the model call of turn
// 4, after the effect of a charge in turn 6 and before its checkpoint, and
// while waiting for the approval of turn 8 (decided while it is down).
func runCrashScenario(t *testing.T, crash bool) *crashOutcome {
	v := newEnv(t)
	ctx := ctxT(t)
	ledger := pgx.Identifier{v.schema, "ledger"}.Sanitize()
	_, err := v.pool.Exec(ctx, "CREATE TABLE "+ledger+" (idem_key text PRIMARY KEY, entry text NOT NULL)")
	require.NoError(t, err)
	held := make(chan struct{})
	var once sync.Once
	never := make(chan struct{})
	srv := agentkittest.NewServer(crashScript(func(r *agentkittest.Request) <-chan struct{} {
		if crash && r.Turn == 4 && r.Attempt == 1 {
			once.Do(func() { close(held) })
			return never // answered only after the kill, which hangs up
		}
		return nil
	}))
	t.Cleanup(srv.Close)
	prov := agentkittest.NewProvider()
	t.Cleanup(prov.Close)
	env := []string{"AGENTKIT_MODEL_URL=" + srv.URL, "AGENTKIT_PROVIDER_URL=" + prov.URL}
	// The parent's view of the database, to decide approvals: an engine
	// that is never launched.
	pe, err := durable.New(v.pool, &durable.Config{Schema: v.schema, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	approve := func(p agentkit.PendingApproval) {
		require.Equal(t, "refund", p.Call.Name)
		require.Equal(t, 8, p.Turn)
		require.NoError(t, agentkit.Decide(ctx, pe, "crash-run", p.Call.ID, agentkit.Decision{Action: agentkit.ActionApprove, By: "test"}))
	}

	var res agentkit.Result
	if !crash {
		c := startChild(t, v.schema, env...)
		approve(waitPending(t, pe, "crash-run"))
		res = childResult(t, c)
	} else {
		// 1. Killed while the model call of turn 4 is in flight.
		c := startChild(t, v.schema, env...)
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("turn 4 was never requested; stderr:\n%s", c.Stderr.String())
		}
		c.Kill(t)

		// 2. Killed after charging 30 (the provider saw it) and before
		// the charge's checkpoint.
		c = startChild(t, v.schema, append(env, "AGENTKIT_KILL_KEY=crash-run/6/call_6_0")...)
		require.True(t, proctest.KilledBySIGKILL(c.Wait(t)), "stderr:\n%s", c.Stderr.String())
		require.Equal(t, 1, prov.Calls()["crash-run/6/call_6_0"])

		// 3. Killed while waiting for the approval of turn 8; the decision
		// is sent while no process runs the agent.
		c = startChild(t, v.schema, env...)
		p := waitPending(t, pe, "crash-run")
		c.Kill(t)
		approve(p)

		// 4. Runs to the end.
		c = startChild(t, v.schema, env...)
		res = childResult(t, c)
	}
	rows, err := v.pool.Query(ctx, "SELECT idem_key || '=' || entry FROM "+ledger+" ORDER BY 1")
	require.NoError(t, err)
	var entries []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		entries = append(entries, s)
	}
	require.NoError(t, rows.Err())
	ents, done, err := durable.StreamEntries[agentkit.Event](ctx, pe, "crash-run", agentkit.EventsKey, 0, durable.StreamEntriesLimitMax)
	require.NoError(t, err)
	require.True(t, done)
	var evs []agentkit.Event
	for i, ent := range ents {
		require.EqualValues(t, i, ent.Offset)
		ev := ent.Value
		if ev.Type == agentkit.EventDelta || ev.Type == agentkit.EventModelAttempt {
			continue
		}
		if ev.Approval != nil {
			a := *ev.Approval
			a.Deadline = time.Time{} // wall-clock time: differs between runs
			ev.Approval = &a
		}
		evs = append(evs, ev)
	}
	return &crashOutcome{res: res, srv: srv, prov: prov, ledger: entries, events: evs}
}

// TestCrashRecovery proves the agent loop's guarantees across SIGKILLs:
// no recorded turn is requested from the model again, an effect whose
// checkpoint was lost reached the provider again under the same key (and
// was deduplicated), transaction writes happened once, and the final
// answer and whole transcript match an uninterrupted run.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	var ref, got *crashOutcome
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ref = runCrashScenario(t, false)
	}()
	got = runCrashScenario(t, true)
	wg.Wait()
	if t.Failed() {
		return
	}

	require.Equal(t, agentkit.OutcomeCompleted, got.res.Outcome)
	require.Equal(t, 12, got.res.Turns)
	require.Contains(t, got.res.Final, "Done after 16 tool results")
	require.Equal(t, ref.res.Final, got.res.Final, "the final answer matches the uninterrupted run")
	require.Equal(t, ref.res.Usage, got.res.Usage)
	refReqs, gotReqs := ref.srv.Requests(), got.srv.Requests()
	require.Equal(t, refReqs[len(refReqs)-1].Messages, gotReqs[len(gotReqs)-1].Messages, "the whole transcript matches")

	// The model: every turn requested once; turn 4 twice, since its first
	// request was cut by the kill before an answer was recorded.
	want := map[int]int{}
	for i := 1; i <= 12; i++ {
		want[i] = 1
	}
	require.Equal(t, want, ref.srv.TurnCounts())
	want[4] = 2
	require.Equal(t, want, got.srv.TurnCounts(), "no recorded turn was requested again")

	// The provider: the same effects, each once. The charge killed before
	// its checkpoint was sent again with the same key and deduplicated; so
	// may its sibling of the same turn, which ran in parallel (whether its
	// checkpoint made it before the kill is a race). Nothing else was.
	require.Equal(t, sorted(ref.prov.Effects()), sorted(got.prov.Effects()))
	require.Len(t, got.prov.Effects(), 6) // five charges and the refund
	for key, n := range got.prov.Calls() {
		switch key {
		case "crash-run/6/call_6_0":
			require.Equal(t, 2, n, key)
		case "crash-run/6/call_6_1":
			require.LessOrEqual(t, n, 2, key)
		default:
			require.Equal(t, 1, n, key)
		}
	}
	for key, n := range ref.prov.Calls() {
		require.Equal(t, 1, n, key)
	}

	// The run's lifecycle events were written exactly once, in order,
	// across the three kills.
	require.Len(t, ref.events, 1+12*2+16*2+2+1) // start, turns, tool calls, approval, done
	require.Equal(t, eventsJSON(ref.events), eventsJSON(got.events))

	// The transaction tool's writes happened once each.
	require.Equal(t, []string{"crash-run/3/call_3_0=x", "crash-run/5/call_5_0=y", "crash-run/9/call_9_0=z"}, ref.ledger)
	require.Equal(t, ref.ledger, got.ledger)
}

// TestCrashAtTurnLimit: a run killed right after the answer of its last
// allowed turn was recorded is resumed by a process whose agent now allows
// more turns; the run keeps the limit it started with and takes no other
// turn.
func TestCrashAtTurnLimit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	_, err := v.pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{v.schema, "ledger"}.Sanitize()+" (idem_key text PRIMARY KEY, entry text)")
	require.NoError(t, err)
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: fmt.Sprintf("charging %d", r.Turn-1), ToolCalls: []agentkit.ToolCall{call("charge", fmt.Sprintf(`{"amount":%d}`, r.Turn))}}
	})
	defer srv.Close()
	prov := agentkittest.NewProvider()
	defer prov.Close()
	env := []string{"AGENTKIT_MODEL_URL=" + srv.URL, "AGENTKIT_PROVIDER_URL=" + prov.URL}

	c := startChild(t, v.schema, append(env, "AGENTKIT_MAX_TURNS=3", "AGENTKIT_KILL_AFTER_MODEL=3")...)
	require.True(t, proctest.KilledBySIGKILL(c.Wait(t)), "stderr:\n%s", c.Stderr.String())
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, srv.TurnCounts())

	c = startChild(t, v.schema, append(env, "AGENTKIT_MAX_TURNS=10")...)
	res := childResult(t, c)
	require.Equal(t, agentkit.OutcomeLimitTurns, res.Outcome)
	require.Equal(t, 3, res.Turns)
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, srv.TurnCounts(), "no turn after the limit")
	require.Len(t, res.Unexecuted, 1)
	require.Equal(t, []string{"crash-run/1/call_1_0", "crash-run/2/call_2_0"}, sorted(prov.Effects()), "the last turn's charge never ran")

	// Yet another process start finds the run finished and does nothing.
	c = startChild(t, v.schema, append(env, "AGENTKIT_MAX_TURNS=10")...)
	require.Equal(t, res, childResult(t, c))
	require.Len(t, srv.Requests(), 3)
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// eventsJSON renders events one per line, for readable diffs.
func eventsJSON(evs []agentkit.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}
