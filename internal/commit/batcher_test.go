package commit

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder is a flush that records its batches and can be held, so that
// writes gather behind it.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{} // a flush waits for it when not nil
	entered chan struct{} // a flush began
	err     func(v int) error
}

func newRecorder() *recorder { return &recorder{entered: make(chan struct{}, 100)} }

func (r *recorder) flush(items []*Item[int]) {
	vs := make([]int, len(items))
	for i, it := range items {
		vs[i] = it.V
	}
	r.mu.Lock()
	r.batches = append(r.batches, vs)
	hold := r.hold
	r.mu.Unlock()
	r.entered <- struct{}{}
	if hold != nil {
		<-hold
	}
	for _, it := range items {
		it.OK = it.V%2 == 0
		if r.err != nil {
			it.Err = r.err(it.V)
		}
	}
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, len(b))
	}
	return out
}

// waitPending waits until n writes wait in b.
func waitPending[T any](t *testing.T, b *Batcher[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.pending)
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes wait, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoneWriteGoesAlone: a write with nothing in flight is flushed at
// once, alone, by its caller, and gets its own result.
func TestLoneWriteGoesAlone(t *testing.T) {
	r := newRecorder()
	b := NewBatcher(r.flush)
	for v := range 3 {
		ok, err := b.Do(v)
		if err != nil || ok != (v%2 == 0) {
			t.Fatalf("Do(%d) = %v, %v", v, ok, err)
		}
	}
	if got := fmt.Sprint(r.sizes()); got != "[1 1 1]" {
		t.Fatalf("batches %s, want three of one", got)
	}
}

// TestConcurrentWritesCoalesce: the writes that come while a flush is in
// flight go together in the next one, each caller with its own result.
func TestConcurrentWritesCoalesce(t *testing.T) {
	r := newRecorder()
	hold := make(chan struct{})
	r.hold = hold // closed, it lets every flush through
	b := NewBatcher(r.flush)
	const n = 20
	results := make(chan string, n+1)
	do := func(v int) {
		ok, err := b.Do(v)
		results <- fmt.Sprintf("%d:%v:%v", v, ok, err)
	}
	go do(0)
	<-r.entered // the first write is in flight
	for v := 1; v <= n; v++ {
		go do(v)
	}
	waitPending(t, b, n)
	close(hold)
	got := map[string]bool{}
	for range n + 1 {
		got[<-results] = true
	}
	for v := 0; v <= n; v++ {
		if want := fmt.Sprintf("%d:%v:<nil>", v, v%2 == 0); !got[want] {
			t.Errorf("no result %s in %v", want, got)
		}
	}
	if sizes := fmt.Sprint(r.sizes()); sizes != fmt.Sprint([]int{1, n}) {
		t.Fatalf("batches %s, want the lone first write then all %d others in one", sizes, n)
	}
}

// TestErrorReachesEveryCaller: the error of a flush goes to every caller
// of its batch.
func TestErrorReachesEveryCaller(t *testing.T) {
	r := newRecorder()
	hold := make(chan struct{})
	r.hold = hold
	boom := errors.New("boom")
	r.err = func(int) error { return boom }
	b := NewBatcher(r.flush)
	const n = 5
	errs := make(chan error, n+1)
	go func() { _, err := b.Do(0); errs <- err }()
	<-r.entered
	for v := 1; v <= n; v++ {
		go func() { _, err := b.Do(v); errs <- err }()
	}
	waitPending(t, b, n)
	close(hold)
	for range n + 1 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Fatalf("a caller got %v, want the flush's error", err)
		}
	}
	if sizes := fmt.Sprint(r.sizes()); sizes != "[1 5]" {
		t.Fatalf("batches %s", sizes)
	}
}

// TestBatchesAreBounded: no flush writes more than MaxBatch items; what
// waits beyond goes in the next.
func TestBatchesAreBounded(t *testing.T) {
	r := newRecorder()
	hold := make(chan struct{})
	r.hold = hold
	b := NewBatcher(r.flush)
	n := MaxBatch + 10
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Do(-1) })
	<-r.entered
	for v := range n {
		wg.Go(func() { _, _ = b.Do(v) })
	}
	waitPending(t, b, n)
	close(hold)
	wg.Wait()
	if sizes := fmt.Sprint(r.sizes()); sizes != fmt.Sprint([]int{1, MaxBatch, 10}) {
		t.Fatalf("batches %s", sizes)
	}
}

func TestWriteSingly(t *testing.T) {
	items := []*Item[int]{{V: 1}, {V: 2}}
	transient := errors.New("transient")
	isTransient := func(err error) bool { return errors.Is(err, transient) }
	var alone []int
	WriteSingly(items, transient, isTransient, func(it *Item[int]) { alone = append(alone, it.V) })
	if alone != nil || items[0].Err != transient || items[1].Err != transient {
		t.Fatalf("a transient error: written alone %v, errors %v %v; want none alone, the error to all", alone, items[0].Err, items[1].Err)
	}
	items = []*Item[int]{{V: 1}, {V: 2}}
	WriteSingly(items, errors.New("bad row"), isTransient, func(it *Item[int]) {
		alone = append(alone, it.V)
		it.OK = true
	})
	if fmt.Sprint(alone) != "[1 2]" || items[0].Err != nil || !items[1].OK {
		t.Fatalf("another error: written alone %v, items %+v %+v; want each alone", alone, *items[0], *items[1])
	}
}
