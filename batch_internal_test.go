package durable

import (
	"reflect"
	"slices"
	"testing"
)

// TestBatchableKnowsEveryOption: every field of EnqueueOpts is either
// written by a batch (batched, as enqueueMany writes them) or refused by
// batchable (Debounce), so an option added later cannot be dropped
// silently by EnqueueMany.
func TestBatchableKnowsEveryOption(t *testing.T) {
	batched := []string{"ID", "DedupID", "OnDuplicate", "Priority", "PartitionKey", "NotBefore", "Timeout",
		"AcceptDifferentInput", "Tags"}
	refused := []string{"Debounce"}
	typ := reflect.TypeFor[EnqueueOpts]()
	for i := range typ.NumField() {
		f := typ.Field(i).Name
		if !slices.Contains(batched, f) && !slices.Contains(refused, f) {
			t.Errorf("EnqueueOpts.%s is neither written by a batch nor refused by batchable", f)
		}
	}
	if err := (&EnqueueOpts{Debounce: &Debounce{}}).batchable(); err == nil {
		t.Error("batchable takes Debounce")
	}
}
