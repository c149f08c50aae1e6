package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// hostileNames are valid IDs, names, topics and keys that try to break
// out of SQL, LIKE patterns, notification payloads and ID formats. Each is
// data: stored and read back exactly.
var hostileNames = []string{
	`'; DROP TABLE workflows; --`,
	`"; DELETE FROM steps; --`,
	`x' OR '1'='1`,
	`$1`, `%`, `_`, `%_%`, `\`, `\'`, `\\%`,
	`"quoted" 'single'`,
	"ünïcødé ✓ 😀 \u202e\u2028",
	"tab\tnew\nline\r",
	"d:notify-lookalike",
	"sched:a:2026-01-01T00:00:00Z",
	"{{schema}}",
	strings.Repeat("L", 200),
	strings.Repeat("é", 100), // 200 bytes
	strings.Repeat("M", 255),
}

// invalidNames are refused everywhere with ErrInvalidArgument.
var invalidNames = []string{"nul\x00byte", "\x00", "bad-utf8-\xff", "\xed\xa0\x80", strings.Repeat("x", 256), strings.Repeat("é", 128)}

type hostileIn struct {
	S       string
	Payload string
}

type hostileOut struct {
	Step, Msg, Payload string
}

// TestHostile feeds hostile names, IDs and payloads through every entry
// point.
func TestHostile(t *testing.T) {
	t.Parallel()

	// Input: IDs, names, queue names, schedule names, topics, event
	// keys, stream keys, dedup IDs, partition keys and idempotency keys with
	// quotes, backslashes, LIKE wildcards, unicode, SQL and maximal lengths
	// round-trip exactly; invalid ones (NUL, invalid UTF-8, too long) fail with
	// ErrInvalidArgument at every entry point; nothing is injected and the
	// rows of other runs and of the application are unchanged.
	t.Run("Input", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		victim := pgx.Identifier{b.schema, "victim"}.Sanitize()
		_, err := b.pool.Exec(ctx, "CREATE TABLE "+victim+" (id int PRIMARY KEY, v text); INSERT INTO "+victim+" SELECT g, md5(g::text) FROM generate_series(1, 50) g")
		require.NoError(t, err)

		body := func(wctx durable.Context, in hostileIn) (hostileOut, error) {
			var out hostileOut
			var err error
			if out.Step, err = durable.Step(wctx, in.S, func(ctx context.Context) (string, error) { return in.S, nil }, nil); err != nil {
				return out, err
			}
			if err := durable.SetEvent(wctx, in.S, in.S); err != nil {
				return out, err
			}
			if err := durable.StreamWrite(wctx, in.S, in.S); err != nil {
				return out, err
			}
			if err := durable.StreamClose(wctx, in.S); err != nil {
				return out, err
			}
			msg, ok, err := durable.Recv[string](wctx, in.S, time.Minute)
			if err != nil || !ok {
				return out, fmt.Errorf("recv %q: %v %w", in.S, ok, err)
			}
			out.Msg, out.Payload = msg, in.Payload
			return out, nil
		}
		echo := func(wctx durable.Context, in string) (string, error) { return in, nil }
		var all *durable.Workflow[hostileIn, hostileOut]
		var plain *durable.Workflow[string, string]
		named := map[string]*durable.Workflow[string, string]{}
		queues := map[string]*durable.Queue{}
		var invalidInWorkflow *durable.Workflow[string, []string]
		for _, s := range invalidNames {
			_, err := durable.New(b.pool, &durable.Config{ExecutorID: s})
			requireInvalid(t, err, "Config.ExecutorID %q", s)
			_, err = durable.New(b.pool, &durable.Config{AppVersion: s})
			requireInvalid(t, err, "Config.AppVersion %q", s)
		}
		hostileConfig := func(c *durable.Config) {
			c.ExecutorID = `exec'; DROP TABLE executors; --`
			c.AppVersion = `v"1\%_`
		}
		e := b.engine(t, hostileConfig, func(e *durable.Engine) {
			all = durable.Register(e, "hostile", body, nil)
			plain = durable.Register(e, "plain", echo, nil)
			for _, s := range hostileNames {
				named[s] = durable.Register(e, s, echo, nil)
				queues[s] = durable.RegisterQueue(e, s, &durable.QueueOpts{GlobalConcurrency: 1, PartitionConcurrency: 1})
				if len(s) <= durable.ScheduleNameMax {
					require.NoError(t, durable.TrySchedule(named[s], s, "@yearly", &durable.ScheduleOpts[string]{Input: s}))
				}
			}
			for _, s := range invalidNames {
				_, err := durable.TryRegister(e, s, echo, nil)
				requireInvalid(t, err, "TryRegister %q", s)
				_, err = durable.TryRegisterQueue(e, s, nil)
				requireInvalid(t, err, "TryRegisterQueue %q", s)
				requireInvalid(t, durable.TrySchedule(plain, s, "@yearly", nil), "TrySchedule %q", s)
			}
			// Workflow code gets the same errors for bad step names, keys and topics.
			invalidInWorkflow = durable.Register(e, "invalid-inside", func(wctx durable.Context, s string) ([]string, error) {
				var errs []string
				check := func(what string, err error) {
					if !errors.Is(err, durable.ErrInvalidArgument) {
						errs = append(errs, fmt.Sprintf("%s: %v", what, err))
					}
				}
				_, err := durable.Step(wctx, s, func(ctx context.Context) (int, error) { return 1, nil }, nil)
				check("Step", err)
				_, err = durable.TxStep(wctx, s, func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }, nil)
				check("TxStep", err)
				check("SetEvent", durable.SetEvent(wctx, s, 1))
				check("StreamWrite", durable.StreamWrite(wctx, s, 1))
				check("StreamClose", durable.StreamClose(wctx, s))
				_, _, err = durable.Recv[int](wctx, s, time.Millisecond)
				check("Recv", err)
				check("SendStep", durable.SendStep(wctx, s, "t", 1))
				check("SendStep topic", durable.SendStep(wctx, wctx.WorkflowID(), s, 1))
				_, err = durable.Patched(wctx, s)
				check("Patched", err)
				_, err = plain.StartChild(wctx, "x", &durable.StartOpts{ID: s})
				check("StartChild", err)
				return errs, nil
			}, nil)
		})

		// Bystanders: runs and app rows that must come out unchanged.
		for i := range 3 {
			id := fmt.Sprintf("bystander-%d", i)
			h, err := all.Start(ctx, hostileIn{S: id, Payload: id}, &durable.StartOpts{ID: id})
			require.NoError(t, err)
			require.NoError(t, durable.Send(ctx, e, id, id, "m", nil))
			_, err = h.Result(ctx)
			require.NoError(t, err)
		}
		hp, err := plain.Start(ctx, "p", &durable.StartOpts{ID: "bystander-plain"})
		require.NoError(t, err)
		_, err = hp.Result(ctx)
		require.NoError(t, err)
		before := schemaFingerprint(t, b.pool, b.schema)

		for _, s := range hostileNames {
			// Workflow ID, step name, event key, stream key, topic and
			// idempotency key, all s.
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			h, err := all.StartTx(ctx, tx, hostileIn{S: s, Payload: s}, &durable.StartOpts{ID: s})
			require.NoError(t, err, "%q", s)
			require.Equal(t, s, h.ID())
			for range 2 { // the second send is deduplicated
				require.NoError(t, durable.SendTx(ctx, e, tx, s, s, s, &durable.SendOpts{IdempotencyKey: s}), "%q", s)
			}
			require.NoError(t, tx.Commit(ctx))
			out, err := h.Result(ctx)
			require.NoError(t, err, "%q", s)
			require.Equal(t, hostileOut{Step: s, Msg: s, Payload: s}, out)
			h2, err := all.Handle(ctx, s)
			require.NoError(t, err)
			require.Equal(t, s, h2.ID())
			ev, ok, err := durable.GetEvent[string](ctx, e, s, s, 0)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, s, ev)
			entries, done, err := durable.StreamEntries[string](ctx, e, s, s, 0, 0)
			require.NoError(t, err)
			require.True(t, done)
			require.Len(t, entries, 1)
			require.Equal(t, s, entries[0].Value)
			steps, err := e.ListSteps(ctx, s)
			require.NoError(t, err)
			require.Equal(t, s, steps[0].Name)
			var msgs int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "messages"}.Sanitize()+" WHERE workflow_id = $1", s).Scan(&msgs))
			require.Equal(t, 1, msgs, "one message for %q: the idempotency key held", s)
			// An ID prefix is matched literally, LIKE wildcards included.
			runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{IDPrefix: s, OmitPayloads: true, Limit: durable.ListLimitMax})
			require.NoError(t, err)
			require.NotEmpty(t, runs)
			for _, r := range runs {
				require.True(t, strings.HasPrefix(r.ID, s), "IDPrefix %q listed %q", s, r.ID)
			}
			// IDs match exactly.
			runs, _, err = e.ListWorkflows(ctx, &durable.ListParams{IDs: []string{"no-such-run", s}, OmitPayloads: true})
			require.NoError(t, err)
			require.Len(t, runs, 1, "IDs [%q]", s)
			require.Equal(t, s, runs[0].ID)

			// Workflow name, queue name, dedup ID and partition key.
			hn, err := named[s].Enqueue(ctx, queues[s], s, &durable.EnqueueOpts{DedupID: s, PartitionKey: s})
			require.NoError(t, err, "%q", s)
			got, err := hn.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, s, got)
			runs, _, err = e.ListWorkflows(ctx, &durable.ListParams{Name: s, Queue: s})
			require.NoError(t, err)
			require.Len(t, runs, 1, "runs named %q on queue %q", s, s)
			require.Equal(t, hn.ID(), runs[0].ID)
			st, err := queues[s].Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, s, st.Name)

			// Schedule name.
			if len(s) > durable.ScheduleNameMax {
				continue
			}
			tick := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			sid, err := e.TriggerSchedule(ctx, s, tick)
			require.NoError(t, err, "%q", s)
			require.Equal(t, "sched:"+s+":manual:"+tick.Format(time.RFC3339Nano), sid)
			hs, err := named[s].Handle(ctx, sid)
			require.NoError(t, err)
			got, err = hs.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, s, got)
			require.NoError(t, e.PauseSchedule(ctx, s))
			require.NoError(t, e.ResumeSchedule(ctx, s))
		}
		scheds, err := e.ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, scheds, len(hostileNames)-1) // all but the 255-byte name

		// Invalid strings fail with ErrInvalidArgument at every entry point,
		// before anything is written.
		q := queues[hostileNames[0]]
		for _, s := range invalidNames {
			_, err := plain.Start(ctx, "x", &durable.StartOpts{ID: s})
			requireInvalid(t, err, "Start ID %q", s)
			_, err = plain.Enqueue(ctx, q, "x", &durable.EnqueueOpts{ID: s})
			requireInvalid(t, err, "Enqueue ID %q", s)
			_, err = plain.Enqueue(ctx, q, "x", &durable.EnqueueOpts{DedupID: s})
			requireInvalid(t, err, "Enqueue DedupID %q", s)
			_, err = plain.Enqueue(ctx, q, "x", &durable.EnqueueOpts{PartitionKey: s})
			requireInvalid(t, err, "Enqueue PartitionKey %q", s)
			_, err = plain.Enqueue(ctx, e.QueueRef(s), "x", nil)
			requireInvalid(t, err, "Enqueue on QueueRef %q", s)
			_, err = plain.Handle(ctx, s)
			requireInvalid(t, err, "Handle %q", s)
			_, err = plain.Fork(ctx, s, 0, nil)
			requireInvalid(t, err, "Fork %q", s)
			_, err = plain.Fork(ctx, "bystander-plain", 0, &durable.ForkOpts{ID: s})
			requireInvalid(t, err, "ForkOpts.ID %q", s)
			_, err = e.Fork(ctx, s, 0, nil)
			requireInvalid(t, err, "Engine.Fork %q", s)
			_, err = e.Inspect(ctx, s)
			requireInvalid(t, err, "Inspect %q", s)
			requireInvalid(t, e.Cancel(ctx, s, nil), "Cancel %q", s)
			requireInvalid(t, e.Resume(ctx, s, nil), "Resume %q", s)
			_, err = e.ListSteps(ctx, s)
			requireInvalid(t, err, "ListSteps %q", s)
			requireInvalid(t, durable.Send(ctx, e, s, "t", 1, nil), "Send ID %q", s)
			requireInvalid(t, durable.Send(ctx, e, "bystander-0", s, 1, nil), "Send topic %q", s)
			requireInvalid(t, durable.Send(ctx, e, "bystander-0", "t", 1, &durable.SendOpts{IdempotencyKey: s}), "Send key %q", s)
			_, _, err = durable.GetEvent[int](ctx, e, s, "k", 0)
			requireInvalid(t, err, "GetEvent ID %q", s)
			_, _, err = durable.GetEvent[int](ctx, e, "bystander-0", s, 0)
			requireInvalid(t, err, "GetEvent key %q", s)
			_, _, err = durable.StreamEntries[int](ctx, e, s, "k", 0, 0)
			requireInvalid(t, err, "StreamEntries ID %q", s)
			_, _, err = durable.StreamEntries[int](ctx, e, "bystander-0", s, 0, 0)
			requireInvalid(t, err, "StreamEntries key %q", s)
			for _, p := range []durable.ListParams{{Name: s}, {Queue: s}, {Parent: s}, {IDPrefix: s}, {IDs: []string{"bystander-0", s}}, {Cursor: s}} {
				_, _, err = e.ListWorkflows(ctx, &p)
				requireInvalid(t, err, "ListWorkflows %+v", p)
			}
			requireInvalid(t, e.PauseSchedule(ctx, s), "PauseSchedule %q", s)
			requireInvalid(t, e.ResumeSchedule(ctx, s), "ResumeSchedule %q", s)
			requireInvalid(t, e.DeleteSchedule(ctx, s), "DeleteSchedule %q", s)
			requireInvalid(t, e.SetScheduleSpec(ctx, s, "@daily", nil), "SetScheduleSpec %q", s)
			_, err = e.TriggerSchedule(ctx, s, time.Time{})
			requireInvalid(t, err, "TriggerSchedule %q", s)
			_, err = e.BackfillSchedule(ctx, s, time.Now().Add(-time.Hour), time.Now())
			requireInvalid(t, err, "BackfillSchedule %q", s)

			if jsonRoundTrip(t, s) != s {
				continue // the input reaches workflow code as valid UTF-8 (U+FFFD)
			}
			h, err := invalidInWorkflow.Start(ctx, s, nil)
			require.NoError(t, err)
			bad, err := h.Result(ctx)
			require.NoError(t, err)
			require.Empty(t, bad, "calls from workflow code with %q", s)
		}
		_, err = plain.Enqueue(ctx, q, "x", &durable.EnqueueOpts{Priority: math.MaxInt32 + 1})
		requireInvalid(t, err, "Priority over int32")
		_, err = plain.Start(ctx, "x", &durable.StartOpts{Timeout: -time.Second})
		requireInvalid(t, err, "negative timeout")

		// Nothing outside the hostile runs changed, and no table was dropped.
		require.Equal(t, before, schemaFingerprint(t, b.pool, b.schema))
	})

	// Payloads: payloads with NUL characters, invalid UTF-8,
	// unicode line separators and SQL round-trip as encoding/json does (live
	// and on replay alike); payloads of exactly Config.MaxPayloadBytes encoded
	// bytes pass and one byte more fails with *PayloadTooLargeError, for
	// inputs, outputs, step outputs, messages, events and stream entries.
	t.Run("Payloads", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const limit = 4096
		type probe struct {
			Size  int    // length of the string payload
			Where string // which payload gets it
		}
		str := func(n int) string { return strings.Repeat("p", n) } // encodes to n+2 bytes
		var wf *durable.Workflow[probe, string]
		var echo *durable.Workflow[map[string]string, map[string]string]
		e := b.engine(t, func(c *durable.Config) { c.MaxPayloadBytes = limit }, func(e *durable.Engine) {
			echo = durable.Register(e, "echo-map", func(wctx durable.Context, in map[string]string) (map[string]string, error) {
				return durable.Step(wctx, "copy", func(ctx context.Context) (map[string]string, error) { return in, nil }, nil)
			}, nil)
			wf = durable.Register(e, "sized", func(wctx durable.Context, p probe) (string, error) {
				v := str(p.Size)
				switch p.Where {
				case "step":
					_, err := durable.Step(wctx, "s", func(ctx context.Context) (string, error) { return v, nil }, nil)
					return "", err
				case "event":
					return "", durable.SetEvent(wctx, "k", v)
				case "stream":
					return "", durable.StreamWrite(wctx, "k", v)
				case "send":
					return "", durable.SendStep(wctx, wctx.WorkflowID(), "t", v)
				case "output":
					return v, nil
				}
				return "", nil
			}, nil)
		})
		ctx := ctxT(t)

		weird := map[string]string{
			"nul":               "a\x00b",
			"bad-utf8":          "a\xffb\xed\xa0\x80",
			"separators":        "\u2028\u2029\ufeff",
			"sql":               `'); DROP TABLE steps; --`,
			"escapes":           `\u0000 \" \\`,
			"'; key --\x00\xff": "v",
		}
		h, err := echo.Start(ctx, weird, nil)
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err)
		want := jsonRoundTrip(t, weird)
		require.Equal(t, want, got)
		require.Equal(t, "a\x00b", got["nul"], "NUL survives the json column")
		require.Equal(t, "a\ufffdb\ufffd\ufffd\ufffd", got["bad-utf8"], "invalid UTF-8 becomes U+FFFD, as encoding/json makes it")
		// Replay gives the same: a second reader decodes the stored rows.
		steps, err := e.ListSteps(ctx, h.ID())
		require.NoError(t, err)
		var replayed map[string]string
		require.NoError(t, json.Unmarshal(steps[0].Output, &replayed))
		require.Equal(t, want, replayed)

		// Inputs: limit-2 characters encode to exactly limit bytes.
		var tl *durable.PayloadTooLargeError
		_, err = echo.Start(ctx, map[string]string{"k": str(limit - 10)}, nil) // {"k":"..."} is 8 bytes more
		require.NoError(t, err)
		_, err = echo.Start(ctx, map[string]string{"k": str(limit - 7)}, nil)
		require.ErrorAs(t, err, &tl)
		require.Equal(t, limit+1, tl.Size)
		require.Equal(t, limit, tl.Limit)

		var last string
		for _, where := range []string{"step", "event", "stream", "send", "output"} {
			h, err := wf.Start(ctx, probe{Size: limit - 2, Where: where}, nil)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.NoError(t, err, "%s of exactly %d bytes", where, limit)

			h, err = wf.Start(ctx, probe{Size: limit - 1, Where: where}, nil)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.ErrorIs(t, err, durable.ErrPayloadTooLarge, "%s of %d bytes", where, limit+1)
			require.Contains(t, err.Error(), fmt.Sprintf("%d bytes encoded, over the limit of %d", limit+1, limit))
			st, err := h.Status(ctx)
			require.NoError(t, err)
			require.Equal(t, durable.StatusError, st, "visible status for %s", where)
			last = h.ID()
		}
		for _, v := range []any{str(limit - 2), str(limit - 1)} {
			err := durable.Send(ctx, e, last, "late", v, nil)
			if len(v.(string)) == limit-1 {
				require.ErrorAs(t, err, &tl)
			} else {
				require.ErrorIs(t, err, durable.ErrWorkflowFinished)
			}
		}
	})

	// LongSchemaName: a schema name of the maximal 63 bytes works,
	// notifications included (its LISTEN/NOTIFY channel used to be over
	// Postgres's 63-byte limit, so every notification failed).
	t.Run("LongSchemaName", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		ctx := ctxT(t)
		schema := "s" + strings.Repeat("0", 50) + fmt.Sprintf("%012d", time.Now().UnixNano()%1e12)
		require.Len(t, schema, 63)
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		})
		cfg := func(id string) *durable.Config {
			return &durable.Config{Schema: schema, ExecutorID: id, PollInterval: time.Hour, LeaseTTL: time.Second}
		}
		waiter, err := durable.New(pool, cfg("waiter"))
		require.NoError(t, err)
		wfW := durable.Register(waiter, "wait-msg", func(wctx durable.Context, in int) (int, error) {
			v, _, err := durable.Recv[int](wctx, "t", 20*time.Second) // below ParkThreshold: no takeover by the sender
			return v, err
		}, nil)
		require.NoError(t, waiter.Launch(ctx))
		defer waiter.Shutdown(context.Background())
		sender, err := durable.New(pool, cfg("sender"))
		require.NoError(t, err)
		wfS := durable.Register(sender, "wait-msg", func(wctx durable.Context, in int) (int, error) { return 0, nil }, nil)
		require.NoError(t, sender.Launch(ctx))
		defer sender.Shutdown(context.Background())

		h, err := wfW.Start(ctx, 1, &durable.StartOpts{ID: "long-schema"})
		require.NoError(t, err)
		// Another engine's send wakes the waiter and its finish wakes the other
		// engine's handle: with PollInterval an hour, only notifications can.
		require.NoError(t, durable.Send(ctx, sender, h.ID(), "t", 7, nil))
		hs, err := wfS.Handle(ctx, h.ID())
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		v, err := hs.Result(wctx)
		require.NoError(t, err)
		require.Equal(t, 7, v)
	})
}

