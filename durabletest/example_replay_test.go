package durabletest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

type replaySignup struct {
	Email string `json:"email"`
}

// registerReplayOnboard registers today's onboard workflow: provision a
// workspace, wait out the two-week trial, charge; checkEmailFirst is a
// change that inserts a step before the provisioning.
func registerReplayOnboard(eng *durable.Engine, checkEmailFirst bool) {
	durable.Register(eng, "onboard", func(wctx durable.Context, in replaySignup) (string, error) {
		if checkEmailFirst {
			if _, err := durable.Step(wctx, "check-email", func(ctx context.Context) (bool, error) { return true, nil }, nil); err != nil {
				return "", err
			}
		}
		ws, err := durable.Step(wctx, "provision", func(ctx context.Context) (string, error) { return "ws-" + in.Email, nil }, nil)
		if err != nil {
			return "", err
		}
		if err := durable.Sleep(wctx, 14*24*time.Hour); err != nil {
			return "", err
		}
		// Added since the history was recorded, after its last step: the
		// run in flight takes it when it wakes up.
		if _, err := durable.Step(wctx, "welcome-email", func(ctx context.Context) (bool, error) { return true, nil }, nil); err != nil {
			return "", err
		}
		return durable.Step(wctx, "charge", func(ctx context.Context) (string, error) { return "charged " + ws, nil }, nil)
	}, nil)
}

// replayT stands for the *testing.T of a test in this example: it prints
// what the test would report.
type replayT struct{ testing.TB }

func (replayT) Helper() {}
func (replayT) Fatalf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
}

// A run of the last release, parked in its trial, was exported with
// `durable history export signup-42 > testdata/replay/onboard.json`. A test
// replays today's code against it, with no step run and no database used:
// the build that added a step after the recorded ones resumes the run,
// the one that inserted a step before them would stop it.
func ExampleReplayFile() {
	var t testing.TB = replayT{} // in a test: the test's *testing.T

	// The engine is never launched, and a replay does not use its pool.
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	for _, checkEmailFirst := range []bool{false, true} {
		eng, err := durable.New(pool, &durable.Config{AppVersion: "2026-11-29", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		registerReplayOnboard(eng, checkEmailFirst)
		fmt.Println("check-email first:", checkEmailFirst)
		durabletest.ReplayFile(t, eng, "testdata/replay/onboard.json")
	}
	// Output:
	// check-email first: false
	// check-email first: true
	// FAIL: durabletest: testdata/replay/onboard.json: run "signup-42" of workflow "onboard" diverges at step 0: the history records "provision", the code calls "check-email"
}
