package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durable-go/durable/internal/pgtest"
)

// The fuzz targets of the root package: every decoder of stored data and
// every parser of user input that is not plain encoding/json. `go test`
// runs their seeds; `go test -run='^$' -fuzz=FuzzX` explores.

// FuzzDecodeError: any stored error envelope, even a corrupt one, reads
// back as a non-nil error with a message, and recording that error again
// stores the same envelope (a failure re-recorded by a resumed parent or a
// second reader does not drift).
func FuzzDecodeError(f *testing.F) {
	for _, err := range []error{
		errors.New("plain"), Permanent(errors.New("card declined")), context.Canceled, context.DeadlineExceeded,
		&PanicError{Value: "boom", Stack: "goroutine 1"}, &NonDeterminismError{WorkflowID: "w", Recorded: "a", Called: "b"},
		&DecodeError{WorkflowID: "w", What: "input", Err: errors.New("bad")}, &PayloadTooLargeError{What: "x", Size: 2, Limit: 1},
		&DeadLetterError{WorkflowID: "w", Attempts: 3, Limit: 2}, ErrNotRegistered, ErrCancelled,
	} {
		f.Add(encodeError(err))
	}
	for _, s := range []string{`{}`, `null`, `"text"`, `[1,2]`, `{"kind":"permanent"}`, `{"message":""}`, `{"kind":7,"message":"m"}`,
		`{"kind":"nope","message":"m","stack":"s","extra":1}`, `{"message":"\u0000'; DROP TABLE steps;--"}`, "\xff\xfe", ``} {
		f.Add([]byte(s))
	}
	sentinels := []error{ErrPermanent, ErrCancelled, context.Canceled, context.DeadlineExceeded, ErrPanic, ErrNonDeterministic,
		ErrDecode, ErrPayloadTooLarge, ErrDeadLetter, ErrNotRegistered, ErrWorkflowNotFound, ErrInvalidArgument}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := decodeError(b)
		if err == nil || err.Error() == "" {
			t.Fatalf("decodeError(%q) = %v: want an error with a message", b, err)
		}
		var re *RecordedError
		if !errors.As(err, &re) {
			t.Fatalf("decodeError(%q) is %T, want *RecordedError", b, err)
		}
		again := decodeError(encodeError(err))
		var re2 *RecordedError
		if !errors.As(again, &re2) || *re2 != *re {
			t.Fatalf("re-recording %+v gives %+v", re, again)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) != errors.Is(again, s) {
				t.Fatalf("errors.Is(%v) differs after re-recording %+v", s, re)
			}
		}
	})
}

// FuzzListCursor: any cursor string is refused or decodes to a valid ID,
// and every cursor ListWorkflows hands out decodes to what it encoded.
func FuzzListCursor(f *testing.F) {
	f.Add(encodeListCursor(time.UnixMicro(1700000000123456), "run-1"), int64(1700000000123456), "run-1")
	f.Add("MS4xMjMu", int64(-1), "a.b.c")
	f.Add("", int64(0), "")
	f.Add("!!!", int64(math.MinInt64), "ünï'\"\\")
	f.Add(encodeListCursor(time.UnixMicro(0), "x\x00y"), int64(math.MaxInt64), "\xff")
	f.Fuzz(func(t *testing.T, c string, us int64, id string) {
		if at, got, ok := decodeListCursor(c); ok {
			if checkName("id", got) != nil {
				t.Fatalf("cursor %q decodes to an invalid ID %q", c, got)
			}
			if at2, got2, ok2 := decodeListCursor(encodeListCursor(at, got)); !ok2 || !at2.Equal(at) || got2 != got {
				t.Fatalf("cursor %q: re-encoding (%v, %q) gives (%v, %q, %v)", c, at, got, at2, got2, ok2)
			}
		}
		if _, err := (ListParams{Cursor: c}).filter(); err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("bad cursor %q: %v does not match ErrInvalidArgument", c, err)
		}
		if checkName("id", id) != nil {
			return
		}
		at, got, ok := decodeListCursor(encodeListCursor(time.UnixMicro(us), id))
		if !ok || at.UnixMicro() != us || got != id {
			t.Fatalf("cursor of (%d, %q) decodes to (%d, %q, %v)", us, id, at.UnixMicro(), got, ok)
		}
	})
}

