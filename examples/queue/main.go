// Command queue sends a burst of 200 agent runs through a durable queue
// limited to 5 runs at a time and 10 starts per second, then shows from
// the runs' own recorded steps that the limits held.
//
// Run it from the repository root:
//
//	scripts/with-postgres go run ./examples/queue
//
// Each run is a small support agent (agentkit) answering a ticket: the
// model (an offline scripted server) asks for the order, the lookup_order
// tool runs as a step, the model answers. The demo drops and recreates the
// schema queue_durable on every run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/examples/internal/demo"
	"github.com/jackc/pgx/v5"
)

// options of one demo run.
type options struct {
	Schema      string        // engine schema; default "queue_durable"
	Runs        int           // default 200
	Concurrency int           // QueueOpts.GlobalConcurrency; default 5
	Rate        int           // starts per second; default 10
	ModelDelay  time.Duration // how long each model answer takes; default 150ms
	ToolDelay   time.Duration // how long each tool call takes; default 100ms
}

func (o options) withDefaults() options {
	if o.Schema == "" {
		o.Schema = "queue_durable"
	}
	if o.Runs <= 0 {
		o.Runs = 200
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 5
	}
	if o.Rate <= 0 {
		o.Rate = 10
	}
	if o.ModelDelay <= 0 {
		o.ModelDelay = 150 * time.Millisecond
	}
	if o.ToolDelay <= 0 {
		o.ToolDelay = 100 * time.Millisecond
	}
	return o
}

func main() {
	var o options
	flag.IntVar(&o.Runs, "runs", 200, "agent runs to enqueue at once")
	flag.IntVar(&o.Concurrency, "concurrency", 5, "the queue's global concurrency")
	flag.IntVar(&o.Rate, "rate", 10, "the queue's rate limit, starts per second")
	flag.DurationVar(&o.ModelDelay, "model-delay", 150*time.Millisecond, "how long each model answer takes")
	flag.DurationVar(&o.ToolDelay, "tool-delay", 100*time.Millisecond, "how long each tool call takes")
	flag.Parse()
	demo.Main("queue", func(ctx context.Context, out io.Writer) error { return run(ctx, out, o) })
}

const (
	queueName = "support-agents"
	agentName = "support-agent"
)

type orderArgs struct {
	OrderID string `json:"order_id"`
}

