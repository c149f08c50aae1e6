package sysdb

import "context"

// DeclaredBySchema is the declaration (queues.declared) of a queue declared
// outside code, by a client's DeclareQueue with limits or by an SQL insert:
// the first executor that declares the queue keeps its settings (see
// QueueQueries.Declare). A declaration by code is its encoded settings, a
// JSON object, never this.
const DeclaredBySchema = "schema"

// ClientQueries are the statements of a client (a process that creates runs
// and waits for them without executing any) that an engine does not send:
// for the rest it sends the engine's own statements, so what it writes is
// what an engine writes.
type ClientQueries struct {
	createQueue string
}

// NewClientQueries renders the client statements for schema.
func NewClientQueries(schema string) *ClientQueries {
	return &ClientQueries{
		// A queue is created, never changed: a queue that exists keeps the
		// settings its executors or an operator gave it. No notification: a
		// new queue has no runs to dispatch.
		// $1 name, $2-$10 settings (settingsArgs), $11 declared.
		createQueue: Render(`INSERT INTO {{schema}}.queues (name, `+settingsColumns+`, declared)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO NOTHING`, schema),
	}
}

// CreateQueueParams are a queue to create.
type CreateQueueParams struct {
	Name     string
	Settings QueueSettings
	// Declared is DeclaredBySchema (the first executor keeps Settings) or
	// "" (the first executor's declaration replaces them).
	Declared string
}

// CreateQueue creates queue p.Name unless a queue of that name exists;
// created reports whether it did.
func (q *ClientQueries) CreateQueue(ctx context.Context, db DBTX, p CreateQueueParams) (created bool, err error) {
	args := append(append([]any{p.Name}, settingsArgs(p.Settings)...), p.Declared)
	tag, err := db.Exec(ctx, q.createQueue, args...)
	return tag.RowsAffected() == 1, err
}
