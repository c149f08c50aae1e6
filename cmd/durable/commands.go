package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/dashboard"
)

func cmdMigrate(ctx context.Context, c *cli, _ []string) error {
	if c.f.printSQL {
		sql, err := durable.MigrationSQL(c.schema)
		if err != nil {
			return usagef("%v", err)
		}
		if c.asJSON {
			return c.json(map[string]any{"schema": c.schema, "version": durable.SchemaVersion(), "sql": sql})
		}
		fmt.Fprint(c.stdout, sql)
		return nil
	}
	if err := durable.Migrate(ctx, c.pool, c.schema); err != nil {
		return err
	}
	if c.asJSON {
		return c.json(map[string]any{"schema": c.schema, "version": durable.SchemaVersion()})
	}
	fmt.Fprintf(c.stdout, "schema %q is at version %d\n", c.schema, durable.SchemaVersion())
	return nil
}

func cmdList(ctx context.Context, c *cli, _ []string) error {
	p := &durable.ListParams{Name: c.f.name, Queue: c.f.queue, IDPrefix: c.f.idPrefix, Parent: c.f.parent, Tags: c.f.tags,
		Limit: c.f.limit, Cursor: c.f.cursor, OmitPayloads: !c.asJSON}
	if c.f.limit < 1 || c.f.limit > durable.ListLimitMax {
		return usagef("--limit %d is outside 1..%d", c.f.limit, durable.ListLimitMax)
	}
	var err error
	if p.Statuses, err = parseStatuses(c.f.statuses); err != nil {
		return err
	}
	if c.f.since != "" {
		if p.From, err = parseSince(c.f.since); err != nil {
			return err
		}
	}
	runs, next, err := c.eng.ListWorkflows(ctx, p)
	if errors.Is(err, durable.ErrInvalidArgument) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if c.asJSON {
		out := struct {
			Runs []runJSON `json:"runs"`
			Next string    `json:"next,omitempty"`
		}{Runs: []runJSON{}, Next: next}
		for _, r := range runs {
			out.Runs = append(out.Runs, toRunJSON(r))
		}
		return c.json(out)
	}
	t := c.table("ID", "NAME", "STATUS", "QUEUE", "TAGS", "CREATED", "UPDATED", "ERROR")
	for _, r := range runs {
		t.row(r.ID, r.Name, string(r.Status), dash(r.Queue), dash(clip(fmtTags(r.Tags), 60)), fmtTime(r.CreatedAt), fmtTime(r.UpdatedAt),
			errText(r.Error, 60))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(runs) == 0 {
		fmt.Fprintln(c.stdout, "(no runs)")
	}
	if next != "" {
		fmt.Fprintf(c.stdout, "more: --cursor %s\n", next)
	}
	return nil
}

func cmdShow(ctx context.Context, c *cli, args []string) error {
	run, err := c.eng.Inspect(ctx, args[0])
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.showJSON(ctx, run)
	}
	kv := c.table("", "")
	kv.header = false
	kv.row("ID", run.ID)
	kv.row("Name", run.Name)
	kv.row("Status", string(run.Status))
	kv.row("App version", run.AppVersion)
	kv.row("Executor", dash(run.Executor))
	if run.Parent != "" {
		kv.row("Parent", run.Parent)
	}
	if run.Queue != "" {
		kv.row("Queue", run.Queue)
	}
	kv.row("Created", fmtTime(run.CreatedAt))
	kv.row("Updated", fmtTime(run.UpdatedAt))
	if !run.Deadline.IsZero() {
		kv.row("Deadline", fmtTime(run.Deadline))
	}
	if run.RecoveryAttempts > 0 {
		kv.row("Recoveries", strconv.Itoa(run.RecoveryAttempts))
	}
	if run.Retries > 0 {
		kv.row("Retries", strconv.Itoa(run.Retries))
	}
	if run.ContinuedAs != "" {
		kv.row("Continued as", run.ContinuedAs)
	}
	if run.TraceID != "" {
		kv.row("Trace", run.TraceID)
	}
	if run.Tags != nil {
		kv.row("Tags", fmtTags(run.Tags))
	}
	kv.row("Input", clip(string(run.Input), 200))
	if run.Output != nil {
		kv.row("Output", clip(string(run.Output), 200))
	}
	if run.Error != nil {
		kv.row("Error", clip(run.Error.Error(), 200))
	}
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	// AT is the step's start from the run's creation: the timeline. Each
	// window is a table of its own, so columns are aligned per window.
	none := true
	err = c.eachStepWindow(ctx, run.ID, func(steps []durable.StepRecord) error {
		t := c.table("POS", "NAME", "STATUS", "ATTEMPTS", "STARTED", "AT", "DURATION", "ERROR")
		t.header, none = none, false
		for _, s := range steps {
			at := "-"
			if !s.StartedAt.IsZero() {
				at = "+" + fmtDuration(run.CreatedAt, s.StartedAt)
			}
			t.row(strconv.Itoa(s.Pos), s.Name, s.Status, strconv.Itoa(s.Attempts), fmtTime(s.StartedAt), at,
				fmtDuration(s.StartedAt, s.FinishedAt), errText(s.Err, 60))
		}
		return t.flush()
	})
	if err != nil {
		return err
	}
	if none {
		fmt.Fprintln(c.stdout, "(no steps recorded)")
	}
	return nil
}

