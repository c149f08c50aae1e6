// Package commit is the engine's group commit: writes of different runs
// (step checkpoints, starts, finishes) that arrive while a write of their
// kind is in flight are coalesced into one multi-row statement and one
// commit. There is no artificial delay: a lone write goes out at once as a
// single-row statement; under concurrency the next batch gathers while
// the current one is in flight. Latency stays one commit; throughput stops
// being one commit per write.
//
// It may not import the root durable package.
package commit

import "sync"

const (
	// MaxInflight is the number of concurrent flushes of one Batcher:
	// while one is in flight the next batch gathers.
	MaxInflight = 1
	// MaxBatch is the most items one flush writes.
	MaxBatch = 500
)

// Item is one write of a batch. The flush sets OK (the row was written)
// and Err of every item it is given.
type Item[T any] struct {
	V    T
	OK   bool
	Err  error
	done chan struct{}
}

// Batcher coalesces the writes of one kind. The caller that finds a free
// flush slot becomes the leader: it flushes its own item with everything
// waiting, and hands any later arrivals to a new flush before returning.
// The zero Batcher is not usable: make one with NewBatcher.
type Batcher[T any] struct {
	flush func(items []*Item[T])

	mu       sync.Mutex
	pending  []*Item[T]
	inflight int
}

// NewBatcher returns a Batcher whose batches are written by flush, which
// sets OK and Err of every item. flush is called from one caller's
// goroutine or from a goroutine of the Batcher's own, never for more than
// MaxInflight batches at once.
func NewBatcher[T any](flush func(items []*Item[T])) *Batcher[T] {
	return &Batcher[T]{flush: flush}
}

// Do writes v, with the writes of other callers that come meanwhile, and
// reports whether its row was written.
func (b *Batcher[T]) Do(v T) (bool, error) {
	it := &Item[T]{V: v, done: make(chan struct{})}
	b.mu.Lock()
	if b.inflight >= MaxInflight {
		b.pending = append(b.pending, it)
		b.mu.Unlock()
		<-it.done
		return it.OK, it.Err
	}
	b.inflight++
	batch := append(b.takeLocked(MaxBatch-1), it)
	b.mu.Unlock()
	b.run(batch)
	b.next()
	return it.OK, it.Err
}

// takeLocked takes up to n waiting items, with room for one more.
func (b *Batcher[T]) takeLocked(n int) []*Item[T] {
	if len(b.pending) == 0 {
		return nil
	}
	n = min(n, len(b.pending))
	batch := make([]*Item[T], n, n+1)
	copy(batch, b.pending)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil
	}
	return batch
}

func (b *Batcher[T]) run(batch []*Item[T]) {
	b.flush(batch)
	for _, it := range batch {
		close(it.done)
	}
}

// next flushes what gathered meanwhile, in a new goroutine, or frees the
// flush slot.
func (b *Batcher[T]) next() {
	b.mu.Lock()
	batch := b.takeLocked(MaxBatch)
	if batch == nil {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go func() {
		b.run(batch)
		b.next()
	}()
}

// WriteSingly handles a multi-row statement that failed with err: a
// transient error goes back to every item (each caller retries), any
// other is retried item by item (one), so one bad row cannot fail the
// writes of other runs.
func WriteSingly[T any](items []*Item[T], err error, transient func(error) bool, one func(*Item[T])) {
	if transient(err) {
		SetAll(items, err)
		return
	}
	for _, it := range items {
		one(it)
	}
}

// SetAll sets the error of every item.
func SetAll[T any](items []*Item[T], err error) {
	for _, it := range items {
		it.Err = err
	}
}

// SetWritten sets OK of every item from written, aligned with items (nil:
// none written).
func SetWritten[T any](items []*Item[T], written []bool) {
	for i, it := range items {
		it.OK = written != nil && written[i]
	}
}
