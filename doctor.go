package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/sysdb"
)

// Severity ranks a [Finding] of [Doctor].
type Severity string

// The severities of a finding. Warning and critical are problems.
const (
	// SeverityInfo: worth knowing, nothing to fix now.
	SeverityInfo Severity = "info"
	// SeverityWarning: a problem that grows if left alone.
	SeverityWarning Severity = "warning"
	// SeverityCritical: a problem that hurts the install now.
	SeverityCritical Severity = "critical"
)

// rank orders severities: info < warning < critical.
func (s Severity) rank() int {
	switch s {
	case SeverityWarning:
		return 1
	case SeverityCritical:
		return 2
	}
	return 0
}

// The checks of [Doctor], as [Finding].Check names them.
const (
	CheckDeadTuples      = "dead_tuples"          // a table of the schema is mostly dead rows
	CheckVacuumLag       = "vacuum_lag"           // dead rows pile up and no vacuum ran for long
	CheckAutovacuumOff   = "autovacuum_off"       // autovacuum is off for a table of the schema
	CheckOldTransaction  = "old_transaction"      // a session's old transaction holds back vacuum
	CheckPreparedXact    = "prepared_transaction" // a forgotten prepared transaction holds back vacuum
	CheckReplicationSlot = "replication_slot"     // a replication slot holds back vacuum
	CheckXIDWraparound   = "xid_wraparound"       // the database's oldest transaction ID is far behind
	CheckStatsHidden     = "stats_hidden"         // this role cannot see other roles' sessions
	CheckLongPending     = "long_pending"         // runs have been pending (not parked) for long
	CheckUnownedRuns     = "unowned_runs"         // runs no executor claims
	CheckOverdueWakeups  = "overdue_wakeups"      // parked runs past their wake-up time
	CheckQueueBacklog    = "queue_backlog"        // queued runs ready to start for long
	CheckDeadExecutor    = "dead_executor"        // an executor without a live lease owns runs
)

// Finding is one thing [Doctor] found.
type Finding struct {
	Check    string   `json:"check"`    // one of the Check constants
	Severity Severity `json:"severity"` // info, warning or critical
	Subject  string   `json:"subject"`  // the table, session, run, queue or executor concerned
	Message  string   `json:"message"`  // what is wrong, with figures
	Advice   string   `json:"advice"`   // what to do about it
}

// DoctorReport is what [Doctor] found, worst first.
type DoctorReport struct {
	Schema   string    `json:"schema"`
	Findings []Finding `json:"findings"`
}

// Problems returns how many findings are warnings or critical.
func (r DoctorReport) Problems() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity.rank() > 0 {
			n++
		}
	}
	return n
}

// Defaults of [DoctorOpts].
const (
	DoctorMinDeadTuplesDefault  = 10_000
	DoctorVacuumLagDefault      = time.Hour
	DoctorOldTransactionDefault = 5 * time.Minute
	DoctorPendingAgeDefault     = 24 * time.Hour
	DoctorUnclaimedAgeDefault   = 5 * time.Minute
	DoctorQueueWaitDefault      = time.Hour
	DoctorLeaseGraceDefault     = time.Minute
)

// DoctorOpts are the thresholds of [Doctor]. An age over ten times its
// threshold makes a finding critical.
type DoctorOpts struct {
	// MinDeadTuples: a table with fewer dead rows is not reported, whatever
	// their share. Defaults to DoctorMinDeadTuplesDefault.
	MinDeadTuples int
	// VacuumLag: dead rows over MinDeadTuples and no vacuum for this long.
	// Defaults to DoctorVacuumLagDefault.
	VacuumLag time.Duration
	// OldTransaction: a transaction (or prepared one) holding back vacuum
	// that began longer ago. Defaults to DoctorOldTransactionDefault.
	OldTransaction time.Duration
	// PendingAge: pending runs, not parked, created longer ago.
	// Defaults to DoctorPendingAgeDefault.
	PendingAge time.Duration
	// UnclaimedAge: runs left unowned, or parked past their wake-up time,
	// for longer. Defaults to DoctorUnclaimedAgeDefault.
	UnclaimedAge time.Duration
	// QueueWait: queued runs ready to start for longer.
	// Defaults to DoctorQueueWaitDefault.
	QueueWait time.Duration
	// LeaseGrace: executors whose lease expired longer ago and still own
	// runs. Defaults to DoctorLeaseGraceDefault.
	LeaseGrace time.Duration
}

