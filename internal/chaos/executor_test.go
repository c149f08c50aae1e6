package chaos

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Child processes. The test binary re-executes itself with CHAOS_EXECUTOR
// set to an executor ID; the child runs one engine with the workload until
// its stdin closes (then it shuts down cleanly) or it is SIGKILLed.

const (
	envExecutor = "CHAOS_EXECUTOR"
	envURL      = "CHAOS_DATABASE_URL"
	envLedger   = "CHAOS_LEDGER_URL"
	envModel    = "CHAOS_MODEL_URL"
	envSchema   = "CHAOS_SCHEMA"
	envDefer    = "CHAOS_DEFER_STEPS" // set: Config.DeferStepCheckpoints

	leaseTTL      = 15 * time.Second // longer than an outage: a live executor never loses its runs to one
	pollInterval  = 500 * time.Millisecond
	parkThreshold = 500 * time.Millisecond // longer sleeps park
)

func runExecutorIfAsked() bool {
	id := os.Getenv(envExecutor)
	if id == "" {
		return false
	}
	if err := runExecutor(id); err != nil {
		fmt.Fprintln(os.Stderr, "executor error:", err)
		os.Exit(3)
	}
	os.Exit(0)
	return true
}

func runExecutor(id string) error {
	ctx := context.Background()
	schema = os.Getenv(envSchema)
	cfg, err := pgxpool.ParseConfig(os.Getenv(envURL))
	if err != nil {
		return err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	e, err := durable.New(pool, &durable.Config{
		Schema:               schema,
		AppVersion:           "chaos",
		ExecutorID:           id,
		LeaseTTL:             leaseTTL,
		PollInterval:         pollInterval,
		ParkThreshold:        parkThreshold,
		MaxRecoveryAttempts:  1000, // kills are random here, not the workflow's fault
		DeferStepCheckpoints: os.Getenv(envDefer) != "",
		StepRetry:            durable.RetryPolicy{BaseDelay: 5 * time.Millisecond},
		Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return err
	}
	if _, err := register(e, &ledgerClient{url: os.Getenv(envLedger), pid: os.Getpid()}, os.Getenv(envModel)); err != nil {
		return err
	}
	// The database may be down right now: keep trying.
	for giveUp := time.Now().Add(5 * time.Minute); ; {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := e.Launch(lctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("launch: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Println("ready", os.Getpid())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF: stop
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return e.Shutdown(sctx)
}
