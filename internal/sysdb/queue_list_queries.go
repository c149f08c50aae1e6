package sysdb

// queueCounts is the FROM items that count the runs of the queue named by
// the SQL expression name: e.ready and e.delayed (queued, ready now or
// later) and r.running (see running). Each count reads its runs from a
// partial index (queued: workflows_queue_claim_idx): one scan for status
// IN ('enqueued', 'pending') matches no index's predicate and reads the
// whole table, history included. Stats and List share it.
func queueCounts(name string) string {
	return `LATERAL (SELECT
	count(*) FILTER (WHERE w.not_before IS NULL OR w.not_before <= now()) AS ready,
	count(*) FILTER (WHERE w.not_before > now()) AS delayed
	FROM {{schema}}.workflows w WHERE w.queue_name = ` + name + ` AND w.status = 'enqueued') e
CROSS JOIN LATERAL (SELECT ` + running(name) + ` AS running) r`
}

// listQueues lists every declared queue with its live settings and counts
// (queueCounts), by name.
var listQueues = `SELECT q.name, ` + settingsColumns + `, q.paused, e.ready, e.delayed, r.running
FROM {{schema}}.queues q
CROSS JOIN ` + queueCounts("q.name") + `
ORDER BY q.name`
