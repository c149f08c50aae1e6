package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// verdict is what the run proved, computed from the database and the
// ledger after every run finished.
type verdict struct {
	workflows  map[string]int // kind -> runs stored (controller's, children, ticks)
	completed  int
	lost       []string // not finished with success, or committed and missing
	duplicates []string // effects, app rows, messages or ticks seen twice
	late       []string // step executions that began after their checkpoint existed
	missing    []string // an expected effect, app row or message that never happened
	overLimit  []string // queue limits exceeded
	ticks      int
	messages   int
	effects    int
	reruns     int // step executions beyond the first (at-least-once, deduplicated by keys)
	lostAcks   int // transaction steps run again by their run after a COMMIT whose answer was lost
	calls      int // effect requests, retries included
	maxGlobal  int
	maxWorker  int
}

type wfRow struct {
	id, name, status string
	output, errText  *string
}

type stepRow struct {
	name, status string
	finished     time.Time
}

type stepKey struct {
	wf  string
	pos int
}

// splitKey splits an idempotency key "<workflow ID>/<pos>".
func splitKey(key string) (stepKey, bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return stepKey{}, false
	}
	pos, err := strconv.Atoi(key[i+1:])
	return stepKey{key[:i], pos}, err == nil
}

func (c *controller) verdict() *verdict {
	t := c.t
	ctx := context.Background()
	v := &verdict{workflows: map[string]int{}}
	tbl := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }

	// Workflows: every stored run finished with success; every run the
	// controller committed is stored.
	wfs := map[string]*wfRow{}
	rows, err := c.pool.Query(ctx, "SELECT id, name, status, output::text, error::text FROM "+tbl("workflows"))
	require(t, err)
	for rows.Next() {
		r := &wfRow{}
		require(t, rows.Scan(&r.id, &r.name, &r.status, &r.output, &r.errText))
		wfs[r.id] = r
		v.workflows[workflowKind(r.name)]++
		if r.status == "success" {
			v.completed++
		} else {
			e := ""
			if r.errText != nil {
				e = *r.errText
			}
			v.lost = append(v.lost, fmt.Sprintf("%s (%s) is %s %s", r.id, r.name, r.status, e))
		}
	}
	require(t, rows.Err())
	for id := range c.created {
		if wfs[id] == nil {
			v.lost = append(v.lost, id+" was committed by the controller but is not stored")
		}
	}

	// Steps and their checkpoints.
	steps := map[stepKey]*stepRow{}
	rows, err = c.pool.Query(ctx, "SELECT workflow_id, pos, name, status, finished_at FROM "+tbl("steps"))
	require(t, err)
	for rows.Next() {
		var k stepKey
		s := &stepRow{}
		require(t, rows.Scan(&k.wf, &k.pos, &s.name, &s.status, &s.finished))
		steps[k] = s
	}
	require(t, rows.Err())

	c.led.mu.Lock()
	defer c.led.mu.Unlock()

	// No step executed after its checkpoint existed. A checkpoint's
	// finished_at is taken before it commits, and a run that starts or
	// resumes loads the recorded steps after every checkpoint it must see
	// committed (a checkpoint holds the workflow row's lock against the
	// claim that precedes the load). So:
	//   - a plain step never begins after its checkpoint's finished_at: a
	//     retry happens before the checkpoint, and a later run replays it;
	//   - a transaction step may begin again after its checkpoint only in
	//     the run that wrote it, when the COMMIT's answer was lost (its
	//     checkpoint is then refused and the transaction rolls back; the
	//     app rows below prove it): never in a run that started after the
	//     checkpoint. Runs record their start (after loading their steps);
	//     for agent runs, whose code is the library's, the same process must
	//     have begun the step before the checkpoint.
	runsOf := map[string][]runRec{}
	for _, r := range c.led.runs {
		runsOf[r.WF] = append(runsOf[r.WF], r)
	}
	perStep := map[stepKey]int{}
	for _, x := range c.led.execs {
		k := stepKey{x.WF, x.Pos}
		perStep[k]++
		s := steps[k]
		if s == nil || !time.Unix(0, x.At).After(s.finished) {
			continue
		}
		late := !x.Tx
		if x.Tx {
			var start *runRec
			for i, r := range runsOf[x.WF] {
				if r.PID == x.PID && r.At <= x.At && (start == nil || r.At > start.At) {
					start = &runsOf[x.WF][i]
				}
			}
			if start != nil {
				late = time.Unix(0, start.At).After(s.finished)
			} else {
				late = true
				for _, y := range c.led.execs {
					if y.WF == x.WF && y.Pos == x.Pos && y.PID == x.PID && time.Unix(0, y.At).Before(s.finished) {
						late = false
					}
				}
			}
			if !late {
				v.lostAcks++
			}
		}
		if late {
			v.late = append(v.late, fmt.Sprintf("%s step %d %q began at %s, checkpoint at %s (pid %d)",
				x.WF, x.Pos, x.Name, time.Unix(0, x.At).Format(time.RFC3339Nano), s.finished.Format(time.RFC3339Nano), x.PID))
		}
	}
	for _, n := range perStep {
		v.reruns += n - 1
	}

	// Effects: once per key (the provider applies a key once, and no two
	// steps share a key), each from a recorded step, as many per run as its
	// workflow makes.
	want := map[string]int{"mixed": 2, "leaf": 1, "tick": 1, "agent": 2, "queued": 0}
	v.effects = len(c.led.effects)
	seen := map[string]bool{}
	perWF := map[string]int{}
	for _, key := range c.led.effects {
		if seen[key] {
			v.duplicates = append(v.duplicates, "effect "+key+" applied twice")
		}
		seen[key] = true
		k, ok := splitKey(key)
		if s := steps[k]; !ok || s == nil || s.status != "done" {
			v.duplicates = append(v.duplicates, "effect "+key+" has no recorded step")
			continue
		}
		perWF[k.wf]++
	}
	for _, n := range c.led.calls {
		v.calls += n
	}
	for id, r := range wfs {
		if n, w := perWF[id], want[workflowKind(r.name)]; r.status == "success" && n != w {
			v.missing = append(v.missing, fmt.Sprintf("%s (%s) made %d effects, want %d", id, r.name, n, w))
		}
	}

	// App rows of transaction steps: exactly once each, each with its
	// checkpoint, one per run that writes one.
	wantRows := map[string]int{"mixed": 1, "leaf": 1, "tick": 1, "agent": 1, "queued": 0}
	rowsPerWF := map[string]int{}
	rows, err = c.pool.Query(ctx, "SELECT key, count(*) FROM "+appTable()+" GROUP BY key")
	require(t, err)
	for rows.Next() {
		var key string
		var n int
		require(t, rows.Scan(&key, &n))
		if n != 1 {
			v.duplicates = append(v.duplicates, fmt.Sprintf("app row %s written %d times", key, n))
		}
		k, ok := splitKey(key)
		if s := steps[k]; !ok || s == nil || s.status != "done" {
			v.duplicates = append(v.duplicates, "app row "+key+" has no recorded step")
			continue
		}
		rowsPerWF[k.wf]++
	}
	require(t, rows.Err())
	for id, r := range wfs {
		if n, w := rowsPerWF[id], wantRows[workflowKind(r.name)]; r.status == "success" && n != w {
			v.missing = append(v.missing, fmt.Sprintf("%s (%s) has %d app rows, want %d", id, r.name, n, w))
		}
	}

	// Messages: each sent once, consumed once, by its run.
	type msgCount struct{ rows, consumed int }
	msgs := map[string]msgCount{}
	rows, err = c.pool.Query(ctx, "SELECT workflow_id, count(*), count(consumed_at) FROM "+tbl("messages")+" GROUP BY workflow_id")
	require(t, err)
	for rows.Next() {
		var id string
		var m msgCount
		require(t, rows.Scan(&id, &m.rows, &m.consumed))
		msgs[id] = m
	}
	require(t, rows.Err())
	for id, r := range wfs {
		if !strings.HasPrefix(id, "mm-") || r.status != "success" {
			continue
		}
		v.messages++
		var out mixedOut
		if r.output == nil || json.Unmarshal([]byte(*r.output), &out) != nil || out.Msg != "msg:"+id {
			v.missing = append(v.missing, fmt.Sprintf("%s did not receive its message (output %v)", id, r.output))
		}
		if m := msgs[id]; m.rows != 1 || m.consumed != 1 {
			v.duplicates = append(v.duplicates, fmt.Sprintf("%s has %d messages, %d consumed; want 1, 1", id, m.rows, m.consumed))
		}
	}

	// Scheduled ticks: one run per second from the first tick to the last,
	// none skipped (CatchUp covers every downtime here), none twice (the
	// run ID is the tick).
	var ticks []time.Time
	prefix := "sched:" + tickName + ":"
	for id := range wfs {
		if s, ok := strings.CutPrefix(id, prefix); ok {
			tick, err := time.Parse(time.RFC3339, s)
			if err != nil {
				v.missing = append(v.missing, "unparsable tick run ID "+id)
				continue
			}
			ticks = append(ticks, tick)
		}
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	v.ticks = len(ticks)
	for i := 1; i < len(ticks); i++ {
		switch d := ticks[i].Sub(ticks[i-1]); {
		case d == 0:
			v.duplicates = append(v.duplicates, "tick "+ticks[i].String()+" ran twice")
		case d != time.Second:
			v.missing = append(v.missing, fmt.Sprintf("ticks between %s and %s never ran", ticks[i-1], ticks[i]))
		}
	}

	// Queue limits, from the running intervals of the queued step: at no
	// moment more than globalConc in all, or workerConc in one process. A
	// step cut by SIGKILL ends at the kill.
	type ev struct {
		at    int64
		delta int
		pid   int
		wf    string
	}
	var evs []ev
	open := map[string]intervalRec{}
	for _, x := range c.led.intervals {
		// One execution of a step: a cancelled run's step may still run
		// in a process when its resumed run's starts there.
		k := x.WF + "@" + strconv.Itoa(x.PID) + "@" + strconv.FormatInt(x.Began, 10)
		if x.Begin {
			open[k] = x
			continue
		}
		b, ok := open[k]
		if !ok {
			continue
		}
		delete(open, k)
		evs = append(evs, ev{b.At, 1, b.PID, b.WF}, ev{x.At, -1, b.PID, b.WF})
	}
	for _, b := range open {
		killed, ok := c.killedAt[b.PID]
		if !ok {
			v.overLimit = append(v.overLimit, fmt.Sprintf("%s: interval in pid %d never ended and the process was not killed", b.WF, b.PID))
			continue
		}
		evs = append(evs, ev{b.At, 1, b.PID, b.WF}, ev{killed.UnixNano(), -1, b.PID, b.WF})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta // an end before a begin at the same instant
	})
	// The runs holding a slot at each moment, named in a breach.
	inAll, inPID := map[string]int{}, map[int]map[string]int{}
	names := func(m map[string]int) string {
		var ids []string
		for id := range m {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return strings.Join(ids, " ")
	}
	count := func(m map[string]int, wf string, delta int) {
		if m[wf] += delta; m[wf] == 0 {
			delete(m, wf)
		}
	}
	global, worker := 0, map[int]int{}
	for _, e := range evs {
		global += e.delta
		worker[e.pid] += e.delta
		if inPID[e.pid] == nil {
			inPID[e.pid] = map[string]int{}
		}
		count(inAll, fmt.Sprintf("%s@%d", e.wf, e.pid), e.delta)
		count(inPID[e.pid], e.wf, e.delta)
		v.maxGlobal = max(v.maxGlobal, global)
		v.maxWorker = max(v.maxWorker, worker[e.pid])
		if e.delta > 0 && global > globalConc {
			v.overLimit = append(v.overLimit, fmt.Sprintf("%d queued runs at %s (global limit %d): %s", global, time.Unix(0, e.at).Format(time.RFC3339Nano), globalConc, names(inAll)))
		}
		if e.delta > 0 && worker[e.pid] > workerConc {
			v.overLimit = append(v.overLimit, fmt.Sprintf("%d queued runs in pid %d at %s (worker limit %d): %s", worker[e.pid], e.pid, time.Unix(0, e.at).Format(time.RFC3339Nano), workerConc, names(inPID[e.pid])))
		}
	}
	return v
}

