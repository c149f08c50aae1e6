package commit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testWriter returns a Writer on a fresh schema with every migration
// applied, and the schema's pool, name and statements.
func testWriter(t *testing.T) (context.Context, *Writer, *pgxpool.Pool, string) {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, schema := sysdbtest.Migrated(t)
	w := New(Config{
		DB: pool, Queries: sysdb.New(schema, true), AppVersion: "test", ExecutorID: "me", Ctx: ctx,
		IsTransient: func(error) bool { return false },
		RetryBG: func(ctx context.Context, _ string, op func(context.Context) error) error {
			return op(ctx)
		},
		WakeParentOfFinished: func(context.Context, string) {},
		Log:                  slog.New(slog.DiscardHandler),
	})
	return ctx, w, pool, schema
}

func start(ctx context.Context, t *testing.T, w *Writer, id string) {
	t.Helper()
	if ok, err := w.startOne(ctx, &sysdb.OwnedRun{ID: id, Name: "w", Input: json.RawMessage("1")}); err != nil || !ok {
		t.Fatalf("start %s: %v, %v", id, ok, err)
	}
}

func checkpoint(id string, pos int, name string, epoch int64, output string) *sysdb.InsertStepParams {
	return &sysdb.InsertStepParams{WorkflowID: id, Pos: pos, Name: name, Status: "done", Output: json.RawMessage(output),
		Attempts: 1, StartedAt: time.Now(), Epoch: epoch}
}

// TestStepBatchWithARecordedRow: a multi-row step write in which one row
// is already recorded (an earlier try whose acknowledgement was lost)
// still writes the others, reports that one as not written (the caller
// then finds it recorded), and leaves the recorded row as it was; so does
// a single-row write.
func TestStepBatchWithARecordedRow(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	var items []*Item[*sysdb.InsertStepParams]
	for i := range 3 {
		id := fmt.Sprintf("run-%d", i)
		start(ctx, t, w, id)
		items = append(items, &Item[*sysdb.InsertStepParams]{V: checkpoint(id, 0, "s", 1, `"new"`)})
	}
	if _, err := w.cfg.Queries.InsertStep(ctx, pool, *checkpoint("run-1", 0, "s", 1, `"old"`)); err != nil {
		t.Fatal(err)
	}
	w.flushSteps(items)
	for i, it := range items {
		if it.Err != nil {
			t.Fatalf("item %d: %v", i, it.Err)
		}
		if want := i != 1; it.OK != want {
			t.Errorf("item %d: written %v, want %v", i, it.OK, want)
		}
	}
	rows, err := pool.Query(ctx, "SELECT workflow_id, output::text FROM "+pgx.Identifier{schema, "steps"}.Sanitize()+" ORDER BY workflow_id")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, out string
		err := r.Scan(&id, &out)
		return id + "=" + out, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]string{`run-0="new"`, `run-1="old"`, `run-2="new"`}); fmt.Sprint(got) != want {
		t.Errorf("steps %v, want %v", got, want)
	}
	// The single-row statement (a lone write, or group commit off) says
	// the same of a recorded row.
	one := []*Item[*sysdb.InsertStepParams]{items[1]}
	w.flushSteps(one)
	if one[0].OK || one[0].Err != nil {
		t.Errorf("lone write of a recorded step: written %v, err %v; want false, nil", one[0].OK, one[0].Err)
	}
}