// showJSON writes {"run": ..., "steps": [...]} as c.json would, step by
// step as the windows arrive.
func (c *cli) showJSON(ctx context.Context, run durable.WorkflowInfo) error {
	r, err := json.MarshalIndent(toRunJSON(run), "  ", "  ")
	if err != nil {
		return err
	}
	w := bufio.NewWriter(c.stdout)
	fmt.Fprintf(w, "{\n  \"run\": %s,\n  \"steps\": [", r)
	n := 0
	err = c.eachStepWindow(ctx, run.ID, func(steps []durable.StepRecord) error {
		for _, s := range steps {
			b, err := json.MarshalIndent(toStepJSON(s), "    ", "  ")
			if err != nil {
				return err
			}
			if n > 0 {
				w.WriteByte(',')
			}
			w.WriteString("\n    ")
			w.Write(b)
			n++
		}
		return w.Flush()
	})
	if err != nil {
		return err
	}
	if n > 0 {
		w.WriteString("\n  ")
	}
	w.WriteString("]\n}\n")
	return w.Flush()
}

// showWindow is how many steps show reads at a time, so that a run of
// any length is shown in bounded memory. A variable for the tests.
var showWindow = 200

// listStepWindow reads one window; the tests watch its calls.
var listStepWindow = (*durable.Engine).ListStepWindow

// eachStepWindow calls f with the recorded steps of run id in position
// order, a window of at most showWindow at a time.
func (c *cli) eachStepWindow(ctx context.Context, id string, f func([]durable.StepRecord) error) error {
	for from, seen := 0, 0; ; {
		steps, total, err := listStepWindow(c.eng, ctx, id, from, showWindow)
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			return nil
		}
		if err := f(steps); err != nil {
			return err
		}
		// Positions may have gaps: the next window starts after the last
		// position seen, and the count of all steps says when to stop.
		from, seen = steps[len(steps)-1].Pos+1, seen+len(steps)
		if len(steps) < showWindow || seen >= total {
			return nil
		}
	}
}

func cmdCancel(ctx context.Context, c *cli, args []string) error {
	if err := c.eng.Cancel(ctx, args[0], &durable.CancelOpts{Children: c.f.children, Compensate: c.f.compensate}); err != nil {
		return err
	}
	return c.after(ctx, args[0], "cancelled")
}

func cmdResume(ctx context.Context, c *cli, args []string) error {
	if err := c.eng.Resume(ctx, args[0], &durable.ResumeOpts{RetryFailedStep: c.f.retryFailedStep}); err != nil {
		return err
	}
	return c.after(ctx, args[0], "resumed")
}

// after prints the run's status once a control command went through.
func (c *cli) after(ctx context.Context, id, what string) error {
	run, err := c.eng.Inspect(ctx, id)
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.json(map[string]any{"id": id, "status": run.Status})
	}
	fmt.Fprintf(c.stdout, "%s %s: status %s\n", what, id, run.Status)
	return nil
}