func (v *verdict) report(t *testing.T, c *controller, took time.Duration) {
	total := 0
	kinds := make([]string, 0, len(v.workflows))
	for k, n := range v.workflows {
		total += n
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	dups := len(v.duplicates) + len(v.late)
	t.Logf(`chaos verdict (seed %d, %s in all):
  workload size:               %d workflows (%s), started by the controller: %d (+%d with an unknown commit), refused while the database was down: %d
  kills survived:              %d executor SIGKILLs
  Postgres restarts survived:  %d immediate shutdowns
  workflows completed:         %d of %d
  scheduled ticks:             %d, contiguous, each once
  messages:                    %d sent, each consumed once
  operator controls:           %d cancels, %d of them caught the run unfinished and it was resumed
  effects:                     %d, each once per idempotency key (%d requests)
  step re-executions:          %d (at-least-once; %d of them transaction steps whose COMMIT answer was lost, rolled back)
  queue peak:                  %d running in all (limit %d), %d in one executor (limit %d)
  duplicates found:            %d
  lost workflows:              %d`,
		c.p.seed, took.Round(time.Second),
		total, strings.Join(kinds, " "), len(c.created), len(c.maybe), c.rejected,
		c.kills, c.pgStops, v.completed, total, v.ticks, v.messages, c.cancelled, c.resumed,
		v.effects, v.calls, v.reruns, v.lostAcks, v.maxGlobal, globalConc, v.maxWorker, workerConc,
		dups, len(v.lost))
	fail := func(what string, list []string) {
		if len(list) == 0 {
			return
		}
		if len(list) > 20 {
			list = append(list[:20:20], fmt.Sprintf("... and %d more", len(list)-20))
		}
		t.Errorf("%s:\n  %s", what, strings.Join(list, "\n  "))
	}
	fail("lost workflows", v.lost)
	fail("duplicates", v.duplicates)
	fail("steps executed after their checkpoint existed", v.late)
	fail("missing effects, rows or messages", v.missing)
	fail("queue limits exceeded", v.overLimit)
	if c.kills < 2 {
		t.Errorf("only %d executor kills: the run proves too little", c.kills)
	}
	if c.cluster != nil && c.pgStops < 2 {
		t.Errorf("only %d Postgres stops: the run proves too little", c.pgStops)
	}
	if t.Failed() {
		t.Logf("replay with DURABLE_CHAOS_SEED=%d", c.p.seed)
	}
}
