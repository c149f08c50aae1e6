package durable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durable-go/durable/internal/lease"
)

// TestIsTransient: connection-class errors (the database is away or
// restarting) are retried; errors of the statement itself are not.
func TestIsTransient(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{pg("57P01"), true}, // admin_shutdown: immediate or fast shutdown
		{pg("57P02"), true}, // crash_shutdown
		{pg("57P03"), true}, // cannot_connect_now: starting up, in recovery
		{pg("08006"), true}, // connection_failure
		{pg("08001"), true},
		{pg("53300"), true}, // too_many_connections
		{pg("40001"), true}, // serialization_failure: the transaction did nothing
		{pg("23505"), false},
		{pg("42P01"), false},
		{pg("22P02"), false},
		{pg("DU001"), false}, // checkpoint refused: fencing, never retried blindly
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{io.ErrUnexpectedEOF, true},
		{context.Canceled, false},
		{pgx.ErrNoRows, false},
		{errors.New("durable: something else"), false},
		{nil, false},
	} {
		if got := isTransient(c.err); got != c.want {
			t.Errorf("isTransient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestNotOursToFinish: a run halted by an outage it could not ride out is
// handed back, never failed; a run past its deadline fails.
func TestNotOursToFinish(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("durable: record step: %w", &pgconn.PgError{Code: "57P01"}), true},
		{fmt.Errorf("x: %w", ErrShutdown), true},
		{fmt.Errorf("x: %w", ErrFenced), true},
		{fmt.Errorf("durable: workflow passed its deadline: %w", context.DeadlineExceeded), false},
		{&NonDeterminismError{WorkflowID: "w"}, false},
		{fmt.Errorf("durable: record step: %w", &pgconn.PgError{Code: "23505"}), false},
	} {
		if got := (&runner{e: &Engine{lease: lease.New(lease.Config{})}}).notOursToFinish(c.err); got != c.want {
			t.Errorf("notOursToFinish(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
