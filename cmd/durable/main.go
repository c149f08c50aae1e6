// Command durable operates the durable workflows stored in a Postgres
// schema: migrate it, list and inspect runs, cancel, resume and fork them,
// send messages and approve pending tool calls, look at queues and
// schedules, prune old runs, and serve the dashboard (durable ui).
//
//	durable [flags] <command> [flags] [arguments]
//
// Every command takes --database-url (default $DATABASE_URL), --schema
// (default "durable") and --json (machine-readable output), before or after
// the command name. Exit status: 0 on success, 1 on an error, 2 on a usage
// error (and 3 when durable doctor finds a problem). Run "durable help" for
// the list of commands.
//
// Install it with
//
//	go install github.com/durable-go/durable/cmd/durable@latest
//
// or run it from a checkout of the repository with "go run ./cmd/durable".
//
// The command works on the database only: it starts no workers and
// recovers nothing, so it is safe to run next to live executors.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/dashboard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	flags   func(fs *flag.FlagSet, c *cli) // declares the command's own flags
	nargs   [2]int                         // min, max positional arguments (max -1: any)
	run     func(ctx context.Context, c *cli, args []string) error
}

// cli is the state of one invocation.
type cli struct {
	stdout, stderr io.Writer
	dbURL          string
	schema         string
	asJSON         bool
	pool           *pgxpool.Pool
	eng            *durable.Engine
	// command flags
	f flags
}

// flags holds every command's flags; each command declares the ones it uses.
type flags struct {
	printSQL        bool
	statuses        string
	name, queue     string
	idPrefix        string
	parent          string
	tags            map[string]string
	since           string
	limit           int
	cursor          string
	children        bool
	compensate      bool
	retryFailedStep bool
	fromStep        int
	newID           string
	appVersion      string
	idemKey         string
	by, reason      string
	editArgs        string
	tick            string
	olderThan       time.Duration
	batch           int
	maxRuns         int
	addr, token     string
	readOnly        bool
	allowedHosts    []string
	secureCookies   bool
}

