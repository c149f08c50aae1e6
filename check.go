package durable

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// CheckReplayTimeoutDefault is the default of CheckOpts.ReplayTimeout.
const CheckReplayTimeoutDefault = 10 * time.Second

// checkPage is how many runs Check lists at once.
const checkPage = 200

// CheckOpts select the runs [Check] replays.
type CheckOpts struct {
	// Workflows keeps the runs of these workflow names. Defaults to all.
	Workflows []string `json:"workflows,omitempty"`
	// AppVersions keeps the runs started under these application
	// versions. Defaults to the engine's Config.AppVersion: the runs an
	// executor of this build resumes (see Config.AppVersion).
	AppVersions []string `json:"app_versions,omitempty"`
	// AllVersions checks the runs of every application version instead,
	// e.g. to see whether the runs of an older version could move to this
	// one. Defaults to false.
	AllVersions bool `json:"all_versions,omitempty"`
	// ReplayTimeout bounds the replay of one run; a replay takes longer
	// only when the code blocks outside durable calls, which is reported
	// as a failure. Defaults to CheckReplayTimeoutDefault.
	ReplayTimeout time.Duration `json:"-"`
}

// ProblemKind says why the new code would stop a run.
type ProblemKind string

// Kinds of [CheckProblem].
const (
	// ProblemNonDeterminism: the code calls another step than the one
	// recorded at Pos; a resume fails the run with a [*NonDeterminismError].
	ProblemNonDeterminism ProblemKind = "nondeterminism"
	// ProblemUnregistered: the build registers no workflow of the run's
	// name, so no executor of it can resume the run.
	ProblemUnregistered ProblemKind = "unregistered"
	// ProblemFailure: replaying the recorded steps, the code fails the
	// run: a recorded value no longer decodes into its type
	// ([*DecodeError]), or the code returns an error or panics, or it
	// blocks outside durable calls past CheckOpts.ReplayTimeout.
	ProblemFailure ProblemKind = "failure"
)

// CheckProblem is an in-flight run the checked build would stop.
type CheckProblem struct {
	WorkflowID string      `json:"workflow_id"`
	Workflow   string      `json:"workflow"`
	AppVersion string      `json:"app_version"`
	Status     Status      `json:"status"`
	Kind       ProblemKind `json:"kind"`
	// Pos is the step position where the replay stopped (of the last
	// durable call the code made); -1 when it made none.
	Pos int `json:"pos"`
	// Recorded is the name of the step recorded at Pos, if any.
	Recorded string `json:"recorded,omitempty"`
	// Called is the step the new code calls at Pos instead, for a
	// ProblemNonDeterminism.
	Called string `json:"called,omitempty"`
	// Message describes the problem.
	Message string `json:"message"`
	// Err is the error a resume would fail the run with; nil for a
	// ProblemUnregistered. It is not part of the JSON form.
	Err error `json:"-"`
}

// CheckReport is what [Check] found.
type CheckReport struct {
	// AppVersions are the application versions checked; empty with
	// CheckOpts.AllVersions.
	AppVersions []string `json:"app_versions,omitempty"`
	// Workflows are the workflow names checked; empty for all.
	Workflows []string `json:"workflows,omitempty"`
	// Checked counts the in-flight runs looked at.
	Checked int `json:"checked"`
	// Problems are the runs the build would stop, newest first.
	Problems []CheckProblem `json:"problems"`
}

