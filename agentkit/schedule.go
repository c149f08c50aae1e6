package agentkit

import (
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// Schedule runs agent a on a cron schedule (see durable.Schedule for spec,
// names and the exactly-once-per-tick guarantee), with the prompt built
// from each tick's scheduled time. prompt must be deterministic: every
// executor may call it for the same tick. Each run gets the agent's
// Limits; opts sets the schedule's Location, CatchUp and Queue (its Input
// and InputFunc must be unset). Declare schedules before Launch. Workflow
// code can read the tick with durable.ScheduledTime.
func Schedule(a *Agent, name, spec string, prompt func(tick time.Time) string, opts *durable.ScheduleOpts[Input]) error {
	if a == nil || prompt == nil {
		return fmt.Errorf("%w: agentkit.Schedule %q needs an agent and a prompt function", durable.ErrInvalidArgument, name)
	}
	var o durable.ScheduleOpts[Input]
	if opts != nil {
		o = *opts
	}
	if o.InputFunc != nil || o.Input.Prompt != "" || len(o.Input.Messages) > 0 {
		return fmt.Errorf("%w: agentkit.Schedule %q builds the input from prompt; leave ScheduleOpts.Input and InputFunc unset", durable.ErrInvalidArgument, name)
	}
	lim := a.cfg.Limits.resolved()
	o.Input = Input{}
	o.InputFunc = func(tick time.Time) Input {
		l := lim
		return Input{Prompt: prompt(tick), Limits: &l}
	}
	return durable.TrySchedule(a.wf, name, spec, &o)
}