func (o DoctorOpts) withDefaults() DoctorOpts {
	o.MinDeadTuples = cmp.Or(o.MinDeadTuples, DoctorMinDeadTuplesDefault)
	o.VacuumLag = cmp.Or(o.VacuumLag, DoctorVacuumLagDefault)
	o.OldTransaction = cmp.Or(o.OldTransaction, DoctorOldTransactionDefault)
	o.PendingAge = cmp.Or(o.PendingAge, DoctorPendingAgeDefault)
	o.UnclaimedAge = cmp.Or(o.UnclaimedAge, DoctorUnclaimedAgeDefault)
	o.QueueWait = cmp.Or(o.QueueWait, DoctorQueueWaitDefault)
	o.LeaseGrace = cmp.Or(o.LeaseGrace, DoctorLeaseGraceDefault)
	return o
}

func (o DoctorOpts) validate() error {
	bad := func(f string) error {
		return fmt.Errorf("%w: DoctorOpts.%s must not be negative", ErrInvalidArgument, f)
	}
	switch {
	case o.MinDeadTuples < 0:
		return bad("MinDeadTuples")
	case o.VacuumLag < 0:
		return bad("VacuumLag")
	case o.OldTransaction < 0:
		return bad("OldTransaction")
	case o.PendingAge < 0:
		return bad("PendingAge")
	case o.UnclaimedAge < 0:
		return bad("UnclaimedAge")
	case o.QueueWait < 0:
		return bad("QueueWait")
	case o.LeaseGrace < 0:
		return bad("LeaseGrace")
	}
	return nil
}

// Doctor reports what endangers a busy install in schema (SchemaDefault
// when empty): tables of the schema full of dead rows or not vacuumed,
// what holds back vacuum in the database (old transactions, prepared
// transactions, replication slots), how far the database is from
// transaction ID wraparound, runs pending for long, runs no executor
// claims, queues that do not drain, and executors without a live lease
// that still own runs. Each [Finding] says what to do. It only reads, a
// few statements on the server's statistics and on the live runs' indexes,
// and needs no engine; `durable doctor` prints it. opts may be nil.
//
// Sessions of other roles are visible to a role that is superuser or has
// pg_read_all_stats (pg_monitor has it); without it, a finding says so.
func Doctor(ctx context.Context, pool *pgxpool.Pool, schema string, opts *DoctorOpts) (DoctorReport, error) {
	schema = cmp.Or(schema, SchemaDefault)
	if !schemaNameRE.MatchString(schema) {
		return DoctorReport{}, fmt.Errorf("%w: schema %q must be a plain identifier", ErrInvalidArgument, schema)
	}
	var o DoctorOpts
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return DoctorReport{}, err
	}
	d := &doctor{q: sysdb.NewDoctorQueries(schema), pool: pool, schema: schema, o: o.withDefaults()}
	for _, check := range []func(ctx context.Context) error{d.tables, d.horizon, d.runs, d.executors} {
		if err := check(ctx); err != nil {
			return DoctorReport{}, fmt.Errorf("durable: doctor of schema %q: %w", schema, err)
		}
	}
	d.sort()
	return DoctorReport{Schema: schema, Findings: d.found}, nil
}

// doctor is one run of Doctor (doctor_checks.go).
type doctor struct {
	q      *sysdb.DoctorQueries
	pool   *pgxpool.Pool
	schema string
	o      DoctorOpts
	found  []Finding
}

func (d *doctor) add(check string, sev Severity, subject, advice, format string, args ...any) {
	d.found = append(d.found, Finding{Check: check, Severity: sev, Subject: subject, Message: fmt.Sprintf(format, args...), Advice: advice})
}

// sort orders the findings worst first, keeping the checks' order.
func (d *doctor) sort() {
	out := make([]Finding, 0, len(d.found))
	for rank := 2; rank >= 0; rank-- {
		for _, f := range d.found {
			if f.Severity.rank() == rank {
				out = append(out, f)
			}
		}
	}
	d.found = out
}

// readable reports whether err is a refusal to read a catalog or
// statistics view (SQLSTATE 42501), which the doctor reports and goes on.
func (d *doctor) readable(check, what string, err error) (bool, error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		d.add(check, SeverityWarning, what, "grant this role pg_monitor, or run durable doctor as a role that has it",
			"cannot read %s: %s", what, pgErr.Message)
		return false, nil
	}
	return err == nil, err
}

// age formats seconds as a duration rounded to the second.
func age(seconds float64) string {
	return (time.Duration(seconds * float64(time.Second))).Round(time.Second).String()
}

// severityFor is warning past limit, critical past ten times limit.
func severityFor(seconds float64, limit time.Duration) Severity {
	if seconds > 10*limit.Seconds() {
		return SeverityCritical
	}
	return SeverityWarning
}