func cmdFork(ctx context.Context, c *cli, args []string) error {
	if c.f.fromStep < 0 {
		return usagef("--from-step is required (a step position, 0 reruns everything)")
	}
	src, err := c.eng.Inspect(ctx, args[0])
	if err != nil {
		return err
	}
	version := c.f.appVersion
	if version == "" {
		version = src.AppVersion
	}
	id, err := c.eng.Fork(ctx, args[0], c.f.fromStep, &durable.ForkOpts{ID: c.f.newID, AppVersion: version})
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.json(map[string]any{"id": id, "forked_from": args[0], "from_step": c.f.fromStep, "app_version": version})
	}
	fmt.Fprintf(c.stdout, "forked %s from step %d as %s (app version %s)\n", args[0], c.f.fromStep, id, version)
	return nil
}

func cmdSend(ctx context.Context, c *cli, args []string) error {
	id, topic, payload := args[0], args[1], args[2]
	if !json.Valid([]byte(payload)) {
		return usagef("the message %q is not valid JSON (a string needs quotes: '\"yes\"')", clip(payload, 80))
	}
	var opts *durable.SendOpts
	if c.f.idemKey != "" {
		opts = &durable.SendOpts{IdempotencyKey: c.f.idemKey}
	}
	if err := durable.Send(ctx, c.eng, id, topic, json.RawMessage(payload), opts); err != nil {
		return err
	}
	if c.asJSON {
		return c.json(map[string]any{"id": id, "topic": topic, "sent": true})
	}
	fmt.Fprintf(c.stdout, "sent to %s on topic %q\n", id, topic)
	return nil
}

func cmdApprovals(ctx context.Context, c *cli, args []string) error {
	if _, err := c.eng.Inspect(ctx, args[0]); err != nil {
		return err
	}
	list, err := agentkit.Pending(ctx, c.eng, args[0])
	if err != nil {
		return err
	}
	if c.asJSON {
		if list == nil {
			list = []agentkit.PendingApproval{}
		}
		return c.json(list)
	}
	if len(list) == 0 {
		fmt.Fprintf(c.stdout, "no tool call of %s is waiting for approval\n", args[0])
		return nil
	}
	t := c.table("CALL", "TOOL", "ARGUMENTS", "DEADLINE", "ON TIMEOUT")
	for _, p := range list {
		t.row(p.Call.ID, p.Call.Name, clip(string(p.Call.Arguments), 80), fmtTime(p.Deadline), string(p.OnTimeout))
	}
	return t.flush()
}

func cmdApprove(ctx context.Context, c *cli, args []string) error {
	d := agentkit.Decision{Action: agentkit.ActionApprove, By: c.f.by}
	if c.f.editArgs != "" {
		if !json.Valid([]byte(c.f.editArgs)) {
			return usagef("--args is not valid JSON")
		}
		d.Action, d.Arguments = agentkit.ActionEdit, json.RawMessage(c.f.editArgs)
	}
	return c.decide(ctx, args, d)
}

func cmdDeny(ctx context.Context, c *cli, args []string) error {
	return c.decide(ctx, args, agentkit.Decision{Action: agentkit.ActionDeny, By: c.f.by, Reason: c.f.reason})
}

// decide sends d for the call named in args, or for the only pending call.
func (c *cli) decide(ctx context.Context, args []string, d agentkit.Decision) error {
	runID := args[0]
	if _, err := c.eng.Inspect(ctx, runID); err != nil {
		return err
	}
	var call string
	if len(args) > 1 {
		call = args[1]
	} else {
		list, err := agentkit.Pending(ctx, c.eng, runID)
		if err != nil {
			return err
		}
		switch len(list) {
		case 0:
			return fmt.Errorf("%w: run %q has no tool call waiting for approval", agentkit.ErrNoPendingApproval, runID)
		case 1:
			call = list[0].Call.ID
		default:
			ids := make([]string, len(list))
			for i, p := range list {
				ids[i] = p.Call.ID
			}
			return usagef("run %q has %d calls waiting (%s): name one", runID, len(list), strings.Join(ids, ", "))
		}
	}
	if err := agentkit.Decide(ctx, c.eng, runID, call, d); err != nil {
		return err
	}
	if c.asJSON {
		return c.json(map[string]any{"id": runID, "call": call, "action": d.Action})
	}
	fmt.Fprintf(c.stdout, "%s: call %s of %s\n", d.Action, call, runID)
	return nil
}

