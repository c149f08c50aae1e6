package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// SelectCase is one of the waits a [Select] chooses among: [OnMessage],
// [OnResult], [OnEvent] or [After]. After the Select, the chosen case
// holds what came.
type SelectCase interface {
	selectCase() *selCase
}

type caseKind uint8

const (
	caseMessage caseKind = iota
	caseResult
	caseEvent
	caseTimer
)

// selCase is the state every case holds: what it waits for and, once a
// Select chose it, what came.
type selCase struct {
	kind   caseKind
	topic  string        // caseMessage
	id     string        // caseResult: the run; caseEvent: the run that sets it
	key    string        // caseEvent
	after  time.Duration // caseTimer
	chosen bool
	runID  string // the selecting run, for decode errors
	value  json.RawMessage
	unset  bool // caseEvent: its run finished without setting it
}

// chosenValue returns what came for c, or a typed error if the last Select did
// not choose c.
func (c *selCase) chosenValue() (json.RawMessage, error) {
	if !c.chosen {
		return nil, fmt.Errorf("%w: this case was not chosen by the last Select", ErrInvalidArgument)
	}
	if c.unset {
		return nil, fmt.Errorf("%w: event %q of %q", ErrEventNotSet, c.key, c.id)
	}
	return c.value, nil
}

// MessageCase is the case of a message on a topic; see [OnMessage].
type MessageCase[T any] struct{ c selCase }

// OnMessage is the case of the next message on topic sent to the calling
// workflow. Choosing it consumes the message, as [Recv] does.
func OnMessage[T any](topic string) *MessageCase[T] {
	return &MessageCase[T]{c: selCase{kind: caseMessage, topic: topic}}
}

func (m *MessageCase[T]) selectCase() *selCase { return &m.c }

// Value is the message, once the last Select chose this case.
func (m *MessageCase[T]) Value() (T, error) {
	return decodeCase[T](&m.c, fmt.Sprintf("message on topic %q", m.c.topic))
}

// ResultCase is the case of a run's result; see [OnResult].
type ResultCase[R any] struct{ c selCase }

// OnResult is the case of the finish of the run h follows (typically a
// child started with StartChild), as [Handle.Await] waits for it.
func OnResult[R any](h *Handle[R]) *ResultCase[R] {
	return &ResultCase[R]{c: selCase{kind: caseResult, id: h.id}}
}

func (c *ResultCase[R]) selectCase() *selCase { return &c.c }

// Result is the run's result, as [Handle.Await] returns it, once the last
// Select chose this case.
func (c *ResultCase[R]) Result() (R, error) {
	var zero R
	raw, err := c.c.chosenValue()
	if err != nil {
		return zero, err
	}
	var a awaited
	if err := json.Unmarshal(raw, &a); err != nil {
		return zero, &DecodeError{WorkflowID: c.c.runID, What: "recorded result of " + c.c.id, Err: err}
	}
	return decodeOutcome[R](c.c.id, &outcome{status: a.Status, output: a.Output, err: a.Error})
}

// EventCase is the case of an event of a run; see [OnEvent].
type EventCase[T any] struct{ c selCase }

// OnEvent is the case of event key of run id being set (see [SetEvent]);
// if it is set already, the case is ready at once. It is ready too once
// run id finished without setting it: its Value is then an error
// matching [ErrEventNotSet].
func OnEvent[T any](id, key string) *EventCase[T] {
	return &EventCase[T]{c: selCase{kind: caseEvent, id: id, key: key}}
}

func (c *EventCase[T]) selectCase() *selCase { return &c.c }

// Value is the event's value, once the last Select chose this case; an
// error matching [ErrEventNotSet] if the run finished without setting it.
func (c *EventCase[T]) Value() (T, error) {
	return decodeCase[T](&c.c, fmt.Sprintf("event %q of %q", c.c.key, c.c.id))
}

