package durable

// IsStopping reports whether Shutdown has begun: the runs in flight stop
// at their next step boundary from then on.
func (e *Engine) IsStopping() bool { return e.isStopping() }
