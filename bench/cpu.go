package main

import (
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/durable-go/durable/internal/proccpu"
)

// cpuSample is the CPU time used so far by each Postgres server process on
// this machine and by this process. The drains are CPU-bound on the
// machine's cores, so where a system's run costs CPU explains its rate.
type cpuSample struct {
	procs map[int]procCPU // every process named postgres, by PID
	self  time.Duration   // this process: the library under test, in-process
	ok    bool            // the server runs on this machine (its processes were found)
}

// procCPU is one server process: its kind (from its title) and CPU time.
type procCPU struct {
	kind string // "backend", "autovacuum" or "background" (WAL writer, checkpointer, ...)
	cpu  time.Duration
}

// serverKinds are the kinds of server process, in report order.
var serverKinds = []string{"backend", "autovacuum", "background"}

// sampleCPU samples every postgres process and this one.
func sampleCPU() cpuSample {
	s := cpuSample{procs: map[int]procCPU{}, self: proccpu.Self()}
	for pid, p := range proccpu.Postgres() {
		s.procs[pid] = procCPU{kind: processKind(p.Title), cpu: p.CPU}
		s.ok = true
	}
	return s
}

// processKind classifies a server process by its title: "postgres: user
// db host(port) idle" is a backend serving a client; the server's own
// processes name their role.
func processKind(title string) string {
	t := strings.TrimPrefix(strings.TrimRight(title, "\x00"), "postgres: ")
	switch {
	case strings.HasPrefix(t, "autovacuum worker"):
		return "autovacuum"
	case strings.HasPrefix(t, "checkpointer"), strings.HasPrefix(t, "background writer"),
		strings.HasPrefix(t, "walwriter"), strings.HasPrefix(t, "autovacuum launcher"),
		strings.HasPrefix(t, "logical replication launcher"), strings.HasPrefix(t, "logger"),
		strings.HasPrefix(t, "archiver"), strings.HasPrefix(t, "stats collector"),
		!strings.HasPrefix(title, "postgres: "):
		return "background" // the postmaster's title is its command line
	default:
		return "backend"
	}
}

// server is the CPU the server used between a and b, by kind of process:
// a process that started in between counts whole, one that ended in
// between is missed (its last sample is gone with it).
func (b cpuSample) server(a cpuSample) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, p := range b.procs {
		out[p.kind] += p.cpu - a.procs[pid].cpu
	}
	return out
}

// storeCPUPer stores the CPU used between a and b per item, in µs, as
// key_server_cpu_us (and by kind of server process, as
// key_server_<kind>_cpu_us) and key_self_cpu_us; nothing when the server
// is not on this machine.
func storeCPUPer(out map[string]float64, key string, a, b cpuSample, n int) {
	if !a.ok || !b.ok || n <= 0 {
		return
	}
	var total time.Duration
	by := b.server(a)
	for _, kind := range serverKinds {
		out[key+"_server_"+kind+"_cpu_us"] = us(by[kind]) / float64(n)
		total += by[kind]
	}
	out[key+"_server_cpu_us"] = us(total) / float64(n)
	out[key+"_self_cpu_us"] = us(b.self-a.self) / float64(n)
}

// startProfile starts a CPU profile of this process into file; stop ends
// it.
func startProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
