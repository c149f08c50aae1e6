package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// signalWait bounds the wait for a test signal; only a broken mechanism
// misses it.
const signalWait = 30 * time.Second

// harness is a migrated schema shared by the services of one test (its
// replicas), a fake clock, and a table of the runs they start: the
// engine's start is an insert keyed by workflow ID, like the workflows
// table.
type harness struct {
	pool   *pgxpool.Pool
	schema string
	q      *sysdb.ScheduleQueries
	clock  *clock.Fake
	logs   *syncBuffer

	mu        sync.Mutex
	failing   string // the starts of the IDs with this prefix fail
	lostReply bool   // a start inserts its run, then fails (its executor dies)
	stopped   bool   // CanStart fails
	workflows map[string]bool
}

func newHarness(t *testing.T, now time.Time) *harness {
	t.Helper()
	pool, schema := sysdbtest.Migrated(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, sysdb.Render(`CREATE TABLE {{schema}}.test_runs (id text PRIMARY KEY, workflow text NOT NULL,
		queue text NOT NULL, input text NOT NULL)`, schema))
	require.NoError(t, err)
	return &harness{pool: pool, schema: schema, q: sysdb.NewScheduleQueries(schema, sysdb.ChannelName(schema)),
		clock: clock.NewFake(now), logs: &syncBuffer{}, workflows: map[string]bool{"job": true}}
}

// insert is the engine's start: one run per workflow ID.
func (h *harness) insert(ctx context.Context, workflow, queue, id string, input, _ []byte) (bool, error) {
	h.mu.Lock()
	failing, lost := h.failing, h.lostReply
	h.mu.Unlock()
	if failing != "" && strings.HasPrefix(id, failing) {
		return false, errDown
	}
	tag, err := h.pool.Exec(ctx, sysdb.Render(`INSERT INTO {{schema}}.test_runs VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`, h.schema),
		id, workflow, queue, string(input))
	if err == nil && lost {
		return false, errDown
	}
	if err != nil || tag.RowsAffected() == 1 {
		return err == nil, err
	}
	var owner string
	if err := h.pool.QueryRow(ctx, sysdb.Render(`SELECT workflow FROM {{schema}}.test_runs WHERE id = $1`, h.schema), id).Scan(&owner); err != nil {
		return false, err
	}
	if owner != workflow {
		return false, fmt.Errorf("%w: %q", errs.WorkflowConflict, id)
	}
	return false, nil
}

func (h *harness) config() Config {
	return Config{
		Queries:      h.q,
		DB:           h.pool,
		Clock:        h.clock,
		Log:          slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PollInterval: func() time.Duration { return time.Hour }, // passes come from Wake
		CanStart: func() error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.stopped {
				return errs.Shutdown
			}
			return nil
		},
		Start: func(ctx context.Context, workflow, id string, input, tags []byte) (bool, error) {
			return h.insert(ctx, workflow, "", id, input, tags)
		},
		Enqueue: h.insert,
		Registered: func(workflow string) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.workflows[workflow]
		},
	}
}

// service returns a service with defs declared and its signals on, not
// started; Stop runs at the end of the test.
func (h *harness) service(t *testing.T, defs ...*Def) *Service {
	t.Helper()
	s := New(h.config())
	s.signals.PassDone.Init()
	s.signals.TickFired.Init()
	for _, d := range defs {
		require.True(t, s.Declare(d))
	}
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return s
}

// started is service, started.
func (h *harness) started(t *testing.T, defs ...*Def) *Service {
	t.Helper()
	s := h.service(t, defs...)
	require.NoError(t, s.Start(context.Background()))
	return s
}

// runs returns the workflow IDs of the runs started, sorted.
func (h *harness) runs(t *testing.T) []string {
	t.Helper()
	rows, err := h.pool.Query(context.Background(), sysdb.Render(`SELECT id FROM {{schema}}.test_runs ORDER BY id`, h.schema))
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func (h *harness) input(t *testing.T, id string) string {
	t.Helper()
	var in string
	require.NoError(t, h.pool.QueryRow(context.Background(), sysdb.Render(`SELECT input FROM {{schema}}.test_runs WHERE id = $1`, h.schema), id).Scan(&in))
	return in
}

func (h *harness) row(t *testing.T, name string) sysdb.ScheduleRow {
	t.Helper()
	r, found, err := h.q.Get(context.Background(), h.pool, name)
	require.NoError(t, err)
	require.True(t, found, name)
	return r
}

// waitTick wakes s until it fires the tick of workflow ID id.
func waitTick(t *testing.T, s *Service, id string) {
	t.Helper()
	s.Wake()
	deadline := time.After(signalWait)
	for {
		select {
		case got := <-s.signals.TickFired.Chan():
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("tick %s never fired", id)
		}
	}
}

// waitPass wakes s and waits for a whole pass that began after the call.
func waitPass(t *testing.T, s *Service) {
	t.Helper()
	for len(s.signals.PassDone.Chan()) > 0 {
		<-s.signals.PassDone.Chan()
	}
	// A pass under way when Wake is called may have read the rows
	// already; the loop starts another after it, which a second Wake
	// waits for.
	for range 2 {
		s.Wake()
		s.signals.PassDone.Wait(t, signalWait)
	}
}

// minutely is a schedule of workflow "job" every minute whose input is
// its tick, as given, in RFC 3339.
func minutely(name string, catchUp int) *Def {
	return &Def{Name: name, Workflow: "job", Spec: "* * * * *", Location: "UTC", CatchUp: catchUp,
		Input: func(tick time.Time) ([]byte, error) { return []byte(tick.Format(time.RFC3339)), nil }}
}

// ids returns the workflow IDs of ticks of schedule name.
func ids(name string, ticks ...time.Time) []string {
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = tickID(name, t)
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// count returns how many log lines hold every part.
func (b *syncBuffer) count(parts ...string) int {
	n := 0
lines:
	for _, l := range strings.Split(b.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue lines
			}
		}
		n++
	}
	return n
}

var errDown = errors.New("database away")
