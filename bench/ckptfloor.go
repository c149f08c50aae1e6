package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// Floor C: a step checkpoint's own statement, sent by hand on floor A's
// connection. The fenced form is the engine's statement itself
// (sysdb.Queries.InsertStep: the row is inserted only if the run is
// pending with the writer's epoch, and the run's row is share-locked until
// the commit), rendered for schema ckptSchema, whose tables are copies of
// the engine's (LIKE ... INCLUDING ALL: the same columns, defaults, checks
// and indexes). The plain form inserts the same row without the fence. So
// floor C / floor A is what a step's row and fence cost beyond the
// smallest INSERT, and the per-step overhead / floor C what the engine adds
// around its one statement.
const (
	ckptSchema      = "bench_ckpt"
	insertCkptPlain = "INSERT INTO " + ckptSchema + ".steps (workflow_id, pos, name, status, output, error, attempts, started_at) " +
		"VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"

	// Run IDs shaped like the engine's (UUIDv7 text): one run per form.
	ckptFencedRun = "019ad2c0-0000-7000-8000-00000000000c"
	ckptPlainRun  = "019ad2c0-0000-7000-8000-00000000000d"
)

// ckptOutput is what the bench's no-op step records ("ok" as JSON).
var ckptOutput = []byte(`"ok"`)

// createCkptFloor copies the tables of the engine's schema into ckptSchema
// and inserts the pending run the fenced form writes under.
func (b *bench) createCkptFloor(ctx context.Context, schema string) error {
	for _, q := range []string{
		"CREATE SCHEMA " + ckptSchema,
		"CREATE TABLE " + ckptSchema + ".workflows (LIKE " + schema + ".workflows INCLUDING ALL)",
		"CREATE TABLE " + ckptSchema + ".steps (LIKE " + schema + ".steps INCLUDING ALL)",
		"INSERT INTO " + ckptSchema + ".workflows (id, name, status, app_version, epoch) VALUES ('" + ckptFencedRun + "', 'steps', 'pending', 'bench', 1)",
	} {
		if _, err := b.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("floor C: %w", err)
		}
	}
	return nil
}

// ckptFloor returns floor C's op: the fenced form, or the plain one.
func (b *bench) ckptFloor(fenced bool) opFunc {
	q := sysdb.New(ckptSchema, true)
	pos := 0
	return func(ctx context.Context) error {
		pos++
		if !fenced {
			_, err := b.conn.Exec(ctx, insertCkptPlain, ckptPlainRun, pos, "s", "done", ckptOutput, []byte(nil), 1, time.Now())
			return err
		}
		written, err := q.InsertStep(ctx, b.conn, sysdb.InsertStepParams{WorkflowID: ckptFencedRun, Pos: pos, Name: "s", Status: "done",
			Output: json.RawMessage(ckptOutput), Attempts: 1, StartedAt: time.Now(), Epoch: 1})
		if err == nil && !written {
			err = fmt.Errorf("floor C: the fenced insert wrote no row")
		}
		return err
	}
}
