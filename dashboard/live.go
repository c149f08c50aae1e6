package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/durable-go/durable"
)

// live streams the updates of a run as Server-Sent Events: an "entry"
// event per new stream entry (a one-line summary, shown as text), a
// "changed" event when the run's status, steps or approvals changed (the
// page then reloads its sections), and "finished" when the run is over.
// Query: id, version (of the page, see version), and from.<key> = the
// first offset of stream key not shown yet.
func (d *dash) live(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("id")
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	fp, finished, err := d.fingerprint(ctx, id)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if finished {
		send("finished", id)
		return
	}
	if fp != q.Get("version") { // it changed since the page was rendered
		if !send("changed", id) {
			return
		}
	}
	entries := make(chan entryView, 256)
	for _, key := range d.opts.Streams {
		from, _ := strconv.ParseInt(q.Get("from."+key), 10, 64)
		go func() {
			for e, err := range durable.StreamRead[json.RawMessage](ctx, d.eng, id, key, max(from, 0)) {
				if err != nil {
					return
				}
				select {
				case entries <- entry(key, e):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	tick := time.NewTicker(d.opts.RefreshInterval)
	defer tick.Stop()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-entries:
			if !send("entry", e) {
				return
			}
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-tick.C:
			now, done, err := d.fingerprint(ctx, id)
			if err != nil {
				return
			}
			if done {
				// Let the readers drain the entries written before the end.
				for len(entries) > 0 {
					if !send("entry", <-entries) {
						return
					}
				}
				send("finished", id)
				return
			}
			if now != fp {
				fp = now
				if !send("changed", id) {
					return
				}
			}
		}
	}
}

// fingerprint sums up what the run page shows that may change: status,
// wait, number and state of steps. It runs every RefreshInterval while a
// page is open, so it reads the run without its input and output (an
// agent's run may carry megabytes of them).
func (d *dash) fingerprint(ctx context.Context, id string) (string, bool, error) {
	runs, _, err := d.eng.ListWorkflows(ctx, &durable.ListParams{IDs: []string{id}, OmitPayloads: true, Limit: 1})
	if err != nil {
		return "", false, err
	}
	if len(runs) == 0 {
		return "", false, fmt.Errorf("%w: %q", durable.ErrWorkflowNotFound, id)
	}
	info := runs[0]
	last, total, err := d.eng.ListStepWindow(ctx, id, -1, 1)
	if err != nil {
		return "", false, err
	}
	return version(info, last, total), info.Status.Finished(), nil
}

// version sums up the state of a run that its page shows: steps ends
// with the run's last recorded step (if any), of total.
func version(info durable.WorkflowInfo, steps []durable.StepRecord, total int) string {
	last := ""
	if n := len(steps); n > 0 {
		last = fmt.Sprintf("%d:%s", steps[n-1].Pos, steps[n-1].Status)
	}
	return fmt.Sprintf("%s|%s|%d|%d|%s", info.Status, info.WaitTopic, info.UpdatedAt.UnixMicro(), total, last)
}
