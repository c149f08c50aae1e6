package durable

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestParkIsFenced: an executor that lost a run (a new owner bumped its
// epoch, as after a lease expiry) cannot park it: the park changes nothing,
// fails with ErrFenced, and the run stays with its new owner.
func TestParkIsFenced(t *testing.T) {
	t.Parallel()
	ctx, pool, schema, e := newEngine(t, &Config{ExecutorID: "old-owner"})
	inside, hold := make(chan *run, 1), make(chan struct{})
	wf := Register(e, "parker", func(wctx Context, _ int) (int, error) {
		inside <- wctx.workflowRun()
		<-hold
		return 0, nil
	}, nil)
	launchUntilCleanup(ctx, t, e)
	defer close(hold)
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-inside
	runs := pgx.Identifier{schema, "workflows"}.Sanitize()
	execAll(ctx, t, pool, "UPDATE "+runs+" SET epoch = epoch + 1, executor_id = 'new-owner' WHERE id = '"+h.ID()+"'")

	if err := r.park(time.Now().Add(time.Hour), waitOn{topic: "topic"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("park by the old owner: %v, want ErrFenced", err)
	}
	var owner string
	var parked bool
	if err := pool.QueryRow(ctx, "SELECT executor_id, wake_at IS NOT NULL OR wait_topic IS NOT NULL FROM "+runs+" WHERE id = $1", h.ID()).Scan(&owner, &parked); err != nil {
		t.Fatal(err)
	}
	if owner != "new-owner" || parked {
		t.Fatalf("after the old owner's park: owner %q, parked %v; want the new owner's, not parked", owner, parked)
	}
}
