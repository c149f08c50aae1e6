// Package proccpu reads the CPU time used so far by this process and by
// the Postgres server processes on this machine, for the benchmarks: the
// drains are CPU-bound on a small machine, so where a run's CPU goes
// explains its rate.
package proccpu

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one server process: its title (its command line) and CPU time.
type Proc struct {
	Title string
	CPU   time.Duration
}

// Self is the CPU time this process used so far (user and system).
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Postgres is every process named postgres on this machine, by PID, from
// /proc/<pid>/schedstat (nanoseconds on the CPU), which is exact where
// /proc/<pid>/stat's clock ticks would add a tick of error per process.
// Empty when the server runs elsewhere.
func Postgres() map[int]Proc {
	out := map[int]Proc{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		st, err := os.ReadFile(dir + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		title, _ := os.ReadFile(dir + "/cmdline")
		out[pid] = Proc{Title: string(title), CPU: time.Duration(ns)}
	}
	return out
}

// PostgresTotal is the CPU time all of Postgres's processes on this
// machine have used so far (0 when the server runs elsewhere).
func PostgresTotal() (d time.Duration) {
	for _, p := range Postgres() {
		d += p.CPU
	}
	return d
}