// TimerCase is the case of a timer; see [After].
type TimerCase struct{ c selCase }

// After is the case of d passing, from the Select's first execution: its
// end is recorded, so it holds across restarts, like a Sleep's.
func After(d time.Duration) *TimerCase { return &TimerCase{c: selCase{kind: caseTimer, after: d}} }

func (c *TimerCase) selectCase() *selCase { return &c.c }

func decodeCase[T any](c *selCase, what string) (T, error) {
	var v T
	raw, err := c.chosenValue()
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, &DecodeError{WorkflowID: c.runID, What: what, Err: err}
	}
	return v, nil
}

// selected is the recorded outcome of a Select: the chosen case and what
// came (a message, an awaited result, an event's value; nothing for a
// timer).
type selected struct {
	Case  int             `json:"case"`
	Value json.RawMessage `json:"value,omitempty"`
	Unset bool            `json:"unset,omitempty"` // an event case whose run finished without setting it
}

// Select waits for the first of several waits (messages on topics, runs'
// results, events, timers) and returns the index of the case it chose;
// that case then holds what came. When several are ready at once, one of
// them is chosen, preferring the ones listed first. The choice and what
// came are recorded as a step, so a replay returns the same choice without
// waiting, and only the chosen case consumes anything (a message on
// another case's topic stays for later). Without an [After] case it waits
// until one comes. A wait longer than Config.ParkThreshold parks the run:
// it holds no goroutine, and a message, a finish or an event it waits for
// wakes it on any executor.
//
// Cases may be used again in later Selects (in a loop); each Select
// forgets what the last one chose. Two message cases on one topic, two
// result cases on one run or two event cases on one event are an
// [ErrInvalidArgument].
func Select(wctx Context, cases ...SelectCase) (int, error) {
	cs, err := selectCases(cases)
	if err != nil {
		return -1, err
	}
	r := wctx.workflowRun()
	var deadlines []time.Time // of the timers, in case order
	if slices.ContainsFunc(cs, func(c *selCase) bool { return c.kind == caseTimer }) {
		deadlines, err = step(wctx, "durable.select-deadlines", func(context.Context) ([]time.Time, error) {
			now := r.e.clock.now()
			var ds []time.Time
			for _, c := range cs {
				if c.kind == caseTimer {
					ds = append(ds, now.Add(c.after))
				}
			}
			return ds, nil
		}, &StepOpts{Retry: noRetry})
		if err != nil {
			return -1, err
		}
	}
	const name = "durable.select"
	pos, rec, err := r.begin(name)
	if err != nil {
		return -1, err
	}
	if rec == nil {
		if rec, err = selectWait(r, pos, name, cs, deadlines); err != nil {
			return -1, err
		}
	}
	got, err := replay[selected](r, rec)
	if err != nil {
		return -1, err
	}
	if got.Case < 0 || got.Case >= len(cs) {
		return -1, r.halt(&NonDeterminismError{WorkflowID: r.id, Pos: pos,
			Recorded: fmt.Sprintf("%s chose case %d", name, got.Case), Called: fmt.Sprintf("%s of %d cases", name, len(cs))})
	}
	c := cs[got.Case]
	c.chosen, c.value, c.unset, c.runID = true, got.Value, got.Unset && c.kind == caseEvent, r.id
	return got.Case, nil
}