// TestFinishWithSteps: the finish statements that carry deferred
// checkpoints write them only for the runs they finish: a fenced run gets
// neither its outcome nor its steps, in the multi-row statement and the
// single-row one; a batch whose statement fails as a whole (a step row
// already recorded) is retried run by run, so only that run's finish fails.
func TestFinishWithSteps(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	item := func(id string, epoch int64, steps ...string) *Item[*sysdb.FinishOneStepsParams] {
		f := &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: id, Epoch: epoch, Status: "success", Output: json.RawMessage(`"ok"`)}}
		for i, s := range steps {
			f.Steps = append(f.Steps, checkpoint(id, i, s, epoch, `1`))
		}
		return &Item[*sysdb.FinishOneStepsParams]{V: f}
	}
	status := func(id string) string {
		var s string
		if err := pool.QueryRow(ctx, "SELECT status FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+" WHERE id = $1", id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s + fmt.Sprint(sysdbtest.RecordedSteps(ctx, t, pool, schema, id))
	}
	check := func(items []*Item[*sysdb.FinishOneStepsParams], want ...string) {
		t.Helper()
		for i, it := range items {
			got := fmt.Sprintf("%v %v %s", it.OK, it.Err != nil, status(it.V.ID))
			if got != want[i] {
				t.Errorf("%s: %s, want %s", it.V.ID, got, want[i])
			}
		}
	}

	for _, id := range []string{"m-steps", "m-fenced", "m-plain", "s-steps", "s-fenced"} {
		start(ctx, t, w, id)
	}
	many := []*Item[*sysdb.FinishOneStepsParams]{item("m-steps", 1, "a", "b"), item("m-fenced", 2, "a"), item("m-plain", 1)}
	w.flushFinishes(many)
	check(many, "true false success[a+ b+]", "false false pending[]", "true false success[]")
	one := []*Item[*sysdb.FinishOneStepsParams]{item("s-steps", 1, "a")}
	w.flushFinishes(one)
	fenced := []*Item[*sysdb.FinishOneStepsParams]{item("s-fenced", 2, "a")}
	w.flushFinishes(fenced)
	check(append(one, fenced...), "true false success[a+]", "false false pending[]")

	// A step row already there fails the multi-row statement; the rows are
	// then written one by one and only that run's finish fails.
	for _, id := range []string{"r-dup", "r-ok"} {
		start(ctx, t, w, id)
	}
	if _, err := w.cfg.Queries.InsertStep(ctx, pool, *checkpoint("r-dup", 0, "a", 1, `1`)); err != nil {
		t.Fatal(err)
	}
	retried := []*Item[*sysdb.FinishOneStepsParams]{item("r-dup", 1, "a"), item("r-ok", 1, "a")}
	w.flushFinishes(retried)
	check(retried, "false true pending[a]", "true false success[a+]")
	var pgErr interface{ SQLState() string }
	if !errors.As(retried[0].Err, &pgErr) || pgErr.SQLState() != "23505" {
		t.Errorf("r-dup: error %v, want a unique violation", retried[0].Err)
	}
}

// TestFinishOneAfterwards: a finish alone notifies the waiter in another
// process that asked and wakes the parent parked on the run; a finish that
// touches no row asks the engine to wake the parent in case its earlier
// try finished the run.
func TestFinishOneAfterwards(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn, err := pgx.Connect(ctx, pgtest.DirectURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, w.cfg.Queries.ListenSQL()); err != nil {
		t.Fatal(err)
	}
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	if _, err := pool.Exec(ctx, `INSERT INTO `+wf+` (id, name, status, app_version, epoch, wake_at, wait_topic)
		VALUES ('parent', 'w', 'pending', 'v', 1, now() + interval '1 hour', 'child:child')`); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.startOne(ctx, &sysdb.OwnedRun{ID: "child", Name: "w", Input: json.RawMessage("1"), ParentID: "parent"}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := w.cfg.Queries.WatchWorkflow(ctx, pool, "child"); err != nil {
		t.Fatal(err)
	}
	var woken []string
	w.cfg.WakeParentOfFinished = func(_ context.Context, id string) { woken = append(woken, id) }
	f := &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: "child", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)}}
	if ok, err := w.WriteFinish(ctx, f); !ok || err != nil {
		t.Fatalf("finish: %v, %v", ok, err)
	}
	got := map[string]bool{}
	for range 2 {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[n.Payload] = true
	}
	if !got["d:child"] || !got["n:parent"] {
		t.Fatalf("notifications %v, want the finish's and the parent's wake-up", got)
	}
	var due bool
	if err := pool.QueryRow(ctx, `SELECT wake_at <= now() FROM `+wf+` WHERE id = 'parent'`).Scan(&due); err != nil || !due {
		t.Fatalf("the parent is not due: %v %v", due, err)
	}
	if woken != nil {
		t.Fatalf("a finish that wrote its row asked to wake the parent of %v", woken)
	}
	if ok, err := w.WriteFinish(ctx, f); ok || err != nil {
		t.Fatalf("finish again: %v, %v; want not written", ok, err)
	}
	if fmt.Sprint(woken) != "[child]" {
		t.Fatalf("a finish that touched no row woke the parents of %v, want [child]", woken)
	}
}

// TestStartsInOneBatch: runs started together are inserted by one
// statement; an ID taken, or given twice, is inserted once.
func TestStartsInOneBatch(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	start(ctx, t, w, "taken")
	var items []*Item[*sysdb.OwnedRun]
	for _, id := range []string{"a", "taken", "b", "a"} {
		items = append(items, &Item[*sysdb.OwnedRun]{V: &sysdb.OwnedRun{ID: id, Name: "w", Input: json.RawMessage(`2`)}})
	}
	w.flushStarts(items)
	var got []string
	for _, it := range items {
		got = append(got, fmt.Sprintf("%s:%v:%v", it.V.ID, it.OK, it.Err))
	}
	if want := "[a:true:<nil> taken:false:<nil> b:true:<nil> a:false:<nil>]"; fmt.Sprint(got) != want {
		t.Fatalf("started %v, want %s", got, want)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+
		" WHERE executor_id = 'me' AND app_version = 'test'").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d runs of this executor (%v), want 3", n, err)
	}
}