// FuzzCheckName: the one validator of IDs, names, keys and topics accepts
// exactly the non-empty valid UTF-8 strings of at most 255 bytes without
// NUL, and Postgres stores every string it accepts unchanged (so an
// accepted name can never fail, or be altered, in the database).
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"run-1", "", "nul\x00", "bad\xff", strings.Repeat("x", 255), strings.Repeat("é", 128),
		`'; DROP TABLE workflows; --`, `$1`, `%`, `_`, `\`, `"`, "😀", "\u2028\ufeff", "\U0010FFFF", "\xed\xa0\x80"} {
		f.Add(s)
	}
	pool := pgtest.Pool(f)
	f.Fuzz(func(t *testing.T, s string) {
		err := checkName("name", s)
		want := s != "" && len(s) <= maxNameLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
		if (err == nil) != want {
			t.Fatalf("checkName(%q) = %v, want accepted=%v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("checkName(%q) = %v: not ErrInvalidArgument", s, err)
			}
			return
		}
		var got string
		if err := pool.QueryRow(context.Background(), "SELECT $1::text", s).Scan(&got); err != nil || got != s {
			t.Fatalf("Postgres stores accepted name %q as %q (%v)", s, got, err)
		}
	})
}

// FuzzSchemaName: Config.Schema is accepted or refused with
// ErrInvalidArgument, MigrationSQL agrees with New, and for every accepted
// schema the engine's notification channel works: Postgres accepts it in
// pg_notify and LISTEN hears it under the same name.
func FuzzSchemaName(f *testing.F) {
	for _, s := range []string{"durable", "", "A", "_x$1", "bad schema", "1abc", "x;drop", `"q"`, strings.Repeat("s", 55),
		strings.Repeat("s", 56), strings.Repeat("s", 63), strings.Repeat("s", 64), "ünï"} {
		f.Add(s)
	}
	pool := pgtest.Pool(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, s string) {
		e, err := New(pool, &Config{Schema: s})
		_, serr := MigrationSQL(s)
		if (err == nil) != (serr == nil) {
			t.Fatalf("schema %q: New says %v but MigrationSQL says %v", s, err, serr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) || !errors.Is(serr, ErrInvalidArgument) {
				t.Fatalf("schema %q: %v / %v: not ErrInvalidArgument", s, err, serr)
			}
			return
		}
		pgtest.SkipIfPooled(t, "LISTEN delivers nothing through it")
		// A connection of its own: a listening one must not go back to
		// the pool the tests share.
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, e.q.ListenSQL()); err != nil {
			t.Fatalf("schema %q: %s: %v", s, e.q.ListenSQL(), err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, 'probe')", e.q.Channel); err != nil {
			t.Fatalf("schema %q: pg_notify on channel %q: %v", s, e.q.Channel, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for { // skip late notifications of an earlier input's channel
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("schema %q: LISTEN %q heard nothing: %v", s, e.q.Channel, err)
			}
			if n.Channel == e.q.Channel && n.Payload == "probe" {
				break
			}
		}
	})
}

// FuzzRetryPolicy: a policy is refused with ErrInvalidArgument or gives
// waits between 0 and twice MaxDelay (jitter included) for every attempt.
func FuzzRetryPolicy(f *testing.F) {
	f.Add(3, int64(time.Millisecond), int64(time.Second), 2.0, 0.2, 5)
	f.Add(0, int64(0), int64(0), 0.0, 0.0, 1)
	f.Add(1, int64(math.MaxInt64), int64(math.MaxInt64), 1e308, 1.0, math.MaxInt)
	f.Add(-1, int64(-1), int64(-1), 0.5, 2.0, -3)
	f.Add(2, int64(1), int64(math.MaxInt64), math.NaN(), math.NaN(), 2)
	f.Add(2, int64(1), int64(math.MaxInt64), math.Inf(1), math.Inf(-1), 64)
	f.Fuzz(func(t *testing.T, attempts int, base, maxDelay int64, factor, jit float64, n int) {
		p := RetryPolicy{MaxAttempts: attempts, BaseDelay: time.Duration(base), MaxDelay: time.Duration(maxDelay), Factor: factor, Jitter: jit}
		if err := p.validate("p"); err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%+v: %v is not ErrInvalidArgument", p, err)
			}
			return
		}
		if n < 1 {
			n = 1
		}
		p = p.withDefaults()
		d := p.Delay(n)
		if d < 0 || d > p.MaxDelay {
			t.Fatalf("%+v: Delay(%d) = %v, outside [0, %v]", p, n, d, p.MaxDelay)
		}
		if w := p.wait(n); w < 0 || (p.MaxDelay <= math.MaxInt64/2 && w > 2*p.MaxDelay) {
			t.Fatalf("%+v: wait(%d) = %v, outside [0, 2×%v]", p, n, w, p.MaxDelay)
		}
	})
}