// selectCases checks the cases and forgets what an earlier Select chose.
func selectCases(cases []SelectCase) ([]*selCase, error) {
	if len(cases) == 0 {
		return nil, fmt.Errorf("%w: Select of no cases", ErrInvalidArgument)
	}
	cs := make([]*selCase, len(cases))
	seen := map[[3]string]bool{}
	for i, sc := range cases {
		if sc == nil {
			return nil, fmt.Errorf("%w: Select case %d is nil", ErrInvalidArgument, i)
		}
		c := sc.selectCase()
		var k [3]string
		switch c.kind {
		case caseMessage:
			if err := checkName("topic", c.topic); err != nil {
				return nil, err
			}
			k = [3]string{"msg", c.topic}
		case caseResult:
			if err := checkName("workflow ID", c.id); err != nil {
				return nil, err
			}
			k = [3]string{"run", c.id}
		case caseEvent:
			if err := checkName("workflow ID", c.id); err != nil {
				return nil, err
			}
			if err := checkName("event key", c.key); err != nil {
				return nil, err
			}
			k = [3]string{"event", c.id, c.key}
		case caseTimer:
			if c.after < 0 {
				return nil, fmt.Errorf("%w: Select case %d: After of a negative duration %v", ErrInvalidArgument, i, c.after)
			}
			k = [3]string{"timer", fmt.Sprint(i)}
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: Select case %d repeats an earlier case (%s %s)", ErrInvalidArgument, i, k[0], k[1]+k[2])
		}
		seen[k] = true
		cs[i] = c
	}
	for _, c := range cs {
		c.chosen, c.value, c.unset = false, nil, false
	}
	return cs, nil
}

