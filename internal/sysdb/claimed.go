package sysdb

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimedRow is a run an executor just took ownership of, as the claim
// statements return it: id, name, input, epoch, recovery_attempts,
// deadline, queue_name, trace_context and the time since it was created.
type ClaimedRow struct {
	ID       string
	Name     string
	Input    []byte
	Epoch    int64
	Attempts int
	Deadline *time.Time
	Queue    *string
	Trace    *string        // W3C trace context stored at start
	Queued   *time.Duration // time since the run was created (enqueued)
}

// scanClaimed reads the rows of a claim statement.
func scanClaimed(rows pgx.Rows, err error) ([]ClaimedRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var got []ClaimedRow
	for rows.Next() {
		var c ClaimedRow
		if err := rows.Scan(&c.ID, &c.Name, &c.Input, &c.Epoch, &c.Attempts, &c.Deadline, &c.Queue, &c.Trace, &c.Queued); err != nil {
			return nil, err
		}
		got = append(got, c)
	}
	return got, rows.Err()
}
