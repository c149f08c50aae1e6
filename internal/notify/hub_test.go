package notify

import (
	"sync"
	"testing"
)

func woken[O any](w *Waiter[O]) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// TestHubWakeHandsOverTheOutcome: a local finish wakes every waiter of the
// run, local or not, with its outcome; later subscribers wait anew.
func TestHubWakeHandsOverTheOutcome(t *testing.T) {
	h := NewHub[*string]()
	w1, w2, lw := h.Subscribe("r"), h.Subscribe("r"), h.SubscribeLocal("r")
	if w1 != w2 {
		t.Fatal("two subscribers of one key got different waiters")
	}
	other := h.Subscribe("other")
	out := "done"
	h.Wake("r", &out)
	for name, w := range map[string]*Waiter[*string]{"waiter": w1, "local waiter": lw} {
		if !woken(w) {
			t.Fatalf("the %s was not woken", name)
		}
		if o := w.Outcome(); o == nil || *o != "done" {
			t.Fatalf("the %s got outcome %v", name, o)
		}
	}
	if woken(other) {
		t.Fatal("a waiter of another key was woken")
	}
	if w := h.Subscribe("r"); woken(w) {
		t.Fatal("a subscriber after the wake-up found it woken")
	}
}

// TestHubNotifiedSkipsLocalWaiters: a notification wakes the waiters of
// its key but not the local ones (only their run does), and hands over no
// outcome.
func TestHubNotifiedSkipsLocalWaiters(t *testing.T) {
	h := NewHub[*string]()
	w, lw := h.Subscribe("r"), h.SubscribeLocal("r")
	h.Notified("r")
	if !woken(w) || w.Outcome() != nil {
		t.Fatalf("the waiter: woken %v, outcome %v; want woken without one", woken(w), w.Outcome())
	}
	if woken(lw) {
		t.Fatal("a notification woke the local waiter")
	}
	h.Wake("r", nil)
	if !woken(lw) {
		t.Fatal("the run's own wake-up did not wake the local waiter")
	}
}

// TestHubWakeAll: after a reconnection every non-local waiter looks again;
// local ones keep waiting for their run.
func TestHubWakeAll(t *testing.T) {
	h := NewHub[*string]()
	a, b, lw := h.Subscribe("a"), h.Subscribe("b"), h.SubscribeLocal("c")
	h.WakeAll()
	if !woken(a) || !woken(b) {
		t.Fatal("WakeAll left a waiter asleep")
	}
	if woken(lw) {
		t.Fatal("WakeAll woke a local waiter")
	}
	if w := h.Subscribe("a"); woken(w) {
		t.Fatal("a subscriber after WakeAll found it woken")
	}
}

// TestHubUnsubscribe: the last unsubscribe forgets the waiter, so a
// later subscriber gets a new one; an earlier one keeps it.
func TestHubUnsubscribe(t *testing.T) {
	h := NewHub[*string]()
	w1, w2 := h.Subscribe("r"), h.Subscribe("r")
	h.Unsubscribe("r", w1)
	if h.Subscribe("r") != w2 {
		t.Fatal("an unsubscribe dropped a waiter still subscribed")
	}
	h.Unsubscribe("r", w2)
	h.Unsubscribe("r", w2)
	if len(h.m) != 0 {
		t.Fatalf("%d waiters left after the last unsubscribe", len(h.m))
	}
	lw := h.SubscribeLocal("r")
	h.Unsubscribe("r", lw)
	if len(h.local) != 0 {
		t.Fatalf("%d local waiters left after the last unsubscribe", len(h.local))
	}
}

// TestHubConcurrent: subscribers and wake-ups of many keys at once (run
// with -race).
func TestHubConcurrent(t *testing.T) {
	h := NewHub[*int]()
	var wg sync.WaitGroup
	for i := range 50 {
		key := string(rune('a' + i%5))
		wg.Go(func() {
			w := h.Subscribe(key)
			defer h.Unsubscribe(key, w)
			h.Wake(key, &i)
			<-w.Done()
			_ = w.Outcome()
		})
		wg.Go(func() { h.Notified(key) })
		wg.Go(h.WakeAll)
	}
	wg.Wait()
}