// FuzzQueueOpts: queue limits are refused with ErrInvalidArgument or
// accepted; the accepted ones are what the queues table can hold.
func FuzzQueueOpts(f *testing.F) {
	f.Add(5, 2, 1, 10, int64(time.Second), true)
	f.Add(0, 0, 0, 0, int64(0), false)
	f.Add(-1, math.MaxInt, math.MinInt, 1, int64(time.Microsecond), false)
	f.Add(math.MaxInt32+1, 0, 0, 1, int64(math.MaxInt64), false)
	f.Fuzz(func(t *testing.T, global, worker, partition, rate int, period int64, release bool) {
		o := QueueOpts{GlobalConcurrency: global, WorkerConcurrency: worker, PartitionConcurrency: partition,
			RateLimit: rate, RatePeriod: time.Duration(period), ReleaseSlotWhileParked: release}
		err := o.validate("q")
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%+v: %v is not ErrInvalidArgument", o, err)
			}
			return
		}
		for _, v := range []int{global, worker, partition, rate} {
			if v < 0 || v > math.MaxInt32 {
				t.Fatalf("%+v accepted, but %d does not fit the queues table's integer columns", o, v)
			}
		}
	})
}

// FuzzNotifyPayload: a notification on the engine's channel (anyone with
// access to the database can send one) is ignored or acted on, never a
// panic.
func FuzzNotifyPayload(f *testing.F) {
	for _, s := range []string{"d:run-1", "n:x", "m:run", "e:run", "s:run", "c:3:run-1", "c::", "c:-1:x", "c:99999999999999999999:x",
		"q:work", "q:", "x", "", ":", "d:", "c:1", "\x00:\xff"} {
		f.Add(s)
	}
	e, err := New(pgtest.Pool(f), nil)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := TryRegisterQueue(e, "work", nil); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		e.listener.onNotify(payload)
	})
}

type storedIn struct {
	N int
	S string
}

type storedOut struct {
	A []int
	N int
	S string
	M string // the S of the message received
}

