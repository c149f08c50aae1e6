package durable

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// The checks of Doctor (doctor.go), each adding its findings.

// tables: dead rows, vacuum lag and autovacuum of the schema's tables.
func (d *doctor) tables(ctx context.Context) error {
	rows, err := d.q.TableHealth(ctx, d.pool, d.schema)
	if err != nil {
		return fmt.Errorf("table statistics: %w", err)
	}
	for _, t := range rows {
		name := pgx.Identifier{d.schema, t.Table}.Sanitize() // for the SQL of the advice
		subject := d.schema + "." + t.Table
		if !t.Autovacuum {
			d.add(CheckAutovacuumOff, SeverityWarning, subject,
				fmt.Sprintf("ALTER TABLE %s RESET (autovacuum_enabled)", name),
				"autovacuum is off for %s: its dead rows are never reclaimed unless someone runs VACUUM", subject)
		}
		if t.Dead < int64(d.o.MinDeadTuples) {
			continue
		}
		share := float64(t.Dead) / float64(max(t.Live+t.Dead, 1))
		if share >= 0.2 {
			sev := SeverityWarning
			if share >= 0.5 {
				sev = SeverityCritical
			}
			d.add(CheckDeadTuples, sev, subject,
				fmt.Sprintf("vacuum cannot keep up or is held back: see the %s, %s and %s findings; run VACUUM (VERBOSE) %s; "+
					"on a busy install lower its threshold: ALTER TABLE %s SET (autovacuum_vacuum_scale_factor = 0.01)",
					CheckOldTransaction, CheckPreparedXact, CheckReplicationSlot, name, name),
				"%s holds %d dead rows, %.0f%% of its rows: scans and index lookups of the engine read them all", subject, t.Dead, 100*share)
		}
		if t.SinceVacuum == nil || *t.SinceVacuum > d.o.VacuumLag.Seconds() {
			when := "was never vacuumed"
			if t.SinceVacuum != nil {
				when = "was last vacuumed " + age(*t.SinceVacuum) + " ago"
			}
			d.add(CheckVacuumLag, SeverityWarning, subject,
				fmt.Sprintf("check that autovacuum runs (autovacuum = on, enough autovacuum_max_workers) and is not held back; run VACUUM (VERBOSE) %s", name),
				"%s %s and holds %d dead rows", subject, when, t.Dead)
		}
	}
	return nil
}

// horizon: what holds back vacuum in the database, and wraparound.
func (d *doctor) horizon(ctx context.Context) error {
	all, err := d.q.StatsVisibility(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("statistics visibility: %w", err)
	}
	if !all {
		d.add(CheckStatsHidden, SeverityInfo, "pg_stat_activity", "GRANT pg_monitor TO the role that runs durable doctor",
			"this role sees only its own sessions: an old transaction of another role that holds back vacuum is not reported")
	}
	holders, err := d.q.XminHolders(ctx, d.pool, sysdb.XminHoldersParams{OlderThan: d.o.OldTransaction, Limit: 5})
	if ok, err := d.readable(CheckOldTransaction, "pg_stat_activity", err); err != nil {
		return fmt.Errorf("old transactions: %w", err)
	} else if ok {
		for _, h := range holders {
			who := fmt.Sprintf("pid %d", h.PID)
			if h.User != "" || h.App != "" {
				who += fmt.Sprintf(" (%s)", strings.Trim(h.User+", "+h.App, ", "))
			}
			d.add(CheckOldTransaction, severityFor(h.Seconds, d.o.OldTransaction), who,
				fmt.Sprintf("find out what it is (its last statement: %q), then end it: SELECT pg_terminate_backend(%d); "+
					"set idle_in_transaction_session_timeout for the roles that leave transactions open", h.Query, h.PID),
				"a transaction open for %s (%s, %d transactions behind) holds back vacuum: no table of the database sheds the rows deleted or updated since it began",
				age(h.Seconds), h.State, h.XIDAge)
		}
	}
	prepared, err := d.q.PreparedXacts(ctx, d.pool, d.o.OldTransaction)
	if err != nil {
		return fmt.Errorf("prepared transactions: %w", err)
	}
	for _, p := range prepared {
		d.add(CheckPreparedXact, severityFor(p.Seconds, d.o.OldTransaction), p.GID,
			fmt.Sprintf("if its coordinator is gone for good: COMMIT PREPARED '%s' or ROLLBACK PREPARED '%s' (in database %s)",
				p.GID, p.GID, p.Database),
			"a transaction prepared %s ago by %s in database %s holds back vacuum and keeps its locks", age(p.Seconds), p.Owner, p.Database)
	}
	slots, err := d.q.ReplicationSlots(ctx, d.pool)
	if ok, err := d.readable(CheckReplicationSlot, "pg_replication_slots", err); err != nil {
		return fmt.Errorf("replication slots: %w", err)
	} else if ok {
		for _, s := range slots {
			switch {
			case !s.Active:
				d.add(CheckReplicationSlot, SeverityCritical, s.Name,
					fmt.Sprintf("if its consumer is gone for good: SELECT pg_drop_replication_slot('%s')", s.Name),
					"the inactive %s replication slot %s holds back vacuum (%d transactions behind) until a consumer reads from it",
					s.Type, s.Name, s.XIDAge)
			case s.XIDAge > 100_000_000:
				d.add(CheckReplicationSlot, SeverityWarning, s.Name, "check that its consumer keeps up (a standby with hot_standby_feedback, a logical subscriber)",
					"the replication slot %s holds back vacuum by %d transactions", s.Name, s.XIDAge)
			}
		}
	}
	xid, err := d.q.DatabaseXIDAge(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("transaction ID age: %w", err)
	}
	if xid.Age > 2*xid.FreezeMaxAge || xid.Age > 1_000_000_000 {
		sev := SeverityWarning
		if xid.Age > 1_000_000_000 {
			sev = SeverityCritical
		}
		d.add(CheckXIDWraparound, sev, "database",
			"end what holds back vacuum (the findings above), then VACUUM (FREEZE, VERBOSE) the oldest tables (ORDER BY age(relfrozenxid))",
			"the database's oldest unfrozen transaction ID is %d transactions old (autovacuum_freeze_max_age: %d); "+
				"at about 2,100,000,000 Postgres stops accepting writes", xid.Age, xid.FreezeMaxAge)
	}
	return nil
}

