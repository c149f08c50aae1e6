// Package callbacks has the callbacks that must be deterministic.
package callbacks

import (
	"context"
	"math/rand"
	"os"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
)

func schedules(wf *durable.Workflow[string, string]) {
	durable.Schedule(wf, "nightly", "0 3 * * *", &durable.ScheduleOpts[string]{
		InputFunc: func(tick time.Time) string {
			return tick.Format(time.DateOnly) + os.Getenv("SUFFIX") // want `os.Getenv in ScheduleOpts.InputFunc \(which must be deterministic\) may read another value`
		},
	})
	durable.Schedule(wf, "daily", "0 9 * * *", &durable.ScheduleOpts[string]{
		InputFunc: func(tick time.Time) string { return tick.Format(time.DateOnly) },
	})
}

func agents(e *durable.Engine, m agentkit.Model) error {
	refund := agentkit.StepTool("refund", "Refund an order.", nil, func(ctx context.Context, args struct{ Cents int }) (string, error) {
		return time.Now().String(), nil // a tool runs as a step
	}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{
		When: func(call agentkit.ToolCall) bool {
			return rand.Intn(2) == 0 // want `rand.Intn in ApprovalPolicy.When \(which must be deterministic\)`
		},
	}})
	a := agentkit.Define(e, "support", agentkit.AgentConfig{Model: m, Tools: []*agentkit.Tool{refund}})
	if err := agentkit.Schedule(a, "digest", "0 9 * * *", digestPrompt, nil); err != nil {
		return err
	}
	return agentkit.Schedule(a, "report", "0 9 * * *", func(tick time.Time) string { return "Report for " + tick.Format(time.DateOnly) }, nil)
}

func digestPrompt(tick time.Time) string {
	return "Summarise the day before " + time.Now().Format(time.DateOnly) // want `time.Now in the prompt function of agentkit.Schedule \(which must be deterministic\)`
}