// FuzzStoredRun: whatever JSON the database holds for a run (input,
// output, recorded error, a step's output or error, an event, a stream
// entry, a message), reading the run and
// replaying it ends with a value or a typed error: never a panic, never a
// run that hangs. Rows are written the way a corrupt or foreign writer
// would, then read by Handle.Result, Status, ListWorkflows and ListSteps,
// and replayed by the engine, which claims the run as an orphan.
func FuzzStoredRun(f *testing.F) {
	good := []string{`{"N":1,"S":"x"}`, `[1]`, `{"kind":"permanent","message":"m"}`, `{"A":[1],"N":1,"S":"x"}`, `{"kind":"error","message":"boom"}`}
	f.Add(good[0], good[1], good[2], good[3], good[4], false, uint8(0))
	f.Add(good[0], good[1], good[2], good[3], good[4], true, uint8(1))
	for i, bad := range []string{`"str"`, `null`, `{"N":"x"}`, `[1,2]`, `1e400`, `{"N":1e20}`, `"\u0000"`, `{"A":{"x":1}}`, `{}`, `true`,
		`{"kind":"panic","message":"p","stack":"s"}`, `{"message":"\ud800"}`, `not json`} {
		f.Add(bad, good[1], good[2], good[3], good[4], false, uint8(i))
		f.Add(good[0], bad, bad, bad, bad, i%2 == 0, uint8(i))
	}
	pool := pgtest.Pool(f)
	schema := pgtest.Schema(f)
	e, err := New(pool, &Config{Schema: schema, AppVersion: "fuzz", LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
		StepRetry: RetryPolicy{BaseDelay: time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	wf := Register(e, "stored", func(wctx Context, in storedIn) (storedOut, error) {
		a, err := Step(wctx, "a", func(ctx context.Context) ([]int, error) { return []int{in.N}, nil }, nil)
		if err != nil {
			return storedOut{}, err
		}
		msg, _, err := Recv[storedIn](wctx, "t", 0)
		if err != nil {
			return storedOut{}, err
		}
		return storedOut{A: a, N: in.N, S: in.S, M: msg.S}, nil
	}, nil)
	ctx := context.Background()
	if err := e.Launch(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Shutdown(ctx) })
	tbl := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	var seq atomic.Int64
	statuses := []Status{StatusSuccess, StatusError, StatusCancelled, StatusDead}
	f.Fuzz(func(t *testing.T, input, stepOut, stepErr, output, errJSON string, stepFailed bool, status uint8) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// Finished runs, read back.
		st := statuses[int(status)%len(statuses)]
		id := fmt.Sprintf("done-%d", seq.Add(1))
		var out, errv any
		if st == StatusSuccess {
			out = output
		} else {
			errv = errJSON
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("workflows")+` (id, name, status, app_version, input, output, error)
VALUES ($1, 'stored', $2, 'fuzz', $3::json, $4::json, $5::json)`, id, st, input, out, errv); err != nil {
			if isInvalidJSON(err) {
				return // Postgres only stores valid JSON
			}
			t.Fatal(err)
		}
		h, err := wf.Handle(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Result(ctx)
		switch {
		case st == StatusSuccess && err != nil && !errors.Is(err, ErrDecode):
			t.Fatalf("success with output %q: %v is not ErrDecode", output, err)
		case st != StatusSuccess && err == nil:
			t.Fatalf("status %s with error %q: Result gave no error", st, errJSON)
		}
		if got, err := h.Status(ctx); err != nil || got != st {
			t.Fatalf("Status = %s, %v; want %s", got, err, st)
		}
		runs, _, err := e.ListWorkflows(ctx, &ListParams{IDPrefix: id})
		if err != nil || len(runs) == 0 || (st != StatusSuccess) != (runs[0].Error != nil) {
			t.Fatalf("ListWorkflows(%q) = %+v, %v", id, runs, err)
		}
		// Its event and stream entry hold the output text.
		if _, err := pool.Exec(ctx, `WITH ev AS (INSERT INTO `+tbl("events")+` (workflow_id, key, value) VALUES ($1, 'k', $2::json))
INSERT INTO `+tbl("streams")+` (workflow_id, key, off, value) VALUES ($1, 'k', 0, $2::json)`, id, output); err != nil {
			if isInvalidJSON(err) {
				return
			}
			t.Fatal(err)
		}
		if _, _, err := GetEvent[storedOut](ctx, e, id, "k", 0); err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("GetEvent of %q: %v is not ErrDecode", output, err)
		}
		if _, _, err := StreamEntries[storedOut](ctx, e, id, "k", 0, 0); err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("StreamEntries of %q: %v is not ErrDecode", output, err)
		}

		// A pending run with a recorded step, replayed by the engine.
		id = fmt.Sprintf("replay-%d", seq.Add(1))
		stepStatus, so, se := "done", any(stepOut), any(nil)
		if stepFailed {
			stepStatus, so, se = "error", nil, stepErr
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+tbl("workflows")+` (id, name, status, app_version, input)
VALUES ($1, 'stored', 'pending', 'fuzz', $2::json)`, id, input); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+tbl("steps")+` (workflow_id, pos, name, status, output, error)
VALUES ($1, 0, 'a', $2, $3::json, $4::json)`, id, stepStatus, so, se); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+tbl("messages")+` (workflow_id, topic, payload) VALUES ($1, 't', $2::json)`, id, errJSON); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT pg_notify($1, 'n:' || $2::text)", e.q.Channel, id)
			return err
		})
		if err != nil {
			if isInvalidJSON(err) {
				return
			}
			t.Fatal(err)
		}
		h, err = wf.Handle(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Result(ctx)
		if ctx.Err() != nil {
			t.Fatalf("replay of input %q, step %s %q/%q never finished", input, stepStatus, stepOut, stepErr)
		}
		if err == nil {
			var in, msg storedIn
			var a []int
			if stepFailed || json.Unmarshal([]byte(input), &in) != nil || json.Unmarshal([]byte(stepOut), &a) != nil ||
				json.Unmarshal([]byte(errJSON), &msg) != nil || res.N != in.N || res.S != in.S || !slices.Equal(res.A, a) || res.M != msg.S {
				t.Fatalf("replay of input %q, step %s %q/%q gave %+v", input, stepStatus, stepOut, stepErr, res)
			}
		}
		if _, err := e.ListSteps(ctx, id); err != nil {
			t.Fatalf("ListSteps(%q): %v", id, err)
		}
	})
}

// isInvalidJSON reports Postgres refusing a value for a json column.
func isInvalidJSON(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "22P02" || pe.Code == "22032" || pe.Code == "22021" || pe.Code == "22P05")
}
