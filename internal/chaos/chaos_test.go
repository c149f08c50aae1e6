package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

func TestMain(m *testing.M) {
	if runExecutorIfAsked() {
		return
	}
	pgtest.Main(m)
}

// plan is what one chaos run does, from the environment.
type plan struct {
	long      bool
	duration  time.Duration // of the chaos phase
	seed      uint64
	killEvery [2]time.Duration // random gap between executor kills
	pgStops   []time.Duration  // offsets of the Postgres stops (short run)
	pgEvery   [2]time.Duration // random gap between stops (long run)
	startGap  [2]time.Duration // random gap between new workflows
}

func planFromEnv(t *testing.T) plan {
	p := plan{
		duration:  35 * time.Second,
		killEvery: [2]time.Duration{4 * time.Second, 8 * time.Second},
		pgStops:   []time.Duration{10 * time.Second, 23 * time.Second},
		startGap:  [2]time.Duration{80 * time.Millisecond, 250 * time.Millisecond},
	}
	if os.Getenv("DURABLE_CHAOS") == "long" {
		p.long = true
		p.duration = 5 * time.Minute
		p.killEvery = [2]time.Duration{2 * time.Second, 8 * time.Second}
		p.pgEvery = [2]time.Duration{20 * time.Second, 45 * time.Second}
		p.startGap = [2]time.Duration{60 * time.Millisecond, 250 * time.Millisecond}
	}
	if s := os.Getenv("DURABLE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("DURABLE_CHAOS_DURATION=%q: want a positive Go duration like 90s", s)
		}
		p.duration = d
		p.pgStops = []time.Duration{d * 10 / 35, d * 23 / 35} // both inside the phase
	}
	p.seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("DURABLE_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DURABLE_CHAOS_SEED=%q: want an unsigned integer", s)
		}
		p.seed = seed
	}
	return p
}

// ledger is the external world of the workload: an effect provider that
// applies each idempotency key once, and the log of step executions and
// queue intervals. It lives in the test process, which is never killed.
type ledger struct {
	mu        sync.Mutex
	calls     map[string]int
	effects   []string
	execs     []execRec
	runs      []runRec
	intervals []intervalRec
}

func newLedger() *ledger { return &ledger{calls: map[string]int{}} }

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.URL.Path {
	case "/effect":
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "no Idempotency-Key", http.StatusBadRequest)
			return
		}
		if l.calls[key] == 0 {
			l.effects = append(l.effects, key)
		}
		l.calls[key]++
		fmt.Fprintf(w, "effect %s", key)
	case "/exec":
		var rec execRec
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.execs = append(l.execs, rec)
	case "/run":
		var rec runRec
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.runs = append(l.runs, rec)
	case "/interval":
		var rec intervalRec
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.intervals = append(l.intervals, rec)
	default:
		http.NotFound(w, r)
	}
}

// executor is one executor process.
type executor struct {
	id    string
	child *proctest.Child
	pid   int
}

// controller drives one chaos run. It runs in the test goroutine only.
type controller struct {
	t       *testing.T
	p       plan
	rng     *rand.Rand
	cluster *pgtest.Cluster // nil: the server is not ours, it is never stopped
	url     string
	pool    *pgxpool.Pool
	w       *workload
	e       *durable.Engine
	env     []string
	led     *ledger

	slots     [3]*executor
	gen       [3]int
	restartAt [3]time.Time
	killedAt  map[int]time.Time // pid -> SIGKILL time

	created  map[string]string // workflow ID -> kind, committed
	maybe    map[string]string // commit outcome unknown (the database went away)
	rejected int               // starts refused while the database was down
	sends    map[string]time.Time
	sent     map[string]string // workflow ID -> message sent
	// Operator controls: runs to cancel mid-flight, then cancelled runs to
	// resume (workflow ID -> when).
	cancels   map[string]time.Time
	resumes   map[string]time.Time
	cancelled int // Cancel calls that succeeded
	resumed   int // cancelled runs put back to work by Resume
	kills     int
	pgStops   int
	seq       int
}

