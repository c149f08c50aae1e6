package durable_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// tagsOf returns the tags of run id, as Inspect reads them.
func tagsOf(t *testing.T, e *durable.Engine, id string) map[string]string {
	t.Helper()
	info, err := e.Inspect(ctxT(t), id)
	require.NoError(t, err)
	return info.Tags
}

// stepNames returns the names of the steps run id recorded.
func stepNames(t *testing.T, e *durable.Engine, id string) []string {
	t.Helper()
	steps, err := e.ListSteps(ctxT(t), id)
	require.NoError(t, err)
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	return names
}

// TestTagsAtStart: every way of creating a run gives it the tags of its
// options, which Inspect and ListWorkflows show: a start, StartTx, a
// client's start, a child, an enqueue, batches, a debounced enqueue (its
// first enqueue's tags), a Batcher's batch (its first item's), a fork (its source's unless told otherwise) and
// a continuation (the run's, SetTag's included, unless told otherwise). A
// start that finds its ID taken leaves the run's tags as they are.
func TestTagsAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var echo, parent *durable.Workflow[string, string]
	var batched *durable.Workflow[[]string, int]
	var chain *durable.Workflow[int, int]
	var q *durable.Queue
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "tagq", nil)
		echo = durable.Register(e, "echo", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
		batched = durable.Register(e, "batched", func(wctx durable.Context, in []string) (int, error) { return len(in), nil }, nil)
		parent = durable.Register(e, "parent", func(wctx durable.Context, in string) (string, error) {
			h, err := echo.StartChild(wctx, in, &durable.StartOpts{Tags: map[string]string{"role": "child"}})
			if err != nil {
				return "", err
			}
			return h.Await(wctx)
		}, nil)
		chain = durable.Register(e, "chain", func(wctx durable.Context, n int) (int, error) {
			if err := durable.SetTag(wctx, "link", fmt.Sprint(n)); err != nil {
				return 0, err
			}
			switch n {
			case 1:
				return 0, chain.ContinueAsNew(wctx, 2, nil)
			case 2:
				return 0, chain.ContinueAsNew(wctx, 3, &durable.StartOpts{Tags: map[string]string{"fresh": "yes"}})
			}
			return n, nil
		}, nil)
	})
	ctx := ctxT(t)
	one := func(k, v string) map[string]string { return map[string]string{k: v} }
	wait := func(h *durable.Handle[string], err error) string {
		t.Helper()
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		return h.ID()
	}

	id := wait(echo.Start(ctx, "a", &durable.StartOpts{ID: "start", Tags: map[string]string{"customer": "acme", "tier": "gold"}}))
	require.Equal(t, map[string]string{"customer": "acme", "tier": "gold"}, tagsOf(t, e, id))
	again := wait(echo.Start(ctx, "a", &durable.StartOpts{ID: "start", Tags: one("customer", "other")}))
	require.Equal(t, id, again, "the same ID and input: the same run")
	require.Equal(t, map[string]string{"customer": "acme", "tier": "gold"}, tagsOf(t, e, id), "its tags as they were")

	plain := wait(echo.Start(ctx, "a", nil))
	require.Nil(t, tagsOf(t, e, plain))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	h, err := echo.StartTx(ctx, tx, "a", &durable.StartOpts{Tags: one("via", "tx")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, one("via", "tx"), tagsOf(t, e, wait(h, nil)))

	c := b.client(t, nil)
	cid, err := c.Start(ctx, "echo", "a", &durable.StartOpts{Tags: one("via", "client")})
	require.NoError(t, err)
	require.Equal(t, one("via", "client"), tagsOf(t, e, cid))
	cid, err = c.Enqueue(ctx, "echo", "tagq", "a", &durable.EnqueueOpts{Tags: one("via", "client-enqueue")})
	require.NoError(t, err)
	require.Equal(t, one("via", "client-enqueue"), tagsOf(t, e, cid))

	pid := wait(parent.Start(ctx, "a", &durable.StartOpts{Tags: one("role", "parent")}))
	require.Equal(t, one("role", "parent"), tagsOf(t, e, pid))
	require.Equal(t, one("role", "child"), tagsOf(t, e, pid+"/0"), "a child has its own tags, not its parent's")

	require.Equal(t, one("via", "enqueue"), tagsOf(t, e, wait(echo.Enqueue(ctx, q, "a", &durable.EnqueueOpts{Tags: one("via", "enqueue")}))))
	hs, err := echo.EnqueueMany(ctx, q, []durable.EnqueueItem[string]{{Input: "a", Opts: &durable.EnqueueOpts{Tags: one("n", "0")}}, {Input: "b"}})
	require.NoError(t, err)
	require.Equal(t, one("n", "0"), tagsOf(t, e, hs[0].ID()))
	require.Nil(t, tagsOf(t, e, hs[1].ID()))
	hs, err = echo.StartMany(ctx, []durable.StartItem[string]{{Input: "a"}, {Input: "b", Opts: &durable.StartOpts{Tags: one("n", "1")}}})
	require.NoError(t, err)
	require.Nil(t, tagsOf(t, e, hs[0].ID()))
	require.Equal(t, one("n", "1"), tagsOf(t, e, hs[1].ID()))

	deb := func(tags map[string]string) *durable.EnqueueOpts {
		return &durable.EnqueueOpts{Debounce: &durable.Debounce{Key: "doc", Window: time.Hour}, Tags: tags}
	}
	d1, err := echo.Enqueue(ctx, q, "a", deb(one("first", "yes")))
	require.NoError(t, err)
	d2, err := echo.Enqueue(ctx, q, "b", deb(one("second", "yes")))
	require.NoError(t, err)
	require.Equal(t, d1.ID(), d2.ID(), "collapsed")
	require.Equal(t, one("first", "yes"), tagsOf(t, e, d1.ID()), "the first enqueue's tags")

	batcher, err := durable.NewBatcher(batched, durable.BatchOpts{MaxItems: 3, MaxWait: time.Hour})
	require.NoError(t, err)
	i1, err := batcher.Add(ctx, q, "a", &durable.BatchAddOpts{Tags: one("batch", "first")})
	require.NoError(t, err)
	i2, err := batcher.Add(ctx, q, "b", &durable.BatchAddOpts{Tags: one("batch", "second")})
	require.NoError(t, err)
	require.Equal(t, i1.Run.ID(), i2.Run.ID(), "one batch")
	require.Equal(t, one("batch", "first"), tagsOf(t, e, i1.Run.ID()), "the first item's tags")

	same, err := e.Fork(ctx, "start", 0, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"customer": "acme", "tier": "gold"}, tagsOf(t, e, same))
	other, err := e.Fork(ctx, "start", 0, &durable.ForkOpts{Tags: one("fork", "yes")})
	require.NoError(t, err)
	require.Equal(t, one("fork", "yes"), tagsOf(t, e, other))
	none, err := e.Fork(ctx, "start", 0, &durable.ForkOpts{Tags: map[string]string{}})
	require.NoError(t, err)
	require.Nil(t, tagsOf(t, e, none))

	ch, err := chain.Start(ctx, 1, &durable.StartOpts{ID: "chain", Tags: one("from", "start")})
	require.NoError(t, err)
	_, err = ch.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"from": "start", "link": "1"}, tagsOf(t, e, "chain"))
	require.Equal(t, map[string]string{"from": "start", "link": "2"}, tagsOf(t, e, "chain#2"), "the run's tags, SetTag's included")
	require.Equal(t, map[string]string{"fresh": "yes", "link": "3"}, tagsOf(t, e, "chain#3"), "StartOpts.Tags instead")
}

