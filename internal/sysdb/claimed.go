package sysdb

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimedRow is a run a claim just made this executor's: what executing
// it needs. Every claim statement returns these columns in this order.
type ClaimedRow struct {
	ID       string
	Name     string
	Input    []byte
	Epoch    int64 // the claim's
	Attempts int   // recovery attempts, this claim's included
	Deadline *time.Time
	Queue    *string
	Trace    *string        // W3C trace context stored at start
	Queued   *time.Duration // time since the run was created (enqueued)
	// CancelRequested: a Cancel asked the run to run its compensations
	// and end as cancelled (CancelParams.Compensate).
	CancelRequested bool
	// Recovered: this claim counted a recovery attempt (the run's executor
	// died). Set by ClaimOwn and ClaimOrphans only.
	Recovered bool
}

// dest returns the scan destinations of c's columns.
func (c *ClaimedRow) dest() []any {
	return []any{&c.ID, &c.Name, &c.Input, &c.Epoch, &c.Attempts, &c.Deadline, &c.Queue, &c.Trace, &c.Queued, &c.CancelRequested}
}

// collectClaimed reads the runs of a claim statement, each row into one
// ClaimedRow whose destinations are made once (a claim reads up to a
// thousand runs).
func collectClaimed(rows pgx.Rows, err error) ([]ClaimedRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ClaimedRow
	var c ClaimedRow
	dest := c.dest()
	for rows.Next() {
		c = ClaimedRow{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
