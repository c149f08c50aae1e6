package durable

// markWaiting records that the run blocks in memory on topic, for
// WorkflowInfo.WaitTopic. It is called only once a Recv found no message,
// off the path of a message that is already there. A failure only costs
// the listing its topic, so it is logged, not returned.
func (r *run) markWaiting(topic string) {
	if _, err := r.e.pool.Exec(r.e.hardCtx, r.e.wq.SetWaitTopic, r.id, r.epoch, topic); err != nil {
		r.e.log.Warn("durable: record wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}

// unmarkWaiting clears what markWaiting recorded once the wait is over.
func (r *run) unmarkWaiting(topic string) {
	if _, err := r.e.pool.Exec(r.e.hardCtx, r.e.wq.ClearWaitTopic, r.id, r.epoch, topic); err != nil {
		r.e.log.Warn("durable: clear wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}