var commands = []*command{
	{name: "migrate", summary: "apply the schema migrations (--print-sql: print the script instead)", nargs: [2]int{0, 0},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&c.f.printSQL, "print-sql", false, "print the migration script for a DBA instead of applying it")
		}, run: cmdMigrate},
	{name: "list", summary: "list runs, newest first", nargs: [2]int{0, 0},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.statuses, "status", "", "keep runs in these statuses (comma-separated: enqueued,pending,success,error,cancelled,dead)")
			fs.StringVar(&c.f.name, "name", "", "keep runs of this workflow name")
			fs.StringVar(&c.f.queue, "queue", "", "keep runs of this queue")
			fs.StringVar(&c.f.idPrefix, "id-prefix", "", "keep runs whose ID starts with this")
			fs.StringVar(&c.f.parent, "parent", "", "keep the child runs of this run ID")
			fs.Func("tag", "keep runs with this tag, as key=value (repeat: runs with all of them)", c.f.addTag)
			fs.StringVar(&c.f.since, "since", "", "keep runs created since this duration ago (24h) or time (RFC 3339)")
			fs.IntVar(&c.f.limit, "limit", 50, fmt.Sprintf("at most this many runs (1..%d)", durable.ListLimitMax))
			fs.StringVar(&c.f.cursor, "cursor", "", "continue a listing from the cursor a previous page printed")
		}, run: cmdList},
	{name: "show", args: "ID", summary: "show one run and its step timeline", nargs: [2]int{1, 1}, run: cmdShow},
	{name: "cancel", args: "ID", summary: "cancel a run (queued, running, sleeping or waiting)", nargs: [2]int{1, 1},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&c.f.children, "children", false, "also cancel its child runs, recursively")
			fs.BoolVar(&c.f.compensate, "compensate", false, "run the compensations it registered before it ends")
		}, run: cmdCancel},
	{name: "resume", args: "ID", summary: "resume a cancelled, failed or dead run from its last checkpoint", nargs: [2]int{1, 1},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.BoolVar(&c.f.retryFailedStep, "retry-failed-step", false, "run its last step again if it recorded a failure")
		}, run: cmdResume},
	{name: "fork", args: "ID", summary: "start a new run with the input of ID, reusing its steps before --from-step", nargs: [2]int{1, 1},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.IntVar(&c.f.fromStep, "from-step", -1, "first step position to run again (required; 0 reruns everything)")
			fs.StringVar(&c.f.newID, "id", "", "ID of the new run (default: a new UUIDv7)")
			fs.StringVar(&c.f.appVersion, "app-version", "", "application version of the new run (default: the forked run's)")
		}, run: cmdFork},
	{name: "send", args: "ID TOPIC JSON", summary: "send a message (a JSON value) to a run on a topic", nargs: [2]int{3, 3},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.idemKey, "idempotency-key", "", "deliver once however often the command is retried")
		}, run: cmdSend},
	{name: "approvals", args: "ID", summary: "list the tool calls of an agent run waiting for approval", nargs: [2]int{1, 1}, run: cmdApprovals},
	{name: "approve", args: "ID [CALL]", summary: "approve a pending tool call (CALL may be left out when only one is pending)", nargs: [2]int{1, 2},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.by, "by", defaultApprover(), "approver's name, for the record")
			fs.StringVar(&c.f.editArgs, "args", "", "approve with these arguments (JSON) instead of the proposed ones")
		}, run: cmdApprove},
	{name: "deny", args: "ID [CALL]", summary: "deny a pending tool call", nargs: [2]int{1, 2},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.by, "by", defaultApprover(), "approver's name, for the record")
			fs.StringVar(&c.f.reason, "reason", "", "reason shown to the model")
		}, run: cmdDeny},
	{name: "queues", args: "[pause|resume|partitions NAME]", summary: "list queues with depth, running count and limits; pause or resume one; list a queue's busiest partition keys", nargs: [2]int{0, 2}, run: cmdQueues},
	{name: "schedules", args: "[pause|resume|trigger NAME]", summary: "list schedules; pause, resume or trigger one", nargs: [2]int{0, 2},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.tick, "tick", "", "trigger: the tick the run gets (RFC 3339; default now)")
		}, run: cmdSchedules},
	{name: "prune", summary: "delete runs finished longer ago than --older-than, with their steps, messages and streams (and agentkit blobs no run refers to)", nargs: [2]int{0, 0},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.DurationVar(&c.f.olderThan, "older-than", 0, "delete runs finished longer ago than this (required, e.g. 720h)")
			fs.IntVar(&c.f.batch, "batch", durable.PruneBatchDefault, fmt.Sprintf("runs deleted per transaction (1..%d)", durable.PruneBatchMax))
			fs.IntVar(&c.f.maxRuns, "max", 0, "stop after this many runs (0: no bound)")
		}, run: cmdPrune},
	{name: "doctor", summary: "report what endangers the install: dead rows, vacuum held back, stuck runs, dead executors (exit 3 on a problem)", nargs: [2]int{0, 0}, run: cmdDoctor},
	{name: "ui", summary: "serve the dashboard (runs, step timelines, approvals, queues, schedules) until interrupted", nargs: [2]int{0, 0},
		flags: func(fs *flag.FlagSet, c *cli) {
			fs.StringVar(&c.f.addr, "addr", dashboard.DefaultAddr, "address to listen on; one that is not loopback needs a token")
			fs.StringVar(&c.f.token, "token", "", "access token (default $DURABLE_UI_TOKEN, else a random one, printed once)")
			fs.BoolVar(&c.f.readOnly, "read-only", false, "show no action buttons")
			fs.Func("allowed-host", "a further name the dashboard answers to in the Host header, e.g. its public name behind a proxy (repeat or comma-separate; \"name\" or \"name:port\")", func(s string) error {
				for _, h := range strings.Split(s, ",") {
					if h = strings.TrimSpace(h); h != "" {
						c.f.allowedHosts = append(c.f.allowedHosts, h)
					}
				}
				return nil
			})
			fs.BoolVar(&c.f.secureCookies, "secure-cookies", false, "mark the login cookies Secure, behind a proxy that terminates TLS")
		}, run: cmdUI},
	checkCommand, historyCommand, // check.go
}

// addTag adds a --tag key=value to the tags a listing keeps.
func (f *flags) addTag(s string) error {
	key, value, ok := strings.Cut(s, "=")
	switch {
	case !ok || key == "" || value == "":
		return fmt.Errorf("want key=value, got %q", s)
	case f.tags[key] != "":
		return fmt.Errorf("key %q given twice: a run has one value per key", key)
	}
	if f.tags == nil {
		f.tags = map[string]string{}
	}
	f.tags[key] = value
	return nil
}

