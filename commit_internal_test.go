package durable

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStepBatchWithARecordedRow: a multi-row step write in which one row
// is already recorded (an earlier try whose acknowledgement was lost)
// still writes the others, reports that one as not written (the caller
// then finds it recorded), and leaves the recorded row as it was; so does
// a single-row write.
func TestStepBatchWithARecordedRow(t *testing.T) {
	t.Parallel()
	ctx, pool, schema, e := newEngine(t, &Config{ExecutorID: "batch-exec"})
	var items []*batchItem[*stepWrite]
	for i := range 3 {
		id := fmt.Sprintf("run-%d", i)
		if _, err := pool.Exec(ctx, e.q.InsertOwned, id, "w", "test", "batch-exec", json.RawMessage("1"), nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		items = append(items, &batchItem[*stepWrite]{v: &stepWrite{id: id, pos: 0, name: "s", status: stepDone,
			output: []byte(`"new"`), attempts: 1, started: time.Now(), epoch: 1}})
	}
	if _, err := pool.Exec(ctx, e.q.InsertStep, "run-1", 0, "s", stepDone, json.RawMessage(`"old"`), nil, 1, time.Now(), int64(1)); err != nil {
		t.Fatal(err)
	}
	e.flushSteps(items)
	for i, it := range items {
		if it.err != nil {
			t.Fatalf("item %d: %v", i, it.err)
		}
		if want := i != 1; it.ok != want {
			t.Errorf("item %d: written %v, want %v", i, it.ok, want)
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
	one := []*batchItem[*stepWrite]{items[1]}
	e.flushSteps(one)
	if one[0].ok || one[0].err != nil {
		t.Errorf("lone write of a recorded step: written %v, err %v; want false, nil", one[0].ok, one[0].err)
	}
}
