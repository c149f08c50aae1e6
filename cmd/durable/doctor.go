package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/durable-go/durable"
)

// exitProblems is the exit code of durable doctor when it found a
// warning or a critical problem (1 stays "could not run").
const exitProblems = 3

// problemsFound is durable doctor's outcome when it found problems: the
// report is printed, the exit code is exitProblems.
type problemsFound struct{ n int }

func (p *problemsFound) Error() string { return fmt.Sprintf("durable doctor: %d problems found", p.n) }

// cmdDoctor prints what endangers the install (durable.Doctor): one block
// per finding, worst first, or the report as JSON.
func cmdDoctor(ctx context.Context, c *cli, _ []string) error {
	report, err := durable.Doctor(ctx, c.pool, c.schema, nil)
	if err != nil {
		return err
	}
	if report.Findings == nil {
		report.Findings = []durable.Finding{} // [] rather than null in JSON
	}
	if c.asJSON {
		if err := c.json(report); err != nil {
			return err
		}
	} else {
		for _, f := range report.Findings {
			fmt.Fprintf(c.stdout, "%-8s  %s  %s\n  %s\n  what to do: %s\n\n", strings.ToUpper(string(f.Severity)), f.Check,
				cell(f.Subject), cell(f.Message), cell(f.Advice))
		}
		switch n := report.Problems(); n {
		case 0:
			fmt.Fprintf(c.stdout, "no problem found in schema %s\n", report.Schema)
		default:
			fmt.Fprintf(c.stdout, "%d problems found in schema %s\n", n, report.Schema)
		}
	}
	if n := report.Problems(); n > 0 {
		return &problemsFound{n: n}
	}
	return nil
}