func defaultApprover() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: durable [flags] <command> [flags] [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %-28s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, `
flags of every command (before or after it):
  --database-url URL   Postgres URL (default $DATABASE_URL)
  --schema NAME        schema of the durable tables (default %q)
  --json               machine-readable output

"durable <command> -h" shows a command's flags.
`, durable.SchemaDefault)
}

// globalFlags declares the flags every command takes on fs.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.dbURL, "database-url", "", "Postgres URL (default $DATABASE_URL)")
	fs.StringVar(&c.schema, "schema", durable.SchemaDefault, "schema of the durable tables")
	fs.BoolVar(&c.asJSON, "json", false, "machine-readable output")
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The flags every command takes may also come before the command
	// ("durable --schema x list"): parse those first, and hand their values
	// to the command's own flag set below.
	var pre cli
	gfs := flag.NewFlagSet("durable", flag.ContinueOnError)
	gfs.SetOutput(stderr)
	pre.globalFlags(gfs)
	gfs.Usage = func() { usage(stderr) }
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		return exitUsage // the flag package printed the problem, then the usage
	}
	args = gfs.Args()
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if args[0] == "help" {
		usage(stdout)
		return exitOK
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "durable: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	c := &cli{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("durable "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs, c)
	}
	var setErr error
	gfs.Visit(func(f *flag.Flag) { setErr = cmp.Or(setErr, fs.Set(f.Name, f.Value.String())) })
	if setErr != nil {
		fmt.Fprintf(stderr, "durable: %v\n", setErr)
		return exitUsage
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: durable %s [flags] %s\n  %s\n\nflags:\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage // the flag package printed the problem and the usage
	}
	if len(pos) < cmd.nargs[0] || (cmd.nargs[1] >= 0 && len(pos) > cmd.nargs[1]) {
		fmt.Fprintf(stderr, "durable %s: wrong number of arguments\n", cmd.name)
		fs.Usage()
		return exitUsage
	}
	if c.dbURL == "" {
		c.dbURL = os.Getenv("DATABASE_URL")
	}
	err = c.exec(ctx, cmd, pos)
	var ue *usageError
	var pf *problemsFound
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &pf): // the report says what
		return exitProblems
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "durable %s: %s\n", cmd.name, ue.msg)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s\n", describe(err, c.schema))
		return exitError
	}
}

// parseInterleaved parses flags placed before, between and after the
// positional arguments ("show ID --json"); everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos, tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return append(pos, tail...), nil
}

func (c *cli) exec(ctx context.Context, cmd *command, args []string) error {
	if (cmd.name == "migrate" && c.f.printSQL) || cmd == checkCommand {
		return cmd.run(ctx, c, args) // no database needed (check: the build's program connects)
	}
	if c.dbURL == "" {
		return usagef("no database: set --database-url or DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return usagef("bad --database-url: %v", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("durable: connect: %w", err)
	}
	defer pool.Close()
	c.pool = pool
	// An engine that is never launched: no recovery, no workers, no
	// lease. Its logs would only be noise on a terminal.
	c.eng, err = durable.New(pool, &durable.Config{
		Schema: c.schema,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		if errors.Is(err, durable.ErrInvalidArgument) {
			return usagef("%v", err)
		}
		return err
	}
	return cmd.run(ctx, c, args)
}

// describe turns an error into the line printed on stderr, with a hint
// for the common mistakes.
func describe(err error, schema string) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "durable") {
		msg = "durable: " + msg
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		// undefined_table, invalid_schema_name
		msg += fmt.Sprintf("\nhint: schema %q has no durable tables: check --schema, or run \"durable migrate\"", schema)
	case errors.Is(err, durable.ErrWorkflowNotFound):
		msg += "\nhint: \"durable list --id-prefix ...\" finds runs by the start of their ID"
	}
	return msg
}

// parseSince reads --since: a duration before now or a time.
func parseSince(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usagef("--since %q must not be negative", s)
		}
		return time.Now().Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("--since %q is neither a duration (24h) nor a time (2026-11-29T10:00:00Z)", s)
}

func parseStatuses(s string) ([]durable.Status, error) {
	if s == "" {
		return nil, nil
	}
	var out []durable.Status
	for _, p := range strings.Split(s, ",") {
		st := durable.Status(strings.TrimSpace(p))
		switch st {
		case durable.StatusEnqueued, durable.StatusPending, durable.StatusSuccess, durable.StatusError,
			durable.StatusCancelled, durable.StatusDead:
			out = append(out, st)
		default:
			return nil, usagef("--status: unknown status %q (want enqueued, pending, success, error, cancelled or dead)", p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
