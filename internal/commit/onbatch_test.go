package commit

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/durable-go/durable/internal/sysdb"
)

// TestOnBatch: OnBatch is told the kind and size of every batch written,
// a write that went alone included.
func TestOnBatch(t *testing.T) {
	ctx, w, _, _ := testWriter(t)
	var mu sync.Mutex
	var got []string
	w.cfg.OnBatch = func(kind string, n int) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s:%d", kind, n))
		mu.Unlock()
	}
	var items []*Item[*sysdb.OwnedRun]
	for _, id := range []string{"a", "b", "c"} {
		items = append(items, &Item[*sysdb.OwnedRun]{V: &sysdb.OwnedRun{ID: id, Name: "w", Input: json.RawMessage(`1`)}})
	}
	w.flushStarts(items)
	if ok, err := w.WriteStep(ctx, checkpoint("a", 0, "s", 1, `1`)); err != nil || !ok {
		t.Fatalf("step: %v, %v", ok, err)
	}
	if ok, err := w.WriteFinish(ctx, &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: "a", Epoch: 1, Status: "success",
		Output: json.RawMessage(`1`)}}); err != nil || !ok {
		t.Fatalf("finish: %v, %v", ok, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "[start:3 step:1 finish:1]"; fmt.Sprint(got) != want {
		t.Fatalf("batches %v, want %s", got, want)
	}
}