// selectWait waits for a case of cs to be ready and records the choice at
// pos: the live path of Select. A wait longer than the park threshold
// parks the run (and returns the halt).
func selectWait(r *run, pos int, name string, cs []*selCase, deadlines []time.Time) (rec *stepRecord, err error) {
	ws := r.trace().selectWait(len(cs))
	defer func() { ws.end(err) }()
	s := &selectState{r: r, pos: pos, name: name, cs: cs, deadlines: deadlines, started: r.e.clock.now(), ids: map[int]string{}}
	for i, c := range cs {
		switch c.kind {
		case caseMessage:
			s.topics, s.topicCases = append(s.topics, c.topic), append(s.topicCases, i)
		case caseResult:
			s.ids[i] = c.id
		}
	}
	var deadline time.Time // the first timer's end
	for _, d := range deadlines {
		if deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	waitUntil := deadline
	if deadline.IsZero() {
		// No timer: wait in memory up to the park threshold, as Await does.
		waitUntil = s.started.Add(r.e.cfg.ParkThreshold)
	}
	// parksNow: the Select parks rather than wait (on) in memory.
	parksNow := func() bool {
		return !deadline.IsZero() && r.e.parks(r.e.clock.until(deadline)) || deadline.IsZero() && r.e.clock.until(waitUntil) <= 0
	}
	// A Select writes its waits on its row before it waits: one on runs
	// (their events or results) always, so a SetEvent or a watched run's
	// finish nudges it (see mark), even in the park that follows; one on
	// messages before it waits in memory, so listings show its topics (a
	// Send nudges any run that executes, and a park writes the waits).
	onRuns := slices.ContainsFunc(cs, func(c *selCase) bool { return c.kind == caseEvent || c.kind == caseResult })
	marked := false // the waits are written on the run's row (mark)
	for {
		keys := s.hubKeys()
		subs := make([]<-chan struct{}, len(keys))
		unsubs := make([]func(), len(keys))
		for i, k := range keys {
			w := r.e.hub.Subscribe(k)
			subs[i], unsubs[i] = w.Done(), func() { r.e.hub.Unsubscribe(k, w) }
		}
		unsubscribe := func() {
			for _, u := range unsubs {
				u()
			}
		}
		out, err := s.try()
		if err != nil || out != nil {
			unsubscribe()
			if err != nil {
				return nil, err
			}
			if marked {
				s.unmark()
			}
			return &stepRecord{pos: pos, name: name, status: stepDone, output: out}, nil
		}
		if !marked && (onRuns || len(s.topics) > 0 && !parksNow()) {
			// Nothing came yet: write the waits on the row, then look again.
			unsubscribe()
			if err := s.mark(); err != nil {
				return nil, err
			}
			marked = true
			continue
		}
		if parksNow() {
			unsubscribe()
			wake := deadline
			if wake.IsZero() {
				wake = time.Now().Add(100 * 365 * 24 * time.Hour)
			}
			var topic string // listings show the first message topic (ListParams.WaitTopicPrefix)
			if len(s.topics) > 0 {
				topic = s.topics[0]
			}
			return nil, r.park(wake, waitOn{topic: topic, any: s.waitKeys(), ready: s.ready})
		}
		woken, stop := anyOf(subs)
		err = r.waitFor(woken, waitUntil)
		stop()
		unsubscribe()
		if err != nil {
			return nil, err
		}
	}
}

// selectState is one live Select's wait.
type selectState struct {
	r          *run
	pos        int
	name       string
	cs         []*selCase
	deadlines  []time.Time
	started    time.Time
	topics     []string       // the message cases' topics ...
	topicCases []int          // ... and their cases
	ids        map[int]string // the run each result case waits for now (the last of its chain)
}

// mark writes the Select's waits on its run's row while it executes, as a
// park would: a SetEvent or the finish of a watched run then nudges the
// run (see sysdb's MarkWaits), so a park of it that lands after its
// process died is due at once. It then holds each event's run's row a
// moment (LockRun): a SetEvent that wrote before the lock has committed
// before the next look, which sees its event; one that writes after it
// finds the mark in its wake-up and wakes or nudges the run. So no later
// look, after a park included, needs the lock again.
func (s *selectState) mark() error {
	r := s.r
	err := r.retryDB("mark the Select's waits", func(ctx context.Context) error {
		if _, err := r.e.wq.MarkWaits(ctx, r.e.pool, r.id, r.epoch, s.waitKeys()); err != nil {
			return err
		}
		for _, c := range s.cs {
			if c.kind == caseEvent {
				if err := r.e.wq.LockRun(ctx, r.e.pool, c.id); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return r.halt(err)
	}
	return nil
}

// unmark removes what mark wrote, once the Select chose; a failure only
// costs the run a spurious wake-up of a later park (see Park).
func (s *selectState) unmark() {
	r := s.r
	if err := r.e.wq.ClearWaits(r.e.hardCtx, r.e.pool, r.id, r.epoch); err != nil {
		r.log().Warn("durable: clear the Select's waits", "err", err)
	}
}

// hubKeys are the in-process notifications that may make a case ready.
func (s *selectState) hubKeys() []string {
	var keys []string
	if len(s.topics) > 0 {
		keys = append(keys, "m:"+s.r.id)
	}
	for i, c := range s.cs {
		switch c.kind {
		case caseResult:
			keys = append(keys, s.ids[i])
		case caseEvent:
			keys = append(keys, "e:"+c.id, c.id) // its event, or its run's finish
		}
	}
	return keys
}

// waitKeys are the parked run's waits, any of which wakes it.
func (s *selectState) waitKeys() []string {
	var runs []string
	var events [][2]string
	for i, c := range s.cs {
		switch c.kind {
		case caseResult:
			runs = append(runs, s.ids[i])
		case caseEvent:
			events = append(events, [2]string{c.id, c.key})
		}
	}
	return sysdb.WaitKeys(s.topics, runs, events)
}

// try records the first ready case, in case order (the message cases
// together, at the first of them), and returns the recorded output; nil
// when none is ready.
func (s *selectState) try() ([]byte, error) {
	r := s.r
	timer := 0
	triedMessages := false
	for i, c := range s.cs {
		var value json.RawMessage
		unset := false
		switch c.kind {
		case caseTimer:
			due := !r.e.clock.now().Before(s.deadlines[timer])
			timer++
			if !due {
				continue
			}
		case caseMessage:
			if triedMessages {
				continue
			}
			triedMessages = true
			out, got, err := r.receive(s.pos, s.name, func(ctx context.Context) ([]byte, error) {
				return r.e.wq.ReceiveAny(ctx, r.e.pool, sysdb.ReceiveAnyParams{WorkflowID: r.id, Epoch: r.epoch, Topics: s.topics,
					Cases: s.topicCases, Pos: s.pos, Name: s.name, StartedAt: s.started})
			})
			if err != nil || got {
				return out, err
			}
			continue
		case caseResult:
			a, err := s.result(i)
			if err != nil {
				return nil, err
			}
			if a == nil {
				continue
			}
			value, _ = json.Marshal(a)
		case caseEvent:
			var ev sysdb.GetEventRow
			err := r.retryDB("read event", func(ctx context.Context) error {
				var err error
				ev, err = r.e.wq.GetEvent(ctx, r.e.pool, sysdb.GetEventParams{WorkflowID: c.id, Key: c.key})
				return err
			})
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, fmt.Errorf("%w: %q (Select on its event %q)", ErrWorkflowNotFound, c.id, c.key)
			}
			if err != nil {
				return nil, r.halt(err)
			}
			unset = !ev.Found && Status(ev.Status).Finished()
			if !ev.Found && !unset {
				if !ev.Watched {
					_, _ = r.e.q.WatchWorkflow(r.e.hardCtx, r.e.pool, c.id) // its finish notifies us, and wakes us parked
				}
				continue
			}
			value = ev.Value
		}
		out, _ := json.Marshal(selected{Case: i, Value: value, Unset: unset})
		if err := r.checkpoint(s.pos, s.name, stepDone, out, nil, 1, s.started); err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, nil
}

// result reads the run result case i waits for: its outcome once it
// finished (following a chain of continue-as-new), else nil.
func (s *selectState) result(i int) (*awaited, error) {
	r := s.r
	for {
		id := s.ids[i]
		var info *runInfo
		err := r.retryDB("read run", func(ctx context.Context) error {
			var err error
			info, err = readRun(ctx, r.e.q, r.e.pool, id)
			return err
		})
		if errors.Is(err, ErrWorkflowNotFound) {
			return nil, err
		}
		if err != nil {
			return nil, r.halt(err)
		}
		if !info.status.Finished() {
			if !info.notify {
				_, _ = r.e.q.WatchWorkflow(r.e.hardCtx, r.e.pool, id) // a remote finish notifies us
			}
			return nil, nil
		}
		if next := info.outcome().next; next != "" {
			s.ids[i] = next // it continued as new: the chain's last run answers
			continue
		}
		return &awaited{Status: info.status, Output: info.output, Error: info.err}, nil
	}
}

// ready reports whether a case other than a timer came, for a run that
// just parked (a wake-up that came before the park committed was missed).
func (s *selectState) ready(ctx context.Context) (bool, error) {
	r := s.r
	if len(s.topics) > 0 {
		if has, err := r.e.wq.HasMessage(ctx, r.e.pool, sysdb.HasMessageParams{WorkflowID: r.id, Topics: s.topics}); err != nil || has {
			return has, err
		}
	}
	for i, c := range s.cs {
		switch c.kind {
		case caseResult:
			if done, err := runFinished(ctx, r.e, s.ids[i]); err != nil || done {
				return done, err
			}
		case caseEvent:
			// No lock needed here: a SetEvent that missed this look saw
			// the Select's mark (see mark) and woke or nudged the run.
			ev, err := r.e.wq.GetEvent(ctx, r.e.pool, sysdb.GetEventParams{WorkflowID: c.id, Key: c.key})
			if err != nil || ev.Found || Status(ev.Status).Finished() {
				return err == nil, err
			}
		}
	}
	return false, nil
}

// anyOf returns a channel closed when any of chs is; stop ends the watch.
func anyOf(chs []<-chan struct{}) (_ <-chan struct{}, stop func()) {
	if len(chs) == 1 {
		return chs[0], func() {}
	}
	out, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				once.Do(func() { close(out) })
			case <-done:
			}
		}()
	}
	return out, func() { close(done) }
}
