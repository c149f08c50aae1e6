package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/durable-go/durable"
)

// The check and history commands: docs/upgrades.md.

var checkCommand = &command{name: "check", args: "-- COMMAND [ARGS]",
	summary: "replay the in-flight runs against the build COMMAND runs (its main calls durable.CheckFromEnv) and list those it would stop",
	nargs:   [2]int{1, -1},
	flags: func(fs *flag.FlagSet, c *cli) {
		fs.StringVar(&c.f.name, "workflow", "", "check the runs of these workflow names only (comma-separated)")
		fs.StringVar(&c.f.appVersion, "app-version", "", `check the runs of these app versions (comma-separated; "*" for all; default: the build's own)`)
	}, run: cmdCheck}

var historyCommand = &command{name: "history", args: "export ID", summary: "write a run's recorded history as JSON, to replay with durabletest.ReplayFile",
	nargs: [2]int{2, 2}, run: cmdHistory}

// cmdCheck runs the build's program with durable.CheckEnv set and reports
// what its check found. The program needs no database flag from us: it
// connects as it does in production.
func cmdCheck(ctx context.Context, c *cli, args []string) error {
	var opts durable.CheckOpts
	opts.Workflows = splitList(c.f.name)
	switch v := strings.TrimSpace(c.f.appVersion); v {
	case "*":
		opts.AllVersions = true
	default:
		opts.AppVersions = splitList(v)
	}
	env, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), durable.CheckEnv+"="+string(env))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, c.stderr
	runErr := cmd.Run()
	out, found := findCheckOutput(stdout.Bytes(), c)
	switch {
	case !found && runErr != nil:
		return fmt.Errorf("durable: check: %s: %w, and it printed no check report: does its main call durable.CheckFromEnv before Launch?", args[0], runErr)
	case !found:
		return fmt.Errorf("durable: check: %s printed no check report: its main must call durable.CheckFromEnv before Launch (see docs/upgrades.md)", args[0])
	case out.Error != "":
		return fmt.Errorf("durable: check by %s failed: %s", args[0], out.Error)
	case out.Report == nil:
		return fmt.Errorf("durable: check: %s printed a check report without a report", args[0])
	}
	rep := out.Report
	if c.asJSON {
		if err := c.json(rep); err != nil {
			return err
		}
	} else if err := printCheck(c, rep); err != nil {
		return err
	}
	if !rep.OK() {
		return errProblems
	}
	return nil
}

// errProblems makes the exit status 1 once the report is printed.
var errProblems = errors.New("durable: check: the build would stop in-flight runs")

// findCheckOutput returns the last line of stdout that is a check report;
// the program's other lines go to stderr, so that stdout stays the report.
func findCheckOutput(stdout []byte, c *cli) (durable.CheckOutput, bool) {
	var out durable.CheckOutput
	found := false
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var o durable.CheckOutput
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.Version == 1 {
			out, found = o, true
			continue
		}
		fmt.Fprintln(c.stderr, sc.Text())
	}
	return out, found
}

func printCheck(c *cli, rep *durable.CheckReport) error {
	versions := "every app version"
	if len(rep.AppVersions) > 0 {
		versions = "app version " + strings.Join(rep.AppVersions, ", ")
	}
	workflows := ""
	if len(rep.Workflows) > 0 {
		workflows = " of " + strings.Join(rep.Workflows, ", ")
	}
	fmt.Fprintf(c.stdout, "checked %d in-flight runs%s of %s: ", rep.Checked, workflows, versions)
	if rep.OK() {
		fmt.Fprintln(c.stdout, "the build resumes them all")
		return nil
	}
	fmt.Fprintf(c.stdout, "the build would stop %d\n", len(rep.Problems))
	t := c.table("RUN", "WORKFLOW", "VERSION", "STEP", "PROBLEM", "DETAIL")
	for _, p := range rep.Problems {
		step := "-"
		if p.Pos >= 0 {
			step = strconv.Itoa(p.Pos)
		}
		detail := p.Message
		switch p.Kind {
		case durable.ProblemNonDeterminism:
			detail = fmt.Sprintf("recorded %q, the build calls %q", p.Recorded, p.Called)
		case durable.ProblemUnregistered:
			detail = "workflow not registered in the build"
		}
		t.row(p.WorkflowID, p.Workflow, p.AppVersion, step, string(p.Kind), clip(detail, 100))
	}
	return t.flush()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func cmdHistory(ctx context.Context, c *cli, args []string) error {
	if args[0] != "export" {
		return usagef("unknown history action %q (want: history export ID)", args[0])
	}
	err := durable.ExportHistory(ctx, c.eng, args[1], c.stdout)
	if errors.Is(err, durable.ErrInvalidArgument) {
		return usagef("%v", err)
	}
	return err
}