// OK reports whether the build resumes every run checked.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// Check replays the workflows registered on e, the code of the build about
// to be deployed, against every in-flight run (pending, queued or parked)
// in e's database that opts selects, as a resume would, and reports each
// run the build would stop: a non-determinism error, a recorded value the
// code can no longer decode, a failure of the code, or a workflow the build
// no longer registers. No step runs and nothing is written: the reads run
// in one read-only transaction, so the check works with a role that may
// only read the engine's tables, or on a hot standby. Call it before
// [Engine.Launch], or on an engine that is never launched (a launched one
// would resume the runs itself); [CheckFromEnv] is the hook for a
// program's main, and `durable check` runs it.
//
// A replay sees only what the recorded steps show: see docs/upgrades.md
// for what it cannot see.
func Check(ctx context.Context, e *Engine, opts *CheckOpts) (*CheckReport, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: Check needs an engine", ErrInvalidArgument)
	}
	var o CheckOpts
	if opts != nil {
		o = *opts
	}
	rep := &CheckReport{Workflows: o.Workflows, Problems: []CheckProblem{}}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if !o.AllVersions {
		rep.AppVersions = o.AppVersions
		if len(rep.AppVersions) == 0 {
			rep.AppVersions = []string{e.cfg.AppVersion}
		}
	}
	if o.ReplayTimeout == 0 {
		o.ReplayTimeout = CheckReplayTimeoutDefault
	}
	names := slices.Compact(slices.Sorted(slices.Values(o.Workflows))) // each listed once
	if len(names) == 0 {
		names = []string{""} // no filter
	}
	err := readOnly(ctx, e, pgx.ReadCommitted, func(tx pgx.Tx) error {
		for _, name := range names {
			f := sysdb.ListFilter{Statuses: []string{string(StatusPending), string(StatusEnqueued)}, Name: name, Limit: checkPage, Payloads: true}
			for {
				rows, err := e.iq.List(ctx, tx, f)
				if err != nil {
					return fmt.Errorf("list in-flight runs: %w", err)
				}
				if err := checkRuns(ctx, e, tx, rows, rep, &o); err != nil {
					return err
				}
				if len(rows) < f.Limit {
					break
				}
				last := rows[len(rows)-1]
				f.AfterAt, f.AfterID, f.HasAfter = last.CreatedAt, last.ID, true
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("durable: check: %w", err)
	}
	return rep, nil
}

func (o *CheckOpts) validate() error {
	for i, n := range o.Workflows {
		if err := checkName(fmt.Sprintf("CheckOpts.Workflows[%d]", i), n); err != nil {
			return err
		}
	}
	for i, v := range o.AppVersions {
		if err := checkName(fmt.Sprintf("CheckOpts.AppVersions[%d]", i), v); err != nil {
			return err
		}
	}
	switch {
	case o.AllVersions && len(o.AppVersions) > 0:
		return fmt.Errorf("%w: CheckOpts.AppVersions and AllVersions are both set; set one", ErrInvalidArgument)
	case o.ReplayTimeout < 0:
		return fmt.Errorf("%w: CheckOpts.ReplayTimeout must not be negative", ErrInvalidArgument)
	}
	return nil
}

// checkRuns replays the listed runs that rep's versions keep and adds
// what it finds to rep.
func checkRuns(ctx context.Context, e *Engine, tx pgx.Tx, rows []sysdb.RunRow, rep *CheckReport, o *CheckOpts) error {
	var load []sysdb.RunRow
	for _, row := range rows {
		if rep.AppVersions != nil && !slices.Contains(rep.AppVersions, row.AppVersion) {
			continue
		}
		rep.Checked++
		if registered(e, row.Name) == nil {
			rep.Problems = append(rep.Problems, problemOf(row, ProblemUnregistered, -1, "",
				fmt.Sprintf("workflow %q is not registered in this build: no executor of it can resume the run", row.Name)))
			continue
		}
		load = append(load, row)
	}
	for len(load) > 0 {
		ids := make([]string, len(load))
		for i, row := range load {
			ids[i] = row.ID
		}
		first, n, _, err := readWindows(ctx, e, tx, ids, 0)
		if err != nil {
			return fmt.Errorf("load recorded steps: %w", err)
		}
		for _, row := range load[:n] {
			// The replay reads the run's next windows in the check's
			// transaction. Its code runs on a goroutine of its own, which
			// can outlive checkRun (a replay that timed out): mu keeps its
			// reads from the transaction once checkRun returned.
			var (
				mu      sync.Mutex
				done    bool
				readErr error
			)
			hist := windowed(first[row.ID], func(from int) (window, error) {
				mu.Lock()
				defer mu.Unlock()
				if done {
					return window{}, errors.New("the check of this run is over")
				}
				w, err := readWindow(ctx, e, tx, row.ID, from)
				if err != nil {
					readErr = fmt.Errorf("load recorded steps of %q from position %d: %w", row.ID, from, err)
					return window{}, readErr
				}
				return w, nil
			}, nil)
			err := checkRun(ctx, e, row, hist, rep, o)
			mu.Lock()
			done = true
			err = cmp.Or(err, readErr)
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		load = load[n:]
	}
	return nil
}

// checkRun replays one run and adds its problem, if any, to rep.
func checkRun(ctx context.Context, e *Engine, row sysdb.RunRow, hist *recorded, rep *CheckReport, o *CheckOpts) error {
	rctx, cancel := context.WithTimeout(ctx, o.ReplayTimeout)
	defer cancel()
	out, err := replayHistory(rctx, e, registered(e, row.Name), row.ID, row.Input, hist, false)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		rep.Problems = append(rep.Problems, problemOf(row, ProblemFailure, -1, "",
			fmt.Sprintf("the replay did not end within %v: the code blocks outside durable calls", o.ReplayTimeout)))
		return nil
	case out.err == nil:
		return nil
	}
	var nd *NonDeterminismError
	if errors.As(out.err, &nd) {
		p := problemOf(row, ProblemNonDeterminism, nd.Pos, nd.Recorded, out.err.Error())
		p.Called, p.Err = nd.Called, out.err
		rep.Problems = append(rep.Problems, p)
		return nil
	}
	name := ""
	if s, err := hist.at(out.pos); err == nil && s != nil {
		name = s.name
	}
	p := problemOf(row, ProblemFailure, out.pos, name, out.err.Error())
	p.Err = out.err
	rep.Problems = append(rep.Problems, p)
	return nil
}

func problemOf(row sysdb.RunRow, kind ProblemKind, pos int, recorded, msg string) CheckProblem {
	return CheckProblem{WorkflowID: row.ID, Workflow: row.Name, AppVersion: row.AppVersion, Status: Status(row.Status),
		Kind: kind, Pos: pos, Recorded: recorded, Message: msg}
}

// CheckEnv is the environment variable that makes [CheckFromEnv] run a
// check: "1" for the default options, or a [CheckOpts] as JSON (its tags
// name the keys). `durable check` sets it for the program it runs.
const CheckEnv = "DURABLE_CHECK"

// CheckOutput is the line [CheckFromEnv] writes: the report, or why the
// check could not run. `durable check` reads it from the program's
// standard output.
type CheckOutput struct {
	// Version is 1; it tells the line from the program's other output.
	Version int          `json:"durable_check"`
	Report  *CheckReport `json:"report,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// CheckFromEnv runs [Check] when the environment variable CheckEnv is set,
// and does nothing otherwise (ran is false). It is the hook that lets
// `durable check -- ./app` check the build of a program: call it in main
// once the workflows are registered, before [Engine.Launch]:
//
//	if ran, code := durable.CheckFromEnv(ctx, eng, os.Stdout); ran {
//		os.Exit(code)
//	}
//
// It writes a [CheckOutput] to w as one line of JSON and returns the exit
// status for the program: 0 when the build resumes every run checked, 1
// when it would stop some, 2 when the check could not run.
func CheckFromEnv(ctx context.Context, e *Engine, w io.Writer) (ran bool, code int) {
	v := os.Getenv(CheckEnv)
	if v == "" {
		return false, 0
	}
	out := CheckOutput{Version: 1}
	var opts CheckOpts
	var err error
	if v != "1" {
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if derr := dec.Decode(&opts); derr != nil {
			err = fmt.Errorf("%w: %s: %v", ErrInvalidArgument, CheckEnv, derr)
		}
	}
	if err == nil {
		out.Report, err = Check(ctx, e, &opts)
	}
	switch {
	case err != nil:
		out.Error, code = err.Error(), 2
	case !out.Report.OK():
		code = 1
	}
	if werr := json.NewEncoder(w).Encode(out); werr != nil {
		code = 2
	}
	return true, code
}
