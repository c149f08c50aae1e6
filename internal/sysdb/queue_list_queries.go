package sysdb

// queueCounts is the FROM items that count the runs of the queue named by
// the SQL expression name: e.ready and e.delayed (queued, ready now or
// later) and r.running (see running). Each count reads its runs from a
// partial index (queued: workflows_queue_claim_idx).
// One scan for status IN ('enqueued', 'pending') matched no index's
// predicate, and read the whole table, history included (~0.3-0.5 s per
// queue with 1,000,000 finished runs). Queue.Stats and ListQueues share it.
func queueCounts(name string) string {
	return `LATERAL (SELECT
	count(*) FILTER (WHERE w.not_before IS NULL OR w.not_before <= now()) AS ready,
	count(*) FILTER (WHERE w.not_before > now()) AS delayed
	FROM {{schema}}.workflows w WHERE w.queue_name = ` + name + ` AND w.status = 'enqueued') e
CROSS JOIN LATERAL (SELECT ` + running(name) + ` AS running) r`
}

// ListQueues renders the statement listing every declared queue of schema
// with its live settings and counts (queueCounts), by name. Columns: name,
// global_concurrency, worker_concurrency, partition_concurrency,
// rate_limit, rate_period_ms, paused, release_parked, ready, delayed,
// running.
func ListQueues(schema string) string {
	return Render(`SELECT q.name, q.global_concurrency, q.worker_concurrency, q.partition_concurrency,
	q.rate_limit, q.rate_period_ms, q.paused, q.release_parked, e.ready, e.delayed, r.running
FROM {{schema}}.queues q
CROSS JOIN `+queueCounts("q.name")+`
ORDER BY q.name`, schema)
}
