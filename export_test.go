package durable

import (
	"context"
	"encoding/json"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
	"github.com/jackc/pgx/v5"
)

// IsStopping reports whether Shutdown has begun: the runs in flight stop
// at their next step boundary from then on.
func (e *Engine) IsStopping() bool { return e.isStopping() }

// SetEventTx sends SetEvent's statements for run id in tx, as a setter in
// flight has: the event written and its wake-up done, not yet committed.
func SetEventTx(ctx context.Context, e *Engine, tx pgx.Tx, id string, epoch int64, pos int, key string, value json.RawMessage) (bool, error) {
	return e.wq.SetEvent(ctx, tx, sysdb.SetEventParams{WorkflowID: id, Epoch: epoch, Pos: pos, Name: "durable.event:" + key,
		Key: key, Value: value, StartedAt: time.Now()})
}