func TestChaos(t *testing.T) {
	p := planFromEnv(t)
	t.Logf("chaos: seed %d (replay with DURABLE_CHAOS_SEED=%d), chaos phase %v, long=%v", p.seed, p.seed, p.duration, p.long)
	c := &controller{t: t, p: p, rng: rand.New(rand.NewPCG(p.seed, p.seed^0x9e3779b97f4a7c15)),
		killedAt: map[int]time.Time{}, created: map[string]string{}, maybe: map[string]string{},
		sends: map[string]time.Time{}, sent: map[string]string{},
		cancels: map[string]time.Time{}, resumes: map[string]time.Time{}}
	ctx := context.Background()

	cluster, err := pgtest.Private(t)
	if err != nil {
		t.Logf("chaos: Postgres is NOT stopped in this run: %v", err)
		c.url = pgtest.URL(t)
		schema = pgtest.Schema(t)
	} else {
		c.cluster, c.url = cluster, cluster.URL
		schema = "chaos"
	}
	c.pool = poolOn(t, c.url)
	require(t, durable.Migrate(ctx, c.pool, schema))
	_, err = c.pool.Exec(ctx, "CREATE TABLE "+appTable()+" (id bigserial PRIMARY KEY, key text NOT NULL, workflow_id text NOT NULL)")
	require(t, err)

	c.led = newLedger()
	ledgerSrv := httptest.NewServer(c.led)
	t.Cleanup(ledgerSrv.Close)
	model := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn <= len(agentTurns) {
			return agentkittest.Reply{Text: fmt.Sprintf("turn %d", r.Turn-1), ToolCalls: agentTurns[r.Turn-1]}
		}
		return agentkittest.Reply{Text: "done"}
	})
	t.Cleanup(model.Close)

	// The controller's engine is never launched: it starts runs with
	// StartTx/EnqueueTx, sends messages and pauses the schedule.
	c.e, err = durable.New(c.pool, &durable.Config{Schema: schema, AppVersion: "chaos", SkipMigrate: true})
	require(t, err)
	c.w, err = register(c.e, nil, model.URL)
	require(t, err)
	c.env = []string{envURL + "=" + c.url, envLedger + "=" + ledgerSrv.URL, envModel + "=" + model.URL, envSchema + "=" + schema}

	for i := range c.slots {
		c.start(i)
	}
	began := time.Now()
	c.chaos(began)
	c.drain()
	v := c.verdict()
	v.report(t, c, time.Since(began))
}