func requireInvalid(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	assert.ErrorIs(t, err, durable.ErrInvalidArgument, append([]any{format}, args...)...)
}

// schemaFingerprint is the list of tables of schema and a checksum of the
// victim table and of every row that belongs to the bystander runs.
func schemaFingerprint(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	ctx := ctxT(t)
	var tables string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class
WHERE relnamespace = $1::regnamespace AND relkind = 'r'`, pgx.Identifier{schema}.Sanitize()).Scan(&tables))
	s := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	var sum string
	require.NoError(t, pool.QueryRow(ctx, `SELECT concat_ws('|',
	(SELECT md5(string_agg(v::text, ',' ORDER BY v.id)) FROM `+s("victim")+` v),
	(SELECT md5(string_agg(w::text, ',' ORDER BY w.id)) FROM `+s("workflows")+` w WHERE w.id LIKE 'bystander-%'),
	(SELECT md5(string_agg(x::text, ',' ORDER BY x.workflow_id, x.pos)) FROM `+s("steps")+` x WHERE x.workflow_id LIKE 'bystander-%'),
	(SELECT md5(string_agg(m::text, ',' ORDER BY m.id)) FROM `+s("messages")+` m WHERE m.workflow_id LIKE 'bystander-%'),
	(SELECT md5(string_agg(v::text, ',' ORDER BY v.workflow_id, v.key)) FROM `+s("events")+` v WHERE v.workflow_id LIKE 'bystander-%'),
	(SELECT md5(string_agg(r::text, ',' ORDER BY r.workflow_id, r.key, r.off)) FROM `+s("streams")+` r WHERE r.workflow_id LIKE 'bystander-%'),
	(SELECT count(*) FROM `+s("victim")+`))`).Scan(&sum))
	return tables + "|" + sum
}

func jsonRoundTrip[T any](t *testing.T, v T) T {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out T
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}
