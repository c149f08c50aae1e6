package sysdb

// ListQueues renders the statement listing every declared queue of schema
// with its live settings and counts, by name. Columns: name,
// global_concurrency, worker_concurrency, partition_concurrency,
// rate_limit, rate_period_ms, paused, release_parked, ready, delayed,
// running. The counts read the queue's queued and running runs from their
// partial indexes, as Queue.Stats does (see QueueQueries.Stats).
func ListQueues(schema string) string {
	return Render(`SELECT q.name, q.global_concurrency, q.worker_concurrency, q.partition_concurrency,
	q.rate_limit, q.rate_period_ms, q.paused, q.release_parked, e.ready, e.delayed, r.running
FROM {{schema}}.queues q
CROSS JOIN LATERAL (SELECT
	count(*) FILTER (WHERE w.not_before IS NULL OR w.not_before <= now()) AS ready,
	count(*) FILTER (WHERE w.not_before > now()) AS delayed
	FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'enqueued') e
CROSS JOIN LATERAL (SELECT count(*) AS running
	FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'pending') r
ORDER BY q.name`, schema)
}