func cmdQueues(ctx context.Context, c *cli, args []string) error {
	if len(args) == 2 && args[0] == "partitions" {
		return queuePartitions(ctx, c, args[1])
	}
	if len(args) > 0 {
		if len(args) != 2 || (args[0] != "pause" && args[0] != "resume") {
			return usagef("want \"queues\", \"queues pause NAME\", \"queues resume NAME\" or \"queues partitions NAME\"")
		}
		q := c.eng.QueueRef(args[1])
		var err error
		if args[0] == "pause" {
			err = q.Pause(ctx)
		} else {
			err = q.Resume(ctx)
		}
		if err != nil {
			return err
		}
		if c.asJSON {
			return c.json(map[string]any{"queue": args[1], "paused": args[0] == "pause"})
		}
		fmt.Fprintf(c.stdout, "queue %q %sd\n", args[1], args[0])
		return nil
	}
	list, err := c.eng.ListQueues(ctx)
	if err != nil {
		return err
	}
	if c.asJSON {
		out := []queueJSON{}
		for _, q := range list {
			out = append(out, toQueueJSON(q))
		}
		return c.json(out)
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "(no queues)")
		return nil
	}
	t := c.table("NAME", "READY", "DELAYED", "RUNNING", "GLOBAL", "WORKER", "PARTITION", "RATE", "KEY RATE", "FAIR", "PAUSED")
	for _, q := range list {
		s := q.Settings
		t.row(q.Name, strconv.Itoa(q.Ready), strconv.Itoa(q.Delayed), strconv.Itoa(q.Running), limit(s.GlobalConcurrency),
			limit(s.WorkerConcurrency), limit(s.PartitionConcurrency), rate(s.RateLimit, s.RatePeriod),
			rate(s.PartitionRateLimit, s.PartitionRatePeriod), yesNo(s.FairShare), yesNo(q.Paused))
	}
	return t.flush()
}

// rate shows a rate limit, "-" for none.
func rate(n int, per time.Duration) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%s", n, per)
}

// queuePartitions lists the busiest partition keys of queue name.
func queuePartitions(ctx context.Context, c *cli, name string) error {
	keys, err := c.eng.QueueRef(name).PartitionStats(ctx, 0)
	if err != nil {
		return err
	}
	if c.asJSON {
		out := []partitionJSON{}
		for _, k := range keys {
			out = append(out, toPartitionJSON(k))
		}
		return c.json(out)
	}
	if len(keys) == 0 {
		fmt.Fprintln(c.stdout, "(no partition with runs or limits)")
		return nil
	}
	t := c.table("KEY", "READY", "DELAYED", "RUNNING", "LIMIT", "WEIGHT")
	for _, k := range keys {
		key, lim, weight := k.Key, "-", "1"
		if key == "" {
			key = "(none)"
		}
		if k.Limits != nil {
			lim, weight = limit(k.Limits.Concurrency), strconv.Itoa(k.Limits.Weight)
		}
		t.row(key, strconv.Itoa(k.Ready), strconv.Itoa(k.Delayed), strconv.Itoa(k.Running), lim, weight)
	}
	return t.flush()
}

func cmdSchedules(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 {
		if len(args) != 2 {
			return usagef("want \"schedules\" or \"schedules pause|resume|trigger NAME\"")
		}
		name := args[1]
		switch args[0] {
		case "pause", "resume":
			var err error
			if args[0] == "pause" {
				err = c.eng.PauseSchedule(ctx, name)
			} else {
				err = c.eng.ResumeSchedule(ctx, name)
			}
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.json(map[string]any{"schedule": name, "paused": args[0] == "pause"})
			}
			fmt.Fprintf(c.stdout, "schedule %q %sd\n", name, args[0])
			return nil
		case "trigger":
			var tick time.Time
			if c.f.tick != "" {
				var err error
				if tick, err = time.Parse(time.RFC3339Nano, c.f.tick); err != nil {
					return usagef("--tick %q is not an RFC 3339 time", c.f.tick)
				}
			}
			id, err := c.eng.TriggerSchedule(ctx, name, tick)
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.json(map[string]any{"schedule": name, "id": id})
			}
			fmt.Fprintf(c.stdout, "triggered %q: run %s (started by an executor that declares the schedule)\n", name, id)
			return nil
		default:
			return usagef("unknown schedules action %q (want pause, resume or trigger)", args[0])
		}
	}
	list, err := c.eng.ListSchedules(ctx)
	if err != nil {
		return err
	}
	if c.asJSON {
		out := []scheduleJSON{}
		for _, s := range list {
			out = append(out, toScheduleJSON(s))
		}
		return c.json(out)
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "(no schedules)")
		return nil
	}
	t := c.table("NAME", "WORKFLOW", "SPEC", "ZONE", "PAUSED", "LAST TICK", "NEXT TICK", "LAST RUN")
	for _, s := range list {
		t.row(s.Name, s.Workflow, s.Spec, s.Location, yesNo(s.Paused), fmtTime(s.LastTick), fmtTime(s.NextTick), dash(s.LastRunID))
	}
	return t.flush()
}

