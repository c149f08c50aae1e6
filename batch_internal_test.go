package durable

import (
	"reflect"
	"slices"
	"testing"
)

// TestBatchableKnowsEveryOption: every field of EnqueueOpts is either
// written by a batch (batchedOpts) or refused by batchable (Debounce), so
// an option added later cannot be dropped silently by EnqueueMany.
func TestBatchableKnowsEveryOption(t *testing.T) {
	refused := []string{"Debounce"}
	typ := reflect.TypeFor[EnqueueOpts]()
	for i := range typ.NumField() {
		f := typ.Field(i).Name
		if !slices.Contains(batchedOpts, f) && !slices.Contains(refused, f) {
			t.Errorf("EnqueueOpts.%s is neither written by a batch (batchedOpts) nor refused by batchable", f)
		}
	}
	if err := (&EnqueueOpts{Debounce: &Debounce{}}).batchable(); err == nil {
		t.Error("batchable takes Debounce")
	}
}