// TestSetTag: SetTag from workflow code sets, replaces and removes the
// run's tags, each as a step recorded once: a run resumed by replay (from
// a park) passes the recorded SetTag without writing the tag again, and
// a replay-only Check passes it too. A tag over MaxTags is refused, and
// its replay refuses it again.
func TestSetTag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(chan error, 2)
	register := func(e *durable.Engine) *durable.Workflow[int, string] {
		return durable.Register(e, "tagger", func(wctx durable.Context, extra int) (string, error) {
			if err := durable.SetTag(wctx, "stage", "received"); err != nil {
				return "", err
			}
			if err := durable.SetTag(wctx, "order", "o-1"); err != nil {
				return "", err
			}
			for i := range extra {
				if err := durable.SetTag(wctx, fmt.Sprintf("x%d", i), "v"); err != nil {
					refused <- err
					break
				}
			}
			if _, _, err := durable.Recv[string](wctx, "go", time.Hour); err != nil {
				return "", err
			}
			if err := durable.SetTag(wctx, "stage", "shipped"); err != nil {
				return "", err
			}
			if err := durable.SetTag(wctx, "order", ""); err != nil {
				return "", err
			}
			return "done", nil
		}, nil)
	}
	var wf *durable.Workflow[int, string]
	e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Millisecond }, func(e *durable.Engine) { wf = register(e) })
	ctx := ctxT(t)
	runs := pgx.Identifier{b.schema, "workflows"}.Sanitize()
	parked := func(id string) bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+runs+" WHERE id = $1 AND executor_id IS NULL AND wait_topic = 'go'", id).Scan(&n))
		return n == 1
	}

	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "tagged", Tags: map[string]string{"customer": "acme"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parked(h.ID()) }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, map[string]string{"customer": "acme", "stage": "received", "order": "o-1"}, tagsOf(t, e, h.ID()))

	// A replay of the parked run passes the SetTags it recorded.
	checker, err := durable.New(b.pool, b.cfg)
	require.NoError(t, err)
	register(checker)
	rep, err := durable.Check(ctx, checker, &durable.CheckOpts{Workflows: []string{"tagger"}})
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep.Problems)

	// Changed behind the run's back: a resumed run that set the tag again
	// would put "o-1" back.
	_, err = b.pool.Exec(ctx, "UPDATE "+runs+` SET tags = tags || '{"order": "changed"}' WHERE id = $1`, h.ID())
	require.NoError(t, err)
	require.NoError(t, durable.Send(ctx, e, h.ID(), "go", "now", nil))
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "done", out)
	require.Equal(t, map[string]string{"customer": "acme", "stage": "shipped"}, tagsOf(t, e, h.ID()))
	require.Equal(t, []string{"durable.tag:stage", "durable.tag:order", "durable.recv-deadline:go", "durable.recv:go",
		"durable.tag:stage", "durable.tag:order"}, stepNames(t, e, h.ID()))

	// Over MaxTags: refused, recorded, refused again by the replay.
	full, err := wf.Start(ctx, durable.MaxTags, &durable.StartOpts{ID: "full", Tags: map[string]string{"customer": "acme"}})
	require.NoError(t, err)
	err = <-refused
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	require.ErrorContains(t, err, "MaxTags")
	require.Eventually(t, func() bool { return parked(full.ID()) }, 30*time.Second, 5*time.Millisecond)
	tags := tagsOf(t, e, full.ID())
	require.Len(t, tags, durable.MaxTags)
	require.NotContains(t, tags, fmt.Sprintf("x%d", durable.MaxTags-3), "the refused tag")
	require.NoError(t, durable.Send(ctx, e, full.ID(), "go", "now", nil))
	_, err = full.Result(ctx)
	require.NoError(t, err)
	err = <-refused
	require.ErrorIs(t, err, durable.ErrInvalidArgument, "the resumed run's replay is refused as the first execution was")
	require.Len(t, tagsOf(t, e, full.ID()), durable.MaxTags-1, "order removed")
}