func require(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func poolOn(t *testing.T, url string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	require(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func (c *controller) between(r [2]time.Duration) time.Duration {
	return r[0] + time.Duration(c.rng.Int64N(int64(r[1]-r[0])+1))
}

// start starts the executor of slot i. Most restarts keep the slot's
// executor ID (boot recovery resumes its runs); one in three takes a new
// one, so its old runs wait for a peer to take them over when the lease
// expires.
func (c *controller) start(i int) {
	if c.slots[i] != nil {
		return
	}
	if c.gen[i] > 0 && c.rng.IntN(3) == 0 {
		c.gen[i]++
	} else if c.gen[i] == 0 {
		c.gen[i] = 1
	}
	id := fmt.Sprintf("exec-%d-%d", i, c.gen[i])
	env := append(c.env[:len(c.env):len(c.env)], envExecutor+"="+id)
	if i == 0 {
		env = append(env, envDefer+"=1") // the first slot defers step checkpoints
	}
	ch := proctest.Start(c.t, env...)
	c.slots[i] = &executor{id: id, child: ch, pid: ch.Cmd.Process.Pid}
}

func (c *controller) kill(i int) {
	x := c.slots[i]
	x.child.Kill(c.t)
	c.killedAt[x.pid] = time.Now()
	c.slots[i] = nil
	c.kills++
	c.restartAt[i] = time.Now().Add(c.between([2]time.Duration{0, 1500 * time.Millisecond}))
}

func (c *controller) pgDown() { c.cluster.Stop(c.t, true); c.pgStops++ }
func (c *controller) pgUp()   { c.cluster.Start(c.t) }

// chaos runs the workload and the faults for the planned duration.
func (c *controller) chaos(began time.Time) {
	end := began.Add(c.p.duration)
	nextKill := time.Now().Add(c.between(c.p.killEvery))
	nextStart := time.Now()
	var pgStopAt []time.Time
	if c.cluster != nil {
		if c.p.long {
			for at := began.Add(c.between(c.p.pgEvery)); at.Before(end); at = at.Add(c.between(c.p.pgEvery)) {
				pgStopAt = append(pgStopAt, at)
			}
		} else {
			for _, off := range c.p.pgStops {
				pgStopAt = append(pgStopAt, began.Add(off))
			}
		}
	}
	var pgUpAt time.Time // zero: running
	for now := time.Now(); now.Before(end); now = time.Now() {
		switch {
		case pgUpAt.IsZero() && len(pgStopAt) > 0 && !now.Before(pgStopAt[0]):
			pgStopAt = pgStopAt[1:]
			c.t.Logf("chaos: %5.1fs stopping Postgres (immediate)", time.Since(began).Seconds())
			c.pgDown()
			pgUpAt = time.Now().Add(c.between([2]time.Duration{200 * time.Millisecond, 1500 * time.Millisecond}))
		case !pgUpAt.IsZero() && !now.Before(pgUpAt):
			c.pgUp()
			c.t.Logf("chaos: %5.1fs Postgres is back", time.Since(began).Seconds())
			pgUpAt = time.Time{}
		case !now.Before(nextKill):
			var up []int
			for i, x := range c.slots {
				if x != nil {
					up = append(up, i)
				}
			}
			if len(up) > 0 {
				i := up[c.rng.IntN(len(up))]
				c.t.Logf("chaos: %5.1fs SIGKILL executor %s (pid %d)", time.Since(began).Seconds(), c.slots[i].id, c.slots[i].pid)
				c.kill(i)
			}
			nextKill = now.Add(c.between(c.p.killEvery))
		case !now.Before(nextStart):
			c.startOne()
			nextStart = now.Add(c.between(c.p.startGap))
		default:
			for i := range c.slots {
				if c.slots[i] == nil && !now.Before(c.restartAt[i]) {
					c.start(i)
				}
			}
			c.sendDue(pgUpAt.IsZero())
			c.controlDue(pgUpAt.IsZero())
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !pgUpAt.IsZero() {
		c.pgUp()
	}
}

// startOne starts a random new workflow in a transaction of the controller.
func (c *controller) startOne() {
	c.seq++
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var id, kind string
	var more []string // further runs of a burst
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		c.rejected++
		return
	}
	switch n := c.rng.IntN(100); {
	case n < 30:
		id, kind = fmt.Sprintf("m-%d", c.seq), "mixed"
		_, err = c.w.mixed.StartTx(ctx, tx, mixedIn{SleepMS: c.rng.IntN(1200)}, &durable.StartOpts{ID: id})
	case n < 45:
		id, kind = fmt.Sprintf("mc-%d", c.seq), "mixed"
		_, err = c.w.mixed.StartTx(ctx, tx, mixedIn{SleepMS: c.rng.IntN(1200), Child: true}, &durable.StartOpts{ID: id})
	case n < 60:
		id, kind = fmt.Sprintf("mm-%d", c.seq), "mixed"
		_, err = c.w.mixed.StartTx(ctx, tx, mixedIn{SleepMS: c.rng.IntN(600), Msg: true}, &durable.StartOpts{ID: id})
	case n < 85: // a burst, to press on the queue's limits
		id, kind = fmt.Sprintf("q-%d", c.seq), "queued"
		burst := 1 + c.rng.IntN(6)
		for k := 0; k < burst && err == nil; k++ {
			qid := fmt.Sprintf("%s-%d", id, k)
			_, err = c.w.queued.EnqueueTx(ctx, tx, c.w.queue, queuedIn{HoldMS: 50 + c.rng.IntN(400)}, &durable.EnqueueOpts{ID: qid})
			more = append(more, qid)
		}
		id, more = more[0], more[1:]
	default:
		id, kind = fmt.Sprintf("a-%d", c.seq), "agent"
		_, err = c.w.agent.Workflow().StartTx(ctx, tx, agentkit.Input{Prompt: "Work, " + id + "."}, &durable.StartOpts{ID: id})
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		c.rejected++
		return
	}
	err = tx.Commit(ctx)
	for _, id := range append(more, id) {
		if err != nil {
			c.maybe[id] = kind // the COMMIT went out; its answer did not come back
		} else {
			c.created[id] = kind
		}
	}
	if id[:3] == "mm-" {
		c.sends[id] = time.Now().Add(c.between([2]time.Duration{0, 2 * time.Second}))
	}
	if (kind == "mixed" || kind == "queued") && c.rng.IntN(100) < cancelPercent {
		c.cancels[id] = time.Now().Add(c.between([2]time.Duration{0, time.Second}))
	}
}

// cancelPercent of the mixed runs and of the queue bursts' first runs are
// cancelled by the controller while they run, sleep, wait or are queued,
// then resumed: an operator's controls racing executors, kills and
// outages. Every one must still succeed, with each effect once per key,
// and a cancelled queued run whose step ignores its context (the hold
// step sleeps through it) keeps its slot until that step returns: the
// queue limits hold.
const cancelPercent = 20

// controlDue cancels and resumes the runs whose time came (retrying those
// that failed).
func (c *controller) controlDue(dbUp bool) {
	if !dbUp {
		return
	}
	c.dueEach(c.cancels, func(ctx context.Context, id string) error {
		if err := c.e.Cancel(ctx, id, nil); err != nil {
			return err
		}
		c.cancelled++
		c.resumes[id] = time.Now().Add(c.between([2]time.Duration{100 * time.Millisecond, 1500 * time.Millisecond}))
		return nil
	})
	c.dueEach(c.resumes, func(ctx context.Context, id string) error {
		err := c.e.Resume(ctx, id, nil)
		switch {
		case err == nil:
			c.resumed++
		case errors.Is(err, durable.ErrInvalidArgument):
			// Not cancelled: it had finished before the cancel (which is
			// then a no-op), or an earlier Resume committed but its answer
			// was lost.
			return nil
		}
		return err
	})
}

// sendDue sends the messages whose time came (retrying those that failed).
func (c *controller) sendDue(dbUp bool) {
	if !dbUp {
		return
	}
	c.dueEach(c.sends, func(ctx context.Context, id string) error {
		msg := "msg:" + id
		if err := durable.Send(ctx, c.e, id, topicGo, msg, &durable.SendOpts{IdempotencyKey: "controller"}); err != nil {
			return err
		}
		c.sent[id] = msg
		return nil
	})
}

// dueEach calls act, with a 5 s context, for each run in m whose time
// came. A run leaves m when act returns nil, or when its start's commit
// was in doubt and it turns out not to exist; on another error it is tried
// again 200 ms later.
func (c *controller) dueEach(m map[string]time.Time, act func(ctx context.Context, id string) error) {
	now := time.Now()
	for id, at := range m {
		if now.Before(at) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := act(ctx, id)
		cancel()
		if _, inDoubt := c.maybe[id]; inDoubt && errors.Is(err, durable.ErrWorkflowNotFound) {
			err = nil // its start did not commit after all
		}
		if err != nil {
			m[id] = now.Add(200 * time.Millisecond)
			continue
		}
		delete(m, id)
	}
}

// drain brings everything back up, stops the schedule and waits until no
// run is pending, then stops the executors cleanly.
func (c *controller) drain() {
	t := c.t
	// On a machine slow enough that the planned faults did not all fit in
	// the chaos phase, inject the missing ones now: the verdict needs at
	// least two of each.
	for c.cluster != nil && c.pgStops < 2 {
		c.t.Logf("chaos: stopping Postgres (immediate) once more after the chaos phase")
		c.pgDown()
		time.Sleep(300 * time.Millisecond)
		c.pgUp()
	}
	for i := range c.slots {
		c.start(i)
	}
	for c.kills < 2 {
		i := c.rng.IntN(len(c.slots))
		c.t.Logf("chaos: SIGKILL executor %s (pid %d) after the chaos phase", c.slots[i].id, c.slots[i].pid)
		c.kill(i)
		c.start(i)
	}
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.e.PauseSchedule(pctx, tickName)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause schedule: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// An executor's pass that read the schedule before the pause may still
	// start one tick: let every executor see the pause.
	time.Sleep(3 * pollInterval)
	clear(c.cancels) // not cancelled after all
	quiet := 0
	for quiet < 2 {
		c.sendDue(true)
		for id := range c.sends {
			c.sends[id] = time.Time{}
		}
		c.controlDue(true)
		for id := range c.resumes {
			c.resumes[id] = time.Time{}
		}
		var pending int
		err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+
			" WHERE status IN ('pending', 'enqueued')").Scan(&pending)
		if err == nil && pending == 0 && len(c.sends) == 0 && len(c.resumes) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			for i, x := range c.slots {
				if x != nil {
					t.Logf("executor %d (%s) stderr:\n%s", i, x.id, x.child.Stderr.String())
				}
			}
			c.logPending(t, ctx, schema)
			t.Fatalf("runs still pending after 5 minutes of drain: %d (err %v)", pending, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, x := range c.slots {
		x.child.Stdin.Close()
	}
	for i, x := range c.slots {
		if err := x.child.Wait(t); err != nil {
			t.Errorf("executor %s did not stop cleanly: %v\n%s", x.id, err, x.child.Stderr.String())
		}
		c.slots[i] = nil
	}
}

// logPending logs the runs still pending or enqueued and the executors'
// leases, to tell why a drain did not end.
func (c *controller) logPending(t *testing.T, ctx context.Context, schema string) {
	rows, err := c.pool.Query(ctx, `SELECT id, name, status, coalesce(executor_id, '-'), epoch,
		coalesce(queue_name, '-'), coalesce(wake_at::text, '-'), coalesce(wait_topic, '-'),
		recovery_attempts, updated_at::text, app_version FROM `+pgx.Identifier{schema, "workflows"}.Sanitize()+`
		WHERE status IN ('pending', 'enqueued') ORDER BY updated_at LIMIT 20`)
	if err != nil {
		t.Logf("pending runs: %v", err)
		return
	}
	for rows.Next() {
		var id, name, status, executor, queue, wake, topic, updated, version string
		var epoch int64
		var attempts int
		if err := rows.Scan(&id, &name, &status, &executor, &epoch, &queue, &wake, &topic, &attempts, &updated, &version); err != nil {
			t.Logf("pending runs: %v", err)
			break
		}
		t.Logf("pending: id=%s name=%s status=%s executor=%s epoch=%d queue=%s wake_at=%s topic=%s attempts=%d updated=%s version=%s",
			id, name, status, executor, epoch, queue, wake, topic, attempts, updated, version)
	}
	rows.Close()
	var leases string
	_ = c.pool.QueryRow(ctx, `SELECT coalesce(string_agg(executor_id || ' ' || lease_expires_at::text, '; '), '')
		FROM `+pgx.Identifier{schema, "executors"}.Sanitize()).Scan(&leases)
	t.Logf("executors: %s", leases)
}
