package durable

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// runKeys are the tables of a run's state and the column that holds the
// run's ID in each: the distribution column a sharded Postgres would
// place their rows by (docs/scale-out.md).
var runKeys = map[string]string{
	"workflows":     "id",
	"steps":         "workflow_id",
	"step_attempts": "workflow_id",
	"messages":      "workflow_id",
	"events":        "workflow_id",
	"streams":       "workflow_id",
}

// TestHotPathKeyedByRunID: every statement of a run's own path (its
// start, steps, attempts, finish, waits, messages, events and streams,
// and the load of its history on resume) reaches the rows of the run's
// tables only through an index search on the run's ID (a message is
// found by the run's ID, then consumed by its own key), and no other
// index could serve it. That is what lets each of them run on the one
// shard that holds the run when the tables are distributed by run ID,
// and what keeps each of them reading one run's rows whatever the
// planner's statistics say. The plans are made with sample arguments and
// sequential and bitmap scans disabled, so a statement whose predicates
// allow an index search shows it.
func TestHotPathKeyedByRunID(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	q := sysdb.New(schema, true)
	wq := sysdb.NewWaitQueries(schema, q.Channel)
	sq := sysdb.NewStreamQueries(schema, q.Channel)
	aq := sysdb.NewAttemptQueries(schema)
	now := time.Now()
	out := json.RawMessage(`1`)
	step := &sysdb.InsertStepParams{WorkflowID: "r", Pos: 1, Name: "s", Status: "done", Output: out, Attempts: 1, StartedAt: now, Epoch: 2}
	finish := &sysdb.FinishOneParams{ID: "r", Epoch: 2, Status: "success", Output: out}
	ids := []string{"r", "s"}
	cases := []planCase{
		typedCase(t, "InsertWorkflow", func(db sysdb.DBTX) error {
			_, err := q.InsertWorkflow(ctx, db, sysdb.InsertWorkflowParams{ID: "r", Name: "w", AppVersion: "v", Input: out})
			return err
		}),
		typedCase(t, "InsertOwned", func(db sysdb.DBTX) error {
			_, err := q.InsertOwned(ctx, db, sysdb.InsertOwnedParams{AppVersion: "v", ExecutorID: "x", Run: &sysdb.OwnedRun{ID: "r", Name: "w", Input: out}})
			return err
		}),
		typedCase(t, "WorkflowByID", func(db sysdb.DBTX) error { _, _, err := q.WorkflowByID(ctx, db, "r"); return err }),
		typedCase(t, "WatchWorkflow", func(db sysdb.DBTX) error { _, err := q.WatchWorkflow(ctx, db, "r"); return err }),
		typedCase(t, "InsertStep", func(db sysdb.DBTX) error { _, err := q.InsertStep(ctx, db, *step); return err }),
		typedCase(t, "InsertSteps", func(db sysdb.DBTX) error {
			_, err := q.InsertSteps(ctx, db, []*sysdb.InsertStepParams{step, step})
			return err
		}),
		typedCase(t, "InsertStepTx", func(db sysdb.DBTX) error {
			b := &pgx.Batch{}
			q.QueueInsertStepTx(b, *step)
			_, err := db.Exec(ctx, b.QueuedQueries[0].SQL, b.QueuedQueries[0].Arguments...)
			return err
		}),
		typedCase(t, "CompleteIntent", func(db sysdb.DBTX) error {
			_, err := q.CompleteIntent(ctx, db, sysdb.CompleteIntentParams{WorkflowID: "r", Pos: 1, Status: "done", Output: out, Attempts: 1, Epoch: 2})
			return err
		}),
		typedCase(t, "LoadStepsMany", func(db sysdb.DBTX) error {
			return q.LoadStepsMany(ctx, db, sysdb.LoadStepsManyParams{WorkflowIDs: ids, Budget: 1 << 20, Window: 512}, func(sysdb.LoadStepsManyRow) {})
		}),
		typedCase(t, "RecordAttempt", func(db sysdb.DBTX) error {
			_, err := aq.RecordAttempt(ctx, db, sysdb.RecordAttemptParams{WorkflowID: "r", Pos: 1, Name: "s", Epoch: 2})
			return err
		}),
		typedCase(t, "LoadAttempts", func(db sysdb.DBTX) error { _, err := aq.LoadAttempts(ctx, db, ids); return err }),
		typedCase(t, "FinishOne", func(db sysdb.DBTX) error { _, _, err := q.FinishOne(ctx, db, *finish); return err }),
		typedCase(t, "FinishOneSteps", func(db sysdb.DBTX) error {
			_, _, err := q.FinishOneSteps(ctx, db, sysdb.FinishOneStepsParams{FinishOneParams: *finish, Steps: []*sysdb.InsertStepParams{step}})
			return err
		}),
		typedCase(t, "FinishWorkflows", func(db sysdb.DBTX) error {
			_, _, err := q.FinishWorkflows(ctx, db, []*sysdb.FinishOneParams{finish, finish})
			return err
		}),
		typedCase(t, "FinishStepsMany", func(db sysdb.DBTX) error {
			_, _, err := q.FinishStepsMany(ctx, db, sysdb.FinishStepsManyParams{Runs: []*sysdb.FinishOneParams{finish}, Steps: []*sysdb.InsertStepParams{step}})
			return err
		}),
		// The parent's row, by the parent's ID: a statement of its own, so
		// it runs on the parent's shard.
		typedCase(t, "WakeParent", func(db sysdb.DBTX) error {
			_, err := q.WakeParent(ctx, db, sysdb.WakeParentParams{ChildID: "r", ParentID: "p"})
			return err
		}),
		typedCase(t, "Park", func(db sysdb.DBTX) error {
			_, err := wq.Park(ctx, db, sysdb.ParkParams{ID: "r", Epoch: 2, WakeAt: now.Add(time.Hour), Topic: "t"})
			return err
		}),
		typedCase(t, "HandBack", func(db sysdb.DBTX) error {
			_, err := wq.HandBack(ctx, db, sysdb.HandBackParams{ID: "r", Epoch: 2})
			return err
		}),
		typedCase(t, "Unpark", func(db sysdb.DBTX) error { _, err := wq.Unpark(ctx, db, "r"); return err }),
		typedCase(t, "HasMessage", func(db sysdb.DBTX) error {
			_, err := wq.HasMessage(ctx, db, sysdb.HasMessageParams{WorkflowID: "r", Topics: []string{"t"}})
			return err
		}),
		typedCase(t, "Send", func(db sysdb.DBTX) error {
			_, err := wq.Send(ctx, db, sysdb.SendParams{WorkflowID: "r", Topic: "t", Payload: out, IdempotencyKey: "k"})
			return err
		}),
		typedCase(t, "Receive", func(db sysdb.DBTX) error {
			_, err := wq.Receive(ctx, db, sysdb.ReceiveParams{WorkflowID: "r", Epoch: 2, Topic: "t", Pos: 1, Name: "durable.recv", StartedAt: now})
			return err
		}),
		batchCase(t, "SetEvent", 1, func(db sysdb.BatchDB) error {
			_, err := wq.SetEvent(ctx, db, sysdb.SetEventParams{WorkflowID: "r", Epoch: 2, Key: "k", Value: out, StartedAt: now})
			return err
		}),
		batchCase(t, "SetEvent's wake-up", 2, func(db sysdb.BatchDB) error {
			_, err := wq.SetEvent(ctx, db, sysdb.SetEventParams{WorkflowID: "r", Epoch: 2, Key: "k", Value: out, StartedAt: now})
			return err
		}),
		typedCase(t, "MarkWaits", func(db sysdb.DBTX) error { _, err := wq.MarkWaits(ctx, db, "r", 2, []string{"msg:t"}); return err }),
		typedCase(t, "ClearWaits", func(db sysdb.DBTX) error { return wq.ClearWaits(ctx, db, "r", 2) }),
		typedCase(t, "LockRun", func(db sysdb.DBTX) error { return wq.LockRun(ctx, db, "r") }),
		typedCase(t, "GetEvent", func(db sysdb.DBTX) error {
			_, err := wq.GetEvent(ctx, db, sysdb.GetEventParams{WorkflowID: "r", Key: "k"})
			return err
		}),
		typedCase(t, "SetWaitTopic", func(db sysdb.DBTX) error {
			_, err := wq.SetWaitTopic(ctx, db, sysdb.WaitTopicParams{ID: "r", Epoch: 2, Topic: "t"})
			return err
		}),
		typedCase(t, "ClearWaitTopic", func(db sysdb.DBTX) error {
			_, err := wq.ClearWaitTopic(ctx, db, sysdb.WaitTopicParams{ID: "r", Epoch: 2, Topic: "t"})
			return err
		}),
		typedCase(t, "Append", func(db sysdb.DBTX) error {
			_, err := sq.Append(ctx, db, sysdb.AppendParams{WorkflowIDs: ids, Keys: fillN(2, "k"), Offsets: fillN(2, int64(0)),
				Values: fillN(2, out), Closed: fillN(2, false), Wseqs: fillN[*int64](2, nil), Epochs: fillN(2, int64(2))})
			return err
		}),
		typedCase(t, "KeyState", func(db sysdb.DBTX) error {
			_, err := sq.KeyState(ctx, db, sysdb.KeyStateParams{WorkflowID: "r", Key: "k"})
			return err
		}),
		typedCase(t, "Read", func(db sysdb.DBTX) error {
			_, err := sq.Read(ctx, db, sysdb.ReadParams{WorkflowID: "r", Key: "k", Limit: 10})
			return err
		}),
		typedCase(t, "RunState", func(db sysdb.DBTX) error { _, err := sq.RunState(ctx, db, "r"); return err }),
	}
	// The indexes of the schema: leading column, partial or not.
	type index struct {
		lead    string
		partial bool
	}
	indexes := map[string]index{}
	rows, err := pool.Query(ctx, `SELECT c.relname, a.attname, i.indpred IS NOT NULL FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] WHERE n.nspname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var ix index
		if err := rows.Scan(&name, &ix.lead, &ix.partial); err != nil {
			t.Fatal(err)
		}
		indexes[name] = ix
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	searches := func(cond, col string) bool {
		return regexp.MustCompile(`^\(*(\w+\.)?` + regexp.QuoteMeta(col) + `\b`).MatchString(cond)
	}
	byRunID := regexp.MustCompile(`(^|[( ])(\w+\.)?workflow_id = `)
	for _, c := range cases {
		// The statement's plan must search each table of a run's state by
		// the run's ID. Then that index is dropped (in a transaction rolled
		// back) to see what else could serve the statement, and so on: a
		// partial index whose predicate the statement implies, or an index
		// searched by its own leading column, is a plan the planner may
		// prefer when its statistics are stale (it believes few runs match
		// the predicate), and it reads other runs' rows. A full scan of an
		// unrelated index (its leading column unconstrained) never wins
		// against the search by ID and is not reported.
		var dropped []string
		for round := 0; ; round++ {
			scans, plan, err := pgtest.ExplainScans(ctx, t, pool, schema, c.sql, c.args, dropped)
			if err != nil {
				if round == 0 {
					t.Fatalf("%s: %v", c.name, err)
				}
				break // the statement needs what was dropped (an ON CONFLICT's arbiter)
			}
			more := false
			for _, s := range scans {
				key, ok := runKeys[s.Relation]
				if !ok || s.Index == "" {
					continue // not a table of a run's state, or a sequential scan
				}
				ix := indexes[s.Index]
				switch {
				case ix.lead == key && searches(s.IndexCond, key):
				case s.Index == "messages_pkey" && s.IndexCond != "" && byRunID.MatchString(s.Filter):
					// A message found by the run's ID, then consumed by
					// its own key (see docs/scale-out.md).
				case ix.partial || searches(s.IndexCond, ix.lead) || ix.lead == key:
					// (The last: the run's own key index, not searched by
					// the run's ID, is read whole.)
					t.Errorf("%s: can read %s through %s (%s %q, filter %q), not by the run's ID (%s)\n%s",
						c.name, s.Relation, s.Index, s.NodeType, s.IndexCond, s.Filter, key, plan)
					continue
				default:
					continue
				}
				if !slices.Contains(dropped, s.Index) {
					dropped, more = append(dropped, s.Index), true
				}
			}
			if !more {
				break
			}
		}
	}
}