// TestSetTagFenced: a SetTag of an executor that lost the run (another
// took it over: its epoch moved on) writes nothing, neither the tag nor
// its step, and stops the code with ErrFenced.
func TestSetTagFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proceed := make(chan struct{})
	setErr := make(chan error, 1)
	var wf *durable.Workflow[int, int]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "tag-fenced", func(wctx durable.Context, _ int) (int, error) {
			if err := durable.SetTag(wctx, "a", "1"); err != nil {
				return 0, err
			}
			<-proceed
			err := durable.SetTag(wctx, "b", "2")
			setErr <- err
			return 0, err
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(tagsOf(t, e, h.ID())) == 1 }, 10*time.Second, 5*time.Millisecond)
	_, err = b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+" SET epoch = epoch + 1 WHERE id = $1", h.ID())
	require.NoError(t, err)
	close(proceed)
	require.ErrorIs(t, <-setErr, durable.ErrFenced)
	require.Equal(t, map[string]string{"a": "1"}, tagsOf(t, e, h.ID()))
	require.Equal(t, []string{"durable.tag:a"}, stepNames(t, e, h.ID()))
}

// TestListWorkflowsByTags: ListParams.Tags keeps the runs that have every
// tag given, combined with the other filters and across pages.
func TestListWorkflowsByTags(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ok, bad *durable.Workflow[string, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		ok = durable.Register(e, "ok", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
		bad = durable.Register(e, "bad", func(wctx durable.Context, in string) (string, error) {
			return "", durable.Permanent(fmt.Errorf("no"))
		}, nil)
	})
	ctx := ctxT(t)
	start := func(wf *durable.Workflow[string, string], id string, tags map[string]string) {
		h, err := wf.Start(ctx, "x", &durable.StartOpts{ID: id, Tags: tags})
		require.NoError(t, err)
		_, _ = h.Result(ctx)
	}
	start(ok, "acme-1", map[string]string{"customer": "acme", "region": "eu"})
	start(bad, "acme-2", map[string]string{"customer": "acme", "region": "us"})
	start(ok, "acme-3", map[string]string{"customer": "acme", "region": "eu"})
	start(ok, "globex-1", map[string]string{"customer": "globex", "region": "eu"})
	start(ok, "plain", nil)
	list := func(p durable.ListParams) []string {
		t.Helper()
		var ids []string
		for {
			runs, next, err := e.ListWorkflows(ctx, &p)
			require.NoError(t, err)
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			if next == "" {
				return ids
			}
			p.Cursor = next
		}
	}
	acme := map[string]string{"customer": "acme"}
	require.Equal(t, []string{"acme-3", "acme-2", "acme-1"}, list(durable.ListParams{Tags: acme}))
	require.Equal(t, []string{"acme-3", "acme-2", "acme-1"}, list(durable.ListParams{Tags: acme, Limit: 1}), "paged")
	require.Equal(t, []string{"acme-3", "acme-1"}, list(durable.ListParams{Tags: map[string]string{"customer": "acme", "region": "eu"}}))
	require.Equal(t, []string{"acme-2"}, list(durable.ListParams{Tags: acme, Statuses: []durable.Status{durable.StatusError}}))
	require.Equal(t, []string{"acme-3", "acme-1"}, list(durable.ListParams{Tags: acme, Name: "ok"}))
	require.Equal(t, []string{"globex-1", "acme-3", "acme-1"}, list(durable.ListParams{Tags: map[string]string{"region": "eu"}}))
	require.Empty(t, list(durable.ListParams{Tags: map[string]string{"customer": "ACME"}}))
	runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{Tags: acme, OmitPayloads: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"customer": "acme", "region": "eu"}, runs[0].Tags, "tags come with OmitPayloads")
}