// runs: runs pending for long, unclaimed runs, queues that do not drain.
func (d *doctor) runs(ctx context.Context) error {
	long, err := d.q.LongPending(ctx, d.pool, sysdb.LongPendingParams{OlderThan: d.o.PendingAge, Limit: 1})
	if err != nil {
		return fmt.Errorf("long-pending runs: %w", err)
	}
	if len(long) > 0 {
		l := long[0]
		owner := "unowned"
		if l.ExecutorID != "" {
			owner = "on executor " + l.ExecutorID
		}
		d.add(CheckLongPending, SeverityWarning, l.ID,
			fmt.Sprintf("durable show %s: a step that never returns wants a StepOpts.Timeout; a workflow meant to run that long should park (Sleep, Recv) between its steps; cancel it if it is stuck (durable cancel %s)", l.ID, l.ID),
			"%s pending (running, not parked) for more than %s; the oldest, %s of workflow %s, for %s (%s)",
			count(l.Total, "run has been", "runs have been"), d.o.PendingAge, l.ID, l.Name, age(l.Seconds), owner)
	}
	stray, err := d.q.StrayRuns(ctx, d.pool, d.o.UnclaimedAge)
	if err != nil {
		return fmt.Errorf("unclaimed runs: %w", err)
	}
	if len(stray) > 0 {
		live, err := d.q.LiveVersions(ctx, d.pool)
		if err != nil {
			return fmt.Errorf("live executors: %w", err)
		}
		for _, s := range stray {
			check, what := CheckUnownedRuns, "unowned (handed back, forked or started in a transaction)"
			if s.Kind == "overdue" {
				check, what = CheckOverdueWakeups, "parked past their wake-up time"
			}
			what = map[bool]string{true: "has been ", false: "have been "}[s.Count == 1] + what
			d.add(check, severityFor(s.Seconds, d.o.UnclaimedAge), s.Name+" @ "+s.AppVersion, claimAdvice(live, s.AppVersion, s.Name),
				"%s of workflow %s (AppVersion %s) %s for up to %s, e.g. %s: no executor claims them",
				count(s.Count, "run", "runs"), s.Name, s.AppVersion, what, age(s.Seconds), s.ExampleID)
		}
	}
	backlog, err := d.q.QueueBacklog(ctx, d.pool, d.o.QueueWait)
	if err != nil {
		return fmt.Errorf("queue backlog: %w", err)
	}
	for _, b := range backlog {
		advice := "start more executors that declare the queue, or raise its limits (durable queues; Queue.Update)"
		if b.Paused {
			advice = "the queue is paused: durable queues resume " + b.Queue
		}
		d.add(CheckQueueBacklog, severityFor(b.Seconds, d.o.QueueWait), b.Queue, advice,
			"%s of queue %s ready to start for more than %s, the oldest for %s",
			count(b.Count, "run has been", "runs have been"), b.Queue, d.o.QueueWait, age(b.Seconds))
	}
	return nil
}

// claimAdvice says who could claim runs of workflow name at version v.
func claimAdvice(live []sysdb.LiveVersionRow, v, name string) string {
	var versions []string
	for _, l := range live {
		if l.AppVersion == v {
			return fmt.Sprintf("executors of AppVersion %s are live: check that they register workflow %s and look at their logs "+
				"(a sweeper that cannot claim, recovery slots all taken)", v, name)
		}
		versions = append(versions, l.AppVersion)
	}
	running := "no executor is live"
	if len(versions) > 0 {
		running = "the live executors run " + strings.Join(versions, ", ")
	}
	return fmt.Sprintf("start an executor of AppVersion %s that registers workflow %s (%s), or cancel the runs", v, name, running)
}

// executors: executors without a live lease that still own runs.
func (d *doctor) executors(ctx context.Context) error {
	dead, err := d.q.DeadExecutors(ctx, d.pool, d.o.LeaseGrace)
	if err != nil {
		return fmt.Errorf("executors: %w", err)
	}
	for _, e := range dead {
		if e.SinceExpiry == nil {
			d.add(CheckDeadExecutor, SeverityCritical, e.ID,
				"an executor of the runs' AppVersion takes them over only from an executor row whose lease expired: "+
					"resume them by hand (durable cancel, then durable resume), or find what deleted the row",
				"%s owned by executor %s, which has no row in the executors table", count(e.Owned, "pending run is", "pending runs are"), e.ID)
			continue
		}
		d.add(CheckDeadExecutor, severityFor(*e.SinceExpiry, d.o.LeaseGrace), e.ID,
			fmt.Sprintf("start an executor of AppVersion %s that registers their workflows: it takes them over "+
				"(or start %s again under the same Config.ExecutorID: it resumes them at Launch)", e.AppVersion, e.ID),
			"executor %s (host %s, pid %d, AppVersion %s) lost its lease %s ago and still owns %s, which no live executor took over",
			e.ID, e.Hostname, e.PID, e.AppVersion, age(*e.SinceExpiry), count(e.Owned, "pending run", "pending runs"))
	}
	return nil
}

// count is "1 one" or "n many".
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