func cmdPrune(ctx context.Context, c *cli, _ []string) error {
	if c.f.olderThan <= 0 {
		return usagef("--older-than is required and must be positive (e.g. 720h for 30 days)")
	}
	if c.f.batch < 1 || c.f.batch > durable.PruneBatchMax {
		return usagef("--batch %d is outside 1..%d", c.f.batch, durable.PruneBatchMax)
	}
	if c.f.maxRuns < 0 {
		return usagef("--max must not be negative")
	}
	before := time.Now().Add(-c.f.olderThan)
	res, err := c.eng.Prune(ctx, before, &durable.PruneOpts{BatchSize: c.f.batch, MaxRuns: c.f.maxRuns})
	if err != nil {
		// Batches done stay done: say what they deleted.
		fmt.Fprintf(c.stderr, "durable prune: stopped after deleting %d runs\n", res.Runs)
		return err
	}
	// agentkit's blobs are shared between runs and outlive them: those no
	// remaining run refers to go too, when the schema has the table.
	var blobs int64
	var hasBlobs bool
	if err := c.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
		pgx.Identifier{c.schema, "agentkit_blobs"}.Sanitize()).Scan(&hasBlobs); err != nil {
		return err
	}
	if hasBlobs {
		store, err := agentkit.NewPGBlobStore(c.pool, c.schema)
		if err != nil {
			return err
		}
		if blobs, err = store.Prune(ctx, pruneBlobsAge); err != nil {
			return err
		}
	}
	if c.asJSON {
		return c.json(map[string]any{"before": before.UTC(), "runs": res.Runs, "steps": res.Steps, "messages": res.Messages,
			"events": res.Events, "streams": res.Streams, "batches": res.Batches, "blobs": blobs})
	}
	fmt.Fprintf(c.stdout, "pruned %d runs finished before %s (%d steps, %d messages, %d events, %d stream entries) in %d batches\n",
		res.Runs, fmtTime(before), res.Steps, res.Messages, res.Events, res.Streams, res.Batches)
	if hasBlobs {
		fmt.Fprintf(c.stdout, "pruned %d agentkit blobs no run refers to (put over %s ago)\n", blobs, pruneBlobsAge)
	}
	return nil
}

// pruneBlobsAge spares blobs put recently: a tool step puts its blob
// before its checkpoint refers to it.
const pruneBlobsAge = time.Hour

// cmdUI serves the dashboard on the engine, which is never launched: the
// pages read and act on the database only. It always requires a token, and
// answers only to IP addresses, localhost, the --addr name and the
// --allowed-host names in the Host header.
func cmdUI(ctx context.Context, c *cli, _ []string) error {
	token := cmp.Or(c.f.token, os.Getenv("DURABLE_UI_TOKEN"))
	generated := token == ""
	if generated {
		token = dashboard.NewToken()
	}
	opts := &dashboard.Options{Token: token, ReadOnly: c.f.readOnly, AllowedHosts: c.f.allowedHosts, SecureCookies: c.f.secureCookies}
	return dashboard.ListenAndServe(ctx, c.eng, c.f.addr, opts, func(a net.Addr) {
		fmt.Fprintf(c.stdout, "durable ui: serving on http://%s/\n", a)
		if generated {
			fmt.Fprintf(c.stdout, "durable ui: token %s (sign in with it, or send it as \"Authorization: Bearer <token>\")\n", token)
		}
	})
}