// TestTagsBadInput: a bad tag (empty, overlong, not UTF-8, with NUL, too
// many) is an ErrInvalidArgument naming the field, and nothing is
// written: no run, no step, no tag.
func TestTagsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[string, string]
	var batcher *durable.Batcher[string, int]
	var q *durable.Queue
	setErr := make(chan error, 1)
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "badq", nil)
		var err error
		batcher, err = durable.NewBatcher(durable.Register(e, "bad-batch", func(wctx durable.Context, in []string) (int, error) {
			return len(in), nil
		}, nil), durable.BatchOpts{MaxItems: 2, MaxWait: time.Hour})
		require.NoError(t, err)
		wf = durable.Register(e, "bad-tags", func(wctx durable.Context, key string) (string, error) {
			setErr <- durable.SetTag(wctx, key, "v")
			return "", nil
		}, nil)
	})
	ctx := ctxT(t)
	many := map[string]string{}
	for i := range durable.MaxTags + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	bad := []struct {
		name string
		tags map[string]string
		msg  string
	}{
		{"empty key", map[string]string{"": "v"}, "key is empty"},
		{"empty value", map[string]string{"k": ""}, `value of key "k" is empty`},
		{"long key", map[string]string{strings.Repeat("k", 256): "v"}, "over the limit of 255"},
		{"long value", map[string]string{"k": strings.Repeat("v", 256)}, "over the limit of 255"},
		{"not UTF-8", map[string]string{"k": "\xff"}, "not valid UTF-8"},
		{"NUL", map[string]string{"k\x00": "v"}, "NUL"},
		{"too many", many, "over the limit of 32"},
	}
	count := func() (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()).Scan(&n))
		return n
	}
	for _, c := range bad {
		check := func(what string, err error, field string) {
			t.Helper()
			require.ErrorIs(t, err, durable.ErrInvalidArgument, "%s: %s", c.name, what)
			require.ErrorContains(t, err, field, "%s: %s", c.name, what)
			require.ErrorContains(t, err, c.msg, "%s: %s", c.name, what)
		}
		_, err := wf.Start(ctx, "x", &durable.StartOpts{Tags: c.tags})
		check("Start", err, "StartOpts.Tags")
		_, err = wf.Enqueue(ctx, q, "x", &durable.EnqueueOpts{Tags: c.tags})
		check("Enqueue", err, "EnqueueOpts.Tags")
		_, err = wf.EnqueueMany(ctx, q, []durable.EnqueueItem[string]{{Input: "ok"}, {Input: "x", Opts: &durable.EnqueueOpts{Tags: c.tags}}})
		check("EnqueueMany", err, "item 1")
		_, err = wf.StartMany(ctx, []durable.StartItem[string]{{Input: "x", Opts: &durable.StartOpts{Tags: c.tags}}})
		check("StartMany", err, "StartOpts.Tags")
		_, _, err = e.ListWorkflows(ctx, &durable.ListParams{Tags: c.tags})
		check("ListWorkflows", err, "ListParams.Tags")
		_, err = batcher.Add(ctx, q, "x", &durable.BatchAddOpts{Tags: c.tags})
		check("Batcher.Add", err, "BatchAddOpts.Tags")
	}
	require.Zero(t, count(), "no run written")

	src, err := wf.Start(ctx, "", &durable.StartOpts{ID: "src"}) // SetTag with an empty key
	require.NoError(t, err)
	err = <-setErr
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	require.ErrorContains(t, err, "SetTag key is empty")
	_, err = src.Result(ctx)
	require.NoError(t, err)
	require.Nil(t, tagsOf(t, e, "src"))
	require.Empty(t, stepNames(t, e, "src"), "no step recorded")
	_, err = e.Fork(ctx, "src", 0, &durable.ForkOpts{ID: "fork", Tags: many})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	require.Equal(t, 1, count(), "no fork written")
}
