package durable_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestList covers the listings: runs with their filters and pages, a
// window of a run's steps and its events, queues, and runs by the topic
// they wait on.
func TestList(t *testing.T) {
	t.Parallel()

	t.Run("Workflows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		var ok, fail, block *durable.Workflow[int, int]
		var parent *durable.Workflow[int, int]
		var q *durable.Queue
		e := b.engine(t, nil, func(e *durable.Engine) {
			ok = durable.Register(e, "list-ok", func(wctx durable.Context, in int) (int, error) { return in * 2, nil }, nil)
			fail = durable.Register(e, "list-fail", func(wctx durable.Context, in int) (int, error) {
				return 0, durable.Permanent(errors.New("list-fail failed"))
			}, nil)
			block = durable.Register(e, "list-block", func(wctx durable.Context, in int) (int, error) {
				select {
				case <-release:
					return in, nil
				case <-wctx.Done():
					return 0, wctx.Err()
				}
			}, nil)
			parent = durable.Register(e, "list-parent", func(wctx durable.Context, in int) (int, error) {
				sum := 0
				for i := range 2 {
					h, err := ok.StartChild(wctx, i, nil)
					if err != nil {
						return 0, err
					}
					v, err := h.Result(wctx)
					if err != nil {
						return 0, err
					}
					sum += v
				}
				return sum, nil
			}, nil)
			q = durable.RegisterQueue(e, "list-q", nil)
		})
		defer close(release)
		ctx := ctxT(t)
		require.NoError(t, q.Pause(ctx))

		// Seven runs started at once share commits, and so creation times:
		// paging must order them by ID.
		var wg sync.WaitGroup
		errs := make([]error, 7)
		for i := range 7 {
			wg.Go(func() {
				h, err := ok.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("lt-ok-%d", i)})
				if err == nil {
					_, err = h.Result(ctx)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		for i := range 3 {
			h, err := fail.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("lt-fail-%d", i)})
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.Error(t, err)
		}
		_, err := block.Start(ctx, 1, &durable.StartOpts{ID: "lt-block-0", Timeout: time.Hour})
		require.NoError(t, err)
		_, err = block.Start(ctx, 2, &durable.StartOpts{ID: "lt-block-1"})
		require.NoError(t, err)
		require.NoError(t, e.Cancel(ctx, "lt-block-1", nil))
		h, err := parent.Start(ctx, 0, &durable.StartOpts{ID: "lt-parent"})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		for i := range 2 {
			_, err := ok.Enqueue(ctx, q, 100+i, &durable.EnqueueOpts{ID: fmt.Sprintf("lt-q-%d", i)})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{Statuses: []durable.Status{durable.StatusCancelled}})
			return err == nil && len(runs) == 1
		}, 10*time.Second, 10*time.Millisecond)

		list := func(p *durable.ListParams) []durable.WorkflowInfo {
			t.Helper()
			runs, next, err := e.ListWorkflows(ctx, p)
			require.NoError(t, err)
			require.Empty(t, next)
			return runs
		}
		ids := func(runs []durable.WorkflowInfo) []string {
			out := []string{}
			for _, r := range runs {
				out = append(out, r.ID)
			}
			return out
		}

		all := list(nil)
		require.Len(t, all, 17)
		for i := 1; i < len(all); i++ {
			prev, cur := all[i-1], all[i]
			newer := prev.CreatedAt.After(cur.CreatedAt) || (prev.CreatedAt.Equal(cur.CreatedAt) && prev.ID > cur.ID)
			require.True(t, newer, "order: %s (%v) before %s (%v)", prev.ID, prev.CreatedAt, cur.ID, cur.CreatedAt)
		}
		byID := map[string]durable.WorkflowInfo{}
		for _, r := range all {
			byID[r.ID] = r
		}

		// Fields.
		okRun := byID["lt-ok-3"]
		require.Equal(t, "list-ok", okRun.Name)
		require.Equal(t, durable.StatusSuccess, okRun.Status)
		require.Equal(t, "test", okRun.AppVersion)
		require.JSONEq(t, "3", string(okRun.Input))
		require.JSONEq(t, "6", string(okRun.Output))
		require.NoError(t, okRun.Error)
		require.Empty(t, okRun.Parent)
		require.Empty(t, okRun.Queue)
		require.True(t, okRun.Deadline.IsZero())
		require.False(t, okRun.CreatedAt.IsZero())
		require.False(t, okRun.UpdatedAt.Before(okRun.CreatedAt))
		require.Zero(t, okRun.RecoveryAttempts)
		failRun := byID["lt-fail-1"]
		require.Equal(t, durable.StatusError, failRun.Status)
		require.ErrorIs(t, failRun.Error, durable.ErrPermanent)
		require.Contains(t, failRun.Error.Error(), "list-fail failed")
		require.Nil(t, failRun.Output)
		pending := byID["lt-block-0"]
		require.Equal(t, durable.StatusPending, pending.Status)
		require.Equal(t, e.ExecutorID(), pending.Executor)
		require.False(t, pending.Deadline.IsZero())
		require.ErrorIs(t, byID["lt-block-1"].Error, durable.ErrCancelled)
		queued := byID["lt-q-1"]
		require.Equal(t, durable.StatusEnqueued, queued.Status)
		require.Equal(t, "list-q", queued.Queue)
		require.Empty(t, queued.Executor)
		child := byID["lt-parent/0"]
		require.Equal(t, "lt-parent", child.Parent)

		// Filters.
		require.Len(t, list(&durable.ListParams{Statuses: []durable.Status{durable.StatusSuccess}}), 10)
		require.ElementsMatch(t, []string{"lt-fail-0", "lt-fail-1", "lt-fail-2"},
			ids(list(&durable.ListParams{Statuses: []durable.Status{durable.StatusError}})))
		require.ElementsMatch(t, []string{"lt-block-0", "lt-block-1"},
			ids(list(&durable.ListParams{Statuses: []durable.Status{durable.StatusPending, durable.StatusCancelled}})))
		require.ElementsMatch(t, []string{"lt-fail-0", "lt-fail-1", "lt-fail-2"}, ids(list(&durable.ListParams{Name: "list-fail"})))
		require.Empty(t, list(&durable.ListParams{Name: "no-such-workflow"}))
		require.Equal(t, []string{"lt-q-1", "lt-q-0"}, ids(list(&durable.ListParams{Queue: "list-q"})))
		require.ElementsMatch(t, []string{"lt-parent/0", "lt-parent/1"}, ids(list(&durable.ListParams{Parent: "lt-parent"})))
		require.Len(t, list(&durable.ListParams{IDPrefix: "lt-ok-"}), 7)
		require.Len(t, list(&durable.ListParams{IDPrefix: "lt-parent"}), 3)
		require.Empty(t, list(&durable.ListParams{IDPrefix: "lt_ok"}), "_ is not a wildcard")
		require.Empty(t, list(&durable.ListParams{IDPrefix: "lt-%"}), "% is not a wildcard")
		require.Equal(t, []string{"lt-ok-2"}, ids(list(&durable.ListParams{Name: "list-ok", IDPrefix: "lt-ok-2", Statuses: []durable.Status{durable.StatusSuccess}})))
		var wantIDs []string // in the listing's order
		for _, r := range all {
			if r.ID == "lt-fail-0" || r.ID == "lt-ok-2" {
				wantIDs = append(wantIDs, r.ID)
			}
		}
		require.Equal(t, wantIDs, ids(list(&durable.ListParams{IDs: []string{"lt-ok-2", "lt-fail-0", "no-such-run", "lt-ok-"}})),
			"exact IDs only, in the listing's order; unknown ones left out")
		require.Equal(t, []string{"lt-fail-0"}, ids(list(&durable.ListParams{IDs: []string{"lt-fail-0", "lt-ok-2"}, Statuses: []durable.Status{durable.StatusError}})))
		require.Empty(t, list(&durable.ListParams{IDs: []string{}}), "an empty, non-nil IDs keeps no run")
		require.Equal(t, []string{"lt-ok-2"}, ids(list(&durable.ListParams{IDs: []string{"lt-ok-2", "lt-ok-2"}})))
		polled := list(&durable.ListParams{IDs: []string{"lt-ok-2"}, OmitPayloads: true})
		require.Len(t, polled, 1)
		require.Equal(t, durable.StatusSuccess, polled[0].Status)
		require.Nil(t, polled[0].Output)
		for _, r := range list(&durable.ListParams{OmitPayloads: true}) {
			require.Nil(t, r.Input, r.ID)
			require.Nil(t, r.Output, r.ID)
		}

		// Time range [From, To): compare with the full listing for every pair
		// of distinct creation times.
		var times []time.Time
		for _, r := range all {
			if len(times) == 0 || !times[len(times)-1].Equal(r.CreatedAt) {
				times = append(times, r.CreatedAt)
			}
		}
		require.Greater(t, len(times), 3)
		t.Logf("%d runs over %d distinct creation times", len(all), len(times))
		for _, pair := range [][2]int{{len(times) - 1, 0}, {len(times) - 2, 1}, {2, 1}} {
			from, to := times[pair[0]], times[pair[1]]
			var want []string
			for _, r := range all {
				if !r.CreatedAt.Before(from) && r.CreatedAt.Before(to) {
					want = append(want, r.ID)
				}
			}
			require.Equal(t, want, ids(list(&durable.ListParams{From: from, To: to})), "from %v to %v", from, to)
		}
		require.Len(t, list(&durable.ListParams{From: times[0]}), countAt(all, times[0]))
		require.Empty(t, list(&durable.ListParams{From: times[0].Add(time.Second)}))
		require.Len(t, list(&durable.ListParams{To: times[0].Add(time.Second)}), 17)

		// Keyset paging: every page size gives the full listing, in order, with
		// no run twice and none missed.
		for _, size := range []int{1, 2, 3, 5, 16, 17, 100} {
			var got []string
			cursor := ""
			for page := 0; ; page++ {
				require.Less(t, page, 20)
				runs, next, err := e.ListWorkflows(ctx, &durable.ListParams{Limit: size, Cursor: cursor})
				require.NoError(t, err)
				require.LessOrEqual(t, len(runs), size)
				got = append(got, ids(runs)...)
				if next == "" {
					break
				}
				require.Len(t, runs, size)
				cursor = next
			}
			require.Equal(t, ids(all), got, "page size %d", size)
		}
		// Paging with a filter.
		var got []string
		cursor := ""
		for {
			runs, next, err := e.ListWorkflows(ctx, &durable.ListParams{Name: "list-ok", Limit: 2, Cursor: cursor, OmitPayloads: true})
			require.NoError(t, err)
			got = append(got, ids(runs)...)
			if next == "" {
				break
			}
			cursor = next
		}
		require.Equal(t, ids(list(&durable.ListParams{Name: "list-ok"})), got)
		require.Len(t, got, 11)
	})

	t.Run("WorkflowsBadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := b.engine(t, nil, nil)
		ctx := ctxT(t)
		now := time.Now()
		for name, p := range map[string]*durable.ListParams{
			"garbage cursor":     {Cursor: "not a cursor"},
			"base64 garbage":     {Cursor: base64.RawURLEncoding.EncodeToString([]byte("hello"))},
			"wrong version":      {Cursor: base64.RawURLEncoding.EncodeToString([]byte("9.123.id"))},
			"bad time":           {Cursor: base64.RawURLEncoding.EncodeToString([]byte("1.soon.id"))},
			"empty id":           {Cursor: base64.RawURLEncoding.EncodeToString([]byte("1.123."))},
			"negative limit":     {Limit: -1},
			"limit over max":     {Limit: durable.ListLimitMax + 1},
			"unknown status":     {Statuses: []durable.Status{"running"}},
			"to before from":     {From: now, To: now.Add(-time.Second)},
			"empty range":        {From: now, To: now},
			"invalid UTF-8 name": {Name: "\xff"},
			"empty ID in IDs":    {IDs: []string{"a", ""}},
			"NUL in IDs":         {IDs: []string{"a\x00b"}},
			"too many IDs":       {IDs: make([]string, durable.ListLimitMax+1)},
		} {
			_, _, err := e.ListWorkflows(ctx, p)
			require.ErrorIs(t, err, durable.ErrInvalidArgument, name)
		}
		runs, next, err := e.ListWorkflows(ctx, &durable.ListParams{Limit: durable.ListLimitMax})
		require.NoError(t, err)
		require.Empty(t, runs)
		require.Empty(t, next)
		_, _, err = e.ListWorkflows(context.Background(), nil)
		require.NoError(t, err)
	})

	// StepWindowAndEvents: a window of a long run's steps (from a
	// position, or the last N) with the total, and the events it published.
	t.Run("StepWindowAndEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "window-wf", func(wctx durable.Context, n int) (int, error) {
				for i := range n {
					if _, err := durable.Step(wctx, "s", func(context.Context) (int, error) { return i, nil }, nil); err != nil {
						return 0, err
					}
				}
				if err := durable.SetEvent(wctx, "progress", "half"); err != nil {
					return 0, err
				}
				if err := durable.SetEvent(wctx, "progress", "done"); err != nil {
					return 0, err
				}
				return n, durable.SetEvent(wctx, "answer", 42)
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 25, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		all, err := e.ListSteps(ctx, h.ID())
		require.NoError(t, err)
		require.Len(t, all, 28) // 25 steps and 3 event records

		positions := func(steps []durable.StepRecord) []int {
			var p []int
			for _, s := range steps {
				p = append(p, s.Pos)
			}
			return p
		}
		for _, c := range []struct {
			from, limit int
			want        []int
		}{
			{-1, 3, []int{25, 26, 27}},
			{0, 3, []int{0, 1, 2}},
			{26, 10, []int{26, 27}},
			{100, 10, nil},
			{-1, 100, positions(all)},
		} {
			got, total, err := e.ListStepWindow(ctx, h.ID(), c.from, c.limit)
			require.NoError(t, err)
			require.Equal(t, 28, total)
			require.Equal(t, c.want, positions(got), "from %d limit %d", c.from, c.limit)
			for _, s := range got {
				require.Equal(t, all[s.Pos], s)
			}
		}
		_, _, err = e.ListStepWindow(ctx, h.ID(), 0, 0)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, _, err = e.ListStepWindow(ctx, h.ID(), 0, durable.StepWindowMax+1)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, _, err = e.ListStepWindow(ctx, "no-such-run", -1, 10)
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

		events, err := e.ListEvents(ctx, h.ID())
		require.NoError(t, err)
		require.Len(t, events, 2)
		require.Equal(t, "answer", events[0].Key)
		require.JSONEq(t, `42`, string(events[0].Value))
		require.Equal(t, "progress", events[1].Key)
		require.JSONEq(t, `"done"`, string(events[1].Value))
		_, err = e.ListEvents(ctx, "no-such-run")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	})

	t.Run("Queues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := b.engine(t, nil, func(e *durable.Engine) {
			durable.RegisterQueue(e, "b-queue", &durable.QueueOpts{GlobalConcurrency: 3})
			durable.RegisterQueue(e, "a-queue", nil)
		})
		ctx := ctxT(t)
		require.NoError(t, e.QueueRef("b-queue").Pause(ctx))
		qs, err := e.ListQueues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 2)
		require.Equal(t, "a-queue", qs[0].Name)
		require.False(t, qs[0].Paused)
		require.Equal(t, "b-queue", qs[1].Name)
		require.True(t, qs[1].Paused)
		require.Equal(t, 3, qs[1].Settings.GlobalConcurrency)
	})

	// WaitTopic: a run blocked in Recv shows the topic it waits on, in
	// memory and parked alike, the listing filters by it, and the topic is
	// gone once the message is received.
	t.Run("WaitTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[time.Duration, string]
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = 10 * time.Second }, func(e *durable.Engine) {
			wf = durable.Register(e, "waiter", func(wctx durable.Context, timeout time.Duration) (string, error) {
				msg, _, err := durable.Recv[string](wctx, "approval:1", timeout)
				return msg, err
			}, nil)
		})
		ctx := ctxT(t)

		_, err := e.Inspect(ctx, "nope")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
		_, err = e.Inspect(ctx, "")
		require.ErrorIs(t, err, durable.ErrInvalidArgument)

		inMemory, err := wf.Start(ctx, time.Minute, &durable.StartOpts{ID: "mem"})
		require.NoError(t, err)
		parked, err := wf.Start(ctx, time.Hour, &durable.StartOpts{ID: "parked"})
		require.NoError(t, err)
		done, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "done"})
		require.NoError(t, err)
		_, err = done.Result(ctx)
		require.NoError(t, err)

		waiting := func(prefix string) []string {
			runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: prefix, OmitPayloads: true})
			require.NoError(t, err)
			var ids []string
			for _, r := range runs {
				require.Equal(t, "approval:1", r.WaitTopic)
				ids = append(ids, r.ID)
			}
			return ids
		}
		require.Eventually(t, func() bool { return len(waiting("approval:")) == 2 }, 30*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, []string{"mem", "parked"}, waiting("approval:"))
		require.Empty(t, waiting("approval_")) // LIKE characters are literal
		info, err := e.Inspect(ctx, "mem")
		require.NoError(t, err)
		require.Equal(t, "approval:1", info.WaitTopic)
		require.Equal(t, durable.StatusPending, info.Status)
		require.JSONEq(t, `60000000000`, string(info.Input))
		info, err = e.Inspect(ctx, "done")
		require.NoError(t, err)
		require.Empty(t, info.WaitTopic)
		require.Equal(t, durable.StatusSuccess, info.Status)

		for _, h := range []*durable.Handle[string]{inMemory, parked} {
			require.NoError(t, durable.Send(ctx, e, h.ID(), "approval:1", "yes", nil))
			got, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "yes", got)
			info, err := e.Inspect(ctx, h.ID())
			require.NoError(t, err)
			require.Empty(t, info.WaitTopic)
		}
		require.Empty(t, waiting("approval:"))

		_, _, err = e.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: "a\x00"})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
	})

	// WaitTopicSelect: a Select on messages is listed by any of its
	// topics, waiting in memory and parked alike, and shows the first of
	// them that matches.
	t.Run("WaitTopicSelect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[time.Duration, string]
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Hour }, func(e *durable.Engine) {
			wf = durable.Register(e, "picker", func(wctx durable.Context, timeout time.Duration) (string, error) {
				other, approval := durable.OnMessage[string]("other"), durable.OnMessage[string]("approval:2")
				if _, err := durable.Select(wctx, other, approval, durable.After(timeout)); err != nil {
					return "", err
				}
				return approval.Value()
			}, nil)
		})
		ctx := ctxT(t)
		inMemory, err := wf.Start(ctx, 30*time.Minute, &durable.StartOpts{ID: "mem"})
		require.NoError(t, err)
		parked, err := wf.Start(ctx, 2*time.Hour, &durable.StartOpts{ID: "parked"})
		require.NoError(t, err)
		waiting := func(prefix, topic string) []string {
			runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: prefix, OmitPayloads: true})
			require.NoError(t, err)
			var ids []string
			for _, r := range runs {
				require.Equal(t, topic, r.WaitTopic)
				ids = append(ids, r.ID)
			}
			return ids
		}
		require.Eventually(t, func() bool { return len(waiting("approval:", "approval:2")) == 2 }, 30*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, []string{"mem", "parked"}, waiting("oth", "other"))
		for id, owned := range map[string]bool{"mem": true, "parked": false} {
			var has bool
			require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT executor_id IS NOT NULL FROM %q.workflows WHERE id = $1`, b.schema), id).Scan(&has))
			require.Equal(t, owned, has, "%s waits in memory: %v", id, owned)
		}
		info, err := e.Inspect(ctx, "mem")
		require.NoError(t, err)
		require.Equal(t, "other", info.WaitTopic, "unfiltered, the first topic")

		for _, h := range []*durable.Handle[string]{inMemory, parked} {
			require.NoError(t, durable.Send(ctx, e, h.ID(), "approval:2", "yes", nil))
			got, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "yes", got)
		}
		require.Empty(t, waiting("approval:", ""))
	})
}

func countAt(runs []durable.WorkflowInfo, at time.Time) int {
	n := 0
	for _, r := range runs {
		if !r.CreatedAt.Before(at) {
			n++
		}
	}
	return n
}

// ListWorkflows pages through runs newest first.
func ExampleEngine_ListWorkflows() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_list CASCADE")
	eng, err := durable.New(pool, &durable.Config{Schema: "example_list", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	double := durable.Register(eng, "double", func(wctx durable.Context, n int) (int, error) { return 2 * n, nil }, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	for i := range 3 {
		h, err := double.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("double-%d", i)})
		if err != nil {
			panic(err)
		}
		_, _ = h.Result(ctx)
	}

	params := &durable.ListParams{Name: "double", Statuses: []durable.Status{durable.StatusSuccess}, Limit: 2}
	for page := 1; ; page++ {
		runs, next, err := eng.ListWorkflows(ctx, params)
		if err != nil {
			panic(err)
		}
		for _, r := range runs {
			fmt.Println(page, r.ID, r.Status, string(r.Output))
		}
		if next == "" {
			break
		}
		params.Cursor = next
	}
	// Output:
	// 1 double-2 success 4
	// 1 double-1 success 2
	// 2 double-0 success 0
}