// run is the whole example; a *demo.Failed when a limit did not hold.
func run(ctx context.Context, w io.Writer, o options) error {
	o = o.withDefaults()
	out := demo.NewSyncWriter(w)
	pool, err := demo.Connect(ctx, "queue")
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{o.Schema}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("connect to DATABASE_URL: %w", err)
	}

	// The model: call lookup_order on the first turn, answer on the second.
	model := agentkittest.NewServer(func(req *agentkittest.Request) agentkittest.Reply {
		if req.Turn == 1 {
			args, _ := json.Marshal(orderArgs{OrderID: req.LastUser()[len("Where is order "):]})
			return agentkittest.Reply{Delay: o.ModelDelay, ToolCalls: []agentkit.ToolCall{{Name: "lookup_order", Arguments: args}}}
		}
		return agentkittest.Reply{Delay: o.ModelDelay, Text: "Your order ships tomorrow: " + req.ToolResults()[0]}
	})
	defer model.Close()
	m, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: model.URL, Model: "scripted"})
	if err != nil {
		return err
	}

	eng, err := durable.New(pool, &durable.Config{Schema: o.Schema, AppVersion: "queue-demo-1", ExecutorID: "queue-demo",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	q := durable.RegisterQueue(eng, queueName, &durable.QueueOpts{GlobalConcurrency: o.Concurrency, RateLimit: o.Rate, RatePeriod: time.Second})
	lookup := agentkit.StepTool("lookup_order", "Look an order up.", json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`),
		func(ctx context.Context, a orderArgs) (string, error) {
			t := time.NewTimer(o.ToolDelay)
			defer t.Stop()
			select {
			case <-t.C:
				return "order " + a.OrderID + " is packed", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, nil)
	agent := agentkit.Define(eng, agentName, agentkit.AgentConfig{Model: m, System: "You are a support agent.", Tools: []*agentkit.Tool{lookup},
		Limits: agentkit.Limits{MaxTurns: 4}})
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}()
	fmt.Fprintf(out, "queue: %d agent runs through queue %q (GlobalConcurrency %d, RateLimit %d per second)\n\n", o.Runs, queueName, o.Concurrency, o.Rate)

	began := time.Now()
	// Watch the queue from before the burst: its Running count and the
	// claim time of each run.
	var (
		mu         sync.Mutex
		maxRunning int
		done       int
		claimed    = map[string]time.Time{} // run ID -> claim time, database clock
	)
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		lastPrint := time.Now()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			st, err := q.Stats(wctx)
			if err != nil {
				continue
			}
			// While a run is pending (claimed, not finished, never
			// parked), its UpdatedAt is the time the queue claimed it.
			running, _, err := eng.ListWorkflows(wctx, &durable.ListParams{Queue: queueName,
				Statuses: []durable.Status{durable.StatusPending}, OmitPayloads: true, Limit: durable.ListLimitMax})
			if err != nil {
				continue
			}
			mu.Lock()
			for _, r := range running {
				if _, ok := claimed[r.ID]; !ok {
					claimed[r.ID] = r.UpdatedAt
				}
			}
			maxRunning = max(maxRunning, st.Running)
			d := done
			mu.Unlock()
			if time.Since(lastPrint) >= time.Second {
				lastPrint = time.Now()
				fmt.Fprintf(out, "  %5.1fs  finished %3d/%d  running %d  waiting %d\n", time.Since(began).Seconds(), d, o.Runs, st.Running, st.Ready+st.Delayed)
			}
		}
	}()
	// The burst.
	handles := make([]*durable.Handle[agentkit.Result], 0, o.Runs)
	lim := agentkit.Limits{MaxTurns: 4}
	for i := range o.Runs {
		h, err := agent.Workflow().Enqueue(ctx, q, agentkit.Input{Prompt: fmt.Sprintf("Where is order %d", 1000+i), Limits: &lim},
			&durable.EnqueueOpts{ID: fmt.Sprintf("ticket-%03d", i)})
		if err != nil {
			return err
		}
		handles = append(handles, h)
	}
	fmt.Fprintf(out, "enqueued %d runs in %v; expected duration at %d starts/s: ~%.0fs\n", o.Runs, time.Since(began).Round(time.Millisecond),
		o.Rate, float64(o.Runs)/float64(o.Rate))

	var failed []string
	for _, h := range handles {
		res, err := h.Result(ctx)
		if err == nil && res.Outcome != agentkit.OutcomeCompleted {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", h.ID(), err))
		}
		mu.Lock()
		done++
		mu.Unlock()
	}
	cancelWatch()
	<-watched
	took := time.Since(began)
	fmt.Fprintf(out, "all %d runs finished in %.1fs (%d failed)\n", o.Runs, took.Seconds(), len(failed))

	// The runs' own recorded intervals: from the first step's start to the
	// last step's end (inside the queue slot, which is held from claim to
	// finish).
	type span struct{ start, end time.Time }
	spans := make([]span, 0, o.Runs)
	for _, h := range handles {
		steps, err := eng.ListSteps(ctx, h.ID())
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			continue
		}
		spans = append(spans, span{steps[0].StartedAt, steps[len(steps)-1].FinishedAt})
	}
	// Max overlap.
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // ends before starts at the same instant
	})
	overlap, maxOverlap := 0, 0
	for _, e := range edges {
		overlap += e.d
		maxOverlap = max(maxOverlap, overlap)
	}
	// Max starts (claims) in any window of one second.
	starts := make([]time.Time, 0, len(claimed))
	for _, at := range claimed {
		starts = append(starts, at)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	const window = time.Second
	maxStarts, j := 0, 0
	perSecond := map[int]int{}
	for i, s := range starts {
		for s.Sub(starts[j]) >= window {
			j++
		}
		maxStarts = max(maxStarts, i-j+1)
		perSecond[int(s.Sub(starts[0]).Seconds())]++
	}
	secs := make([]int, 0, len(perSecond))
	for k := range perSecond {
		secs = append(secs, k)
	}
	slices.Sort(secs)
	fmt.Fprint(out, "\nstarts per second of the burst:")
	for _, k := range secs {
		fmt.Fprintf(out, " %d", perSecond[k])
	}
	var turns int
	for _, r := range model.TurnCounts() {
		turns += r
	}
	fmt.Fprintf(out, "\nmodel requests: %d (2 per run)\n", turns)

	fmt.Fprintln(out, "\nChecks")
	var bad []string
	check := func(ok bool, okMsg, badMsg string) {
		if ok {
			fmt.Fprintf(out, "  [ok]   %s\n", okMsg)
		} else {
			fmt.Fprintf(out, "  [FAIL] %s\n", badMsg)
			bad = append(bad, badMsg)
		}
	}
	check(len(failed) == 0 && len(spans) == o.Runs, fmt.Sprintf("all %d runs completed", o.Runs),
		fmt.Sprintf("%d runs failed (%v), %d have steps", len(failed), failed, len(spans)))
	check(maxOverlap <= o.Concurrency && maxRunning <= o.Concurrency,
		fmt.Sprintf("concurrency held: at most %d runs at once by their recorded steps, %d by the queue's Running count (limit %d)", maxOverlap, maxRunning, o.Concurrency),
		fmt.Sprintf("concurrency exceeded: %d by recorded steps, %d by Stats (limit %d)", maxOverlap, maxRunning, o.Concurrency))
	check(len(starts) == o.Runs, fmt.Sprintf("the claim time of every run was seen while it ran (%d)", len(starts)),
		fmt.Sprintf("the claim time of only %d of %d runs was seen", len(starts), o.Runs))
	check(maxStarts <= o.Rate,
		fmt.Sprintf("rate held: at most %d starts within any %v (limit %d per second)", maxStarts, window, o.Rate),
		fmt.Sprintf("rate exceeded: %d starts within %v (limit %d per second)", maxStarts, window, o.Rate))
	minTook := time.Duration(float64(o.Runs-o.Rate)/float64(o.Rate)*float64(time.Second)) - time.Second
	check(took >= minTook, fmt.Sprintf("the burst took %.1fs, no less than the rate allows", took.Seconds()),
		fmt.Sprintf("the burst took %.1fs, less than the rate allows (%.1fs)", took.Seconds(), minTook.Seconds()))
	if len(bad) > 0 {
		msg := fmt.Sprintf("FAILED: %v", bad)
		fmt.Fprintln(out, "\n"+msg)
		return &demo.Failed{Msg: msg}
	}
	fmt.Fprintf(out, "\nOK: %d runs, never more than %d at once nor %d starts per second\n", o.Runs, o.Concurrency, o.Rate)
	return nil
}
