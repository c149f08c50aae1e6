// Package demo holds the few lines every example program shares: running
// with a context that Ctrl-C cancels, a connection to $DATABASE_URL, a
// verdict error, and a writer that concurrent workers can share. Examples use only the public durable API;
// this package has nothing of the library in it.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Main runs run with os.Stdout and a context cancelled by Ctrl-C or
// SIGTERM, and exits 1 if it fails. A [*Failed] error is not printed again:
// its verdict line is already out.
func Main(name string, run func(ctx context.Context, out io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		if !errors.As(err, new(*Failed)) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		os.Exit(1)
	}
}

// Failed is returned by an example whose checks failed, after it printed
// its FAILED line.
type Failed struct{ Msg string }

func (e *Failed) Error() string { return e.Msg }

// SyncWriter serialises writes from several goroutines.
type SyncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSyncWriter wraps w.
func NewSyncWriter(w io.Writer) *SyncWriter { return &SyncWriter{w: w} }

func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Connect opens a pool on $DATABASE_URL and checks the server answers.
// example names the program, for the hint when the variable is unset.
// The caller closes the pool.
func Connect(ctx context.Context, example string) (*pgxpool.Pool, error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return nil, fmt.Errorf("DATABASE_URL is not set; from the repository root run: scripts/with-postgres go run ./examples/%s", example)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	return pool, nil
}
