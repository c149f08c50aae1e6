// Command booking runs a booking saga: reserve a seat, charge the card,
// confirm with the airline. Each of the first two steps registers its
// undo with durable.Compensate; when the confirmation fails, the engine
// refunds the card and releases the seat, latest first, each undo a
// durable step with its own idempotency key. Killed half-way through the
// undo, a restarted process finishes it without refunding twice.
//
// From the repository root:
//
//	scripts/with-postgres go run ./examples/booking                  # one booking that succeeds, one the airline refuses
//	scripts/with-postgres go run ./examples/booking -crash-in-undo   # the same; the process SIGKILLs itself inside the
//	                                                               # refund of the refused one, and a new process finishes the undo
//
// The "payments provider" is the table booking.payments: one row per
// idempotency key, with the calls it got; the seats are booking.seats.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/examples/internal/demo"
)

const (
	executorID = "booking-1" // stable: a restarted process resumes its runs at Launch
	appVersion = "booking-1"
)

// Trip is a booking request.
type Trip struct {
	BookingID   string `json:"booking_id"`
	Flight      string `json:"flight"`
	AmountCents int    `json:"amount_cents"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Stdout, os.Args[1:])
	stop()
	os.Exit(code)
}

func cli(ctx context.Context, out io.Writer, args []string) int {
	fs := flag.NewFlagSet("booking", flag.ContinueOnError)
	schema := fs.String("schema", "booking", "schema of the example's tables; the engine's is this plus _durable")
	crash := fs.Bool("crash-in-undo", false, "SIGKILL the process inside the refund, then finish the undo in a new process")
	resume := fs.Bool("resume", false, "only resume the runs left pending (what the process started after the crash does)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	switch {
	case *resume:
		err = resumeRuns(ctx, out, *schema)
	default:
		err = demoRun(ctx, out, *schema, *crash)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "booking:", err)
		return 1
	}
	return 0
}

// self makes the command that runs this program again with args (its
// test runs it through the test binary).
var self = func(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = os.Environ()
	return cmd
}

// crashEnv tells the process to SIGKILL itself inside the refund.
const crashEnv = "BOOKING_CRASH_IN_UNDO"

func demoRun(ctx context.Context, out io.Writer, schema string, crash bool) error {
	pool, err := demo.Connect(ctx, "booking")
	if err != nil {
		return err
	}
	defer pool.Close()
	if os.Getenv(crashEnv) == "" { // the crashing child runs on its parent's tables
		if err := reset(ctx, pool, schema); err != nil {
			return err
		}
	}
	if crash {
		// The bookings run in a child process that dies inside the refund;
		// this process then plays the restarted one.
		fmt.Fprintf(out, "starting a process that will be SIGKILLed inside the refund of booking b-2\n")
		cmd := self(ctx, "-schema", schema)
		cmd.Env = append(cmd.Env, crashEnv+"=1")
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return fmt.Errorf("the crashing process: want a SIGKILL, got %v", err)
		}
		fmt.Fprintf(out, "the process was killed; starting a new one\n")
		return resumeRuns(ctx, out, schema)
	}
	return book(ctx, out, pool, schema, os.Getenv(crashEnv) != "")
}

// newEngine makes the engine with the saga registered.
func newEngine(pool *pgxpool.Pool, schema string, crash bool) (*durable.Engine, *durable.Workflow[Trip, string], error) {
	eng, err := durable.New(pool, &durable.Config{Schema: schema + "_durable", AppVersion: appVersion, ExecutorID: executorID,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, err
	}
	return eng, registerSaga(eng, pool, schema, crash), nil
}

// registerSaga registers the booking saga. With crash the process kills
// itself inside the refund, after the provider took it.
func registerSaga(eng *durable.Engine, pool *pgxpool.Pool, schema string, crash bool) *durable.Workflow[Trip, string] {
	seats, payments := pgx.Identifier{schema, "seats"}.Sanitize(), pgx.Identifier{schema, "payments"}.Sanitize()
	// pay is the payments provider: one row per idempotency key, calls counted.
	pay := func(ctx context.Context, kind string, t Trip) (int64, error) {
		var id int64
		err := pool.QueryRow(ctx, `INSERT INTO `+payments+` AS p (idem_key, booking_id, kind, amount_cents) VALUES ($1, $2, $3, $4)
ON CONFLICT (idem_key) DO UPDATE SET calls = p.calls + 1 RETURNING p.id`, durable.IdempotencyKey(ctx), t.BookingID, kind, t.AmountCents).Scan(&id)
		return id, err
	}
	return durable.Register(eng, "book-trip", func(wctx durable.Context, t Trip) (string, error) {
		// The seat is held in the same transaction as the step's record.
		seat, err := durable.TxStep(wctx, "reserve-seat", func(ctx context.Context, tx pgx.Tx) (string, error) {
			var seat string
			err := tx.QueryRow(ctx, `UPDATE `+seats+` SET held_by = $2 WHERE (flight, seat) =
	(SELECT flight, seat FROM `+seats+` WHERE flight = $1 AND held_by IS NULL ORDER BY seat LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING seat`, t.Flight, t.BookingID).Scan(&seat)
			if errors.Is(err, pgx.ErrNoRows) {
				return "", durable.Permanent(fmt.Errorf("flight %s is full", t.Flight))
			}
			return seat, err
		}, nil)
		if err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, "release-seat", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `UPDATE `+seats+` SET held_by = NULL WHERE flight = $1 AND seat = $2 AND held_by = $3`, t.Flight, seat, t.BookingID)
			return err
		}, nil); err != nil {
			return "", err
		}

		charge, err := durable.Step(wctx, "charge-card", func(ctx context.Context) (int64, error) { return pay(ctx, "charge", t) }, nil)
		if err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, "refund-card", func(ctx context.Context) error {
			if _, err := pay(ctx, "refund", t); err != nil {
				return err
			}
			if crash {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // the refund is made; its record is not
				select {}
			}
			return nil
		}, nil); err != nil {
			return "", err
		}

		ref, err := durable.Step(wctx, "confirm-with-airline", func(ctx context.Context) (string, error) {
			if t.Flight == "LX-closed" {
				return "", durable.Permanent(errors.New("the airline closed the flight"))
			}
			return fmt.Sprintf("PNR-%s", t.BookingID), nil
		}, nil)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("booked %s on %s, seat %s, charge #%d", ref, t.Flight, seat, charge), nil
	}, nil)
}

// book runs two bookings and shows how each ended.
func book(ctx context.Context, out io.Writer, pool *pgxpool.Pool, schema string, crash bool) error {
	eng, saga, err := newEngine(pool, schema, crash)
	if err != nil {
		return err
	}
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	defer shutdown(eng)
	for _, t := range []Trip{
		{BookingID: "b-1", Flight: "LX-open", AmountCents: 24900},
		{BookingID: "b-2", Flight: "LX-closed", AmountCents: 31900},
	} {
		h, err := saga.Start(ctx, t, &durable.StartOpts{ID: t.BookingID})
		if err != nil {
			return err
		}
		res, err := h.Result(ctx)
		report(out, t.BookingID, res, err)
	}
	if crash {
		return errors.New("the process was to be killed inside the refund")
	}
	return verify(ctx, out, eng, pool, schema, 1)
}

// resumeRuns starts the engine, which resumes the runs left pending at
// Launch, and waits for b-2.
func resumeRuns(ctx context.Context, out io.Writer, schema string) error {
	pool, err := demo.Connect(ctx, "booking")
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, saga, err := newEngine(pool, schema, false)
	if err != nil {
		return err
	}
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	defer shutdown(eng)
	h, err := saga.Handle(ctx, "b-2")
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	report(out, "b-2", res, err)
	return verify(ctx, out, eng, pool, schema, 2)
}

func report(out io.Writer, id, res string, err error) {
	if err != nil {
		fmt.Fprintf(out, "%s: failed: %v\n", id, err)
		return
	}
	fmt.Fprintf(out, "%s: %s\n", id, res)
}

func shutdown(eng *durable.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = eng.Shutdown(ctx)
}

// verify prints the ledger and checks the outcome: b-1 booked and
// charged once, holding its seat; b-2 failed, compensated, charged and
// refunded once each (refundCalls: the calls the refund's key got), its
// seat free again.
func verify(ctx context.Context, out io.Writer, eng *durable.Engine, pool *pgxpool.Pool, schema string, refundCalls int) error {
	if err := ledger(ctx, out, pool, schema); err != nil {
		return err
	}
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var b1Charges, b2Charges, b2Refunds, b2RefundCalls, b1Seats, b2Seats int
	err := pool.QueryRow(ctx, `SELECT
	count(*) FILTER (WHERE booking_id = 'b-1' AND kind = 'charge'),
	count(*) FILTER (WHERE booking_id = 'b-2' AND kind = 'charge'),
	count(*) FILTER (WHERE booking_id = 'b-2' AND kind = 'refund'),
	coalesce(sum(calls) FILTER (WHERE booking_id = 'b-2' AND kind = 'refund'), 0),
	(SELECT count(*) FROM `+pgx.Identifier{schema, "seats"}.Sanitize()+` WHERE held_by = 'b-1'),
	(SELECT count(*) FROM `+pgx.Identifier{schema, "seats"}.Sanitize()+` WHERE held_by = 'b-2')
FROM `+pgx.Identifier{schema, "payments"}.Sanitize()).Scan(&b1Charges, &b2Charges, &b2Refunds, &b2RefundCalls, &b1Seats, &b2Seats)
	if err != nil {
		return err
	}
	check(b1Charges == 1 && b1Seats == 1, "b-1: %d charges, %d seats held, want 1 and 1", b1Charges, b1Seats)
	check(b2Charges == 1 && b2Refunds == 1, "b-2: %d charges, %d refunds, want 1 and 1", b2Charges, b2Refunds)
	check(b2RefundCalls == refundCalls, "b-2: the refund's key got %d calls, want %d", b2RefundCalls, refundCalls)
	check(b2Seats == 0, "b-2 still holds %d seats", b2Seats)
	steps, err := eng.ListSteps(ctx, "b-2")
	if err != nil {
		return err
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	want := "[reserve-seat charge-card confirm-with-airline undo:refund-card undo:release-seat]"
	check(fmt.Sprint(names) == want, "b-2's steps: %v, want %s", names, want)
	if len(problems) > 0 {
		msg := fmt.Sprintf("FAILED: %v", problems)
		fmt.Fprintln(out, msg)
		return &demo.Failed{Msg: msg}
	}
	fmt.Fprintf(out, "OK: b-2 was refunded and its seat released, once each (the refund's key got %d call(s)); b-1 stays booked\n", refundCalls)
	return nil
}

// ledger prints the seats held and the provider's payments.
func ledger(ctx context.Context, out io.Writer, pool *pgxpool.Pool, schema string) error {
	rows, err := pool.Query(ctx, `SELECT booking_id, kind, amount_cents, calls FROM `+pgx.Identifier{schema, "payments"}.Sanitize()+` ORDER BY id`)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "payments provider:")
	for rows.Next() {
		var booking, kind string
		var amount, calls int
		if err := rows.Scan(&booking, &kind, &amount, &calls); err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s %-6s %d.%02d EUR (calls: %d)\n", booking, kind, amount/100, amount%100, calls)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var held []string
	rows, err = pool.Query(ctx, `SELECT flight || ' ' || seat || ' held by ' || held_by FROM `+pgx.Identifier{schema, "seats"}.Sanitize()+` WHERE held_by IS NOT NULL ORDER BY 1`)
	if err != nil {
		return err
	}
	held, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "seats held: %v\n", held)
	return nil
}

// reset drops and creates the example's schemas and tables.
func reset(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE;
DROP SCHEMA IF EXISTS `+pgx.Identifier{schema + "_durable"}.Sanitize()+` CASCADE;
CREATE SCHEMA `+s+`;
CREATE TABLE `+s+`.seats (flight text, seat text, held_by text, PRIMARY KEY (flight, seat));
INSERT INTO `+s+`.seats VALUES ('LX-open', '12A', NULL), ('LX-open', '12B', NULL), ('LX-closed', '3C', NULL);
CREATE TABLE `+s+`.payments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idem_key     text NOT NULL UNIQUE,
    booking_id   text NOT NULL,
    kind         text NOT NULL,
    amount_cents int NOT NULL,
    calls        int NOT NULL DEFAULT 1
)`)
	return err
}
