package durable

// scheduler runs cron schedules; see issue 5. Placeholder until then.
type scheduler struct{}

// startSchedules starts the schedule loop, if any schedule is registered.
func (e *Engine) startSchedules() {}

// stopSchedules stops the schedule loop.
func (e *Engine) stopSchedules() {}