// TestFinishWakesWatchers: the finish of a run a waiter watches wakes the
// runs parked in a Select on it, written in a batch or alone; a watcher of
// a run that did not finish stays parked.
func TestFinishWakesWatchers(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	for _, id := range []string{"a", "b", "c"} {
		start(ctx, t, w, id)
		if _, err := w.cfg.Queries.WatchWorkflow(ctx, pool, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range [][2]string{{"on-a", "done:a"}, {"on-c", "done:c"}, {"on-x", "done:x"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+wf+` (id, name, status, app_version, epoch, wake_at, wait_any)
			VALUES ($1, 'w', 'pending', 'v', 1, now() + interval '1 hour', ARRAY[$2])`, p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	due := func(id string) bool {
		var d bool
		if err := pool.QueryRow(ctx, `SELECT wake_at <= now() FROM `+wf+` WHERE id = $1`, id).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	finish := func(id string) *Item[*sysdb.FinishOneStepsParams] {
		return &Item[*sysdb.FinishOneStepsParams]{V: &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: id, Epoch: 1,
			Status: "success", Output: json.RawMessage(`1`)}}}
	}
	w.flushFinishes([]*Item[*sysdb.FinishOneStepsParams]{finish("a"), finish("b")})
	if !due("on-a") {
		t.Fatal("a batch finish did not wake the watcher of its run")
	}
	w.flushFinishes([]*Item[*sysdb.FinishOneStepsParams]{finish("c")})
	if !due("on-c") {
		t.Fatal("a lone finish did not wake the watcher of its run")
	}
	if due("on-x") {
		t.Fatal("a watcher of another run was woken")
	}
}

// TestFinishHandsOn: a finish batch with runs that name their queue
// (HandOn) asks Config.HandOn about those queues, and writes the finishes
// and the hand-on in one statement, told the runs that may hand on; after
// learns the runs claimed and that the statement committed. A statement
// that fails is written again without the hand-on, and after learns that
// it may not have committed.
func TestFinishHandsOn(t *testing.T) {
	ctx, w, pool, schema := testWriter(t)
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		start(ctx, t, w, id)
	}
	finish := func(id string, epoch int64, queue string) *Item[*sysdb.FinishOneStepsParams] {
		return &Item[*sysdb.FinishOneStepsParams]{V: &sysdb.FinishOneStepsParams{
			FinishOneParams: sysdb.FinishOneParams{ID: id, Epoch: epoch, Status: "success", Output: json.RawMessage("1")},
			HandOn:          queue}}
	}
	var asked map[string]bool
	var ended []bool
	queue := "q"
	w.cfg.HandOn = func(ctx context.Context, queues map[string]bool) (context.Context, sysdb.HandOnParams, func([]sysdb.ClaimedRow, bool), bool) {
		asked = queues
		return ctx, sysdb.HandOnParams{Queues: []string{queue}, Running: []int{2}, ExecutorID: "me", AppVersion: "test"},
			func(claimed []sysdb.ClaimedRow, committed bool) {
				if len(claimed) != 0 {
					t.Errorf("claimed %v from a queue that does not exist", claimed)
				}
				ended = append(ended, committed)
			}, true
	}
	items := []*Item[*sysdb.FinishOneStepsParams]{finish("a", 1, "q"), finish("b", 1, "q"), finish("c", 9, "q"),
		finish("d", 1, "r"), finish("e", 1, "")}
	w.flushFinishes(items)
	for i, it := range items {
		if want := i != 2; it.OK != want || it.Err != nil {
			t.Errorf("item %d: written %v (%v), want %v", i, it.OK, it.Err, want)
		}
	}
	if len(asked) != 2 || !asked["q"] || !asked["r"] {
		t.Errorf("HandOn asked about %v, want q and r", asked)
	}
	if len(ended) != 1 || !ended[0] {
		t.Errorf("after told %v, want [true]", ended)
	}

	asked, ended, queue = nil, nil, "bad\x00name" // refused by the server: the statement fails
	items = []*Item[*sysdb.FinishOneStepsParams]{finish("f", 1, "q")}
	w.flushFinishes(items)
	if !items[0].OK || items[0].Err != nil {
		t.Errorf("written %v (%v) after a failed hand-on, want written without it", items[0].OK, items[0].Err)
	}
	if len(ended) != 1 || ended[0] {
		t.Errorf("after told %v, want [false]", ended)
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+" WHERE id = 'f'").Scan(&status); err != nil || status != "success" {
		t.Errorf("f is %q (%v)", status, err)
	}
}
