package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the CPU time used so far by the Postgres server processes
// on this machine and by this process. The drains are CPU-bound on the
// machine's cores, so where a system's run costs CPU explains its rate.
type cpuSample struct {
	server time.Duration // every process named postgres: the server's backends and background processes
	self   time.Duration // this process: the library under test, in-process
	ok     bool          // the server runs on this machine (its processes were found)
}

// sampleCPU reads /proc/<pid>/schedstat (nanoseconds on the CPU) of every
// postgres process, which is exact where /proc/<pid>/stat's clock ticks
// would add up a tick of error per process, and getrusage for this one.
func sampleCPU() cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return s
	}
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		st, err := os.ReadFile("/proc/" + pid + "/schedstat")
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
		s.server += time.Duration(ns)
		s.ok = true
	}
	return s
}

// storeCPUPer stores the CPU used between a and b per item, in µs, as
// key_server_cpu_us and key_self_cpu_us; nothing when the server is not
// on this machine. Processes that ended in between are not counted.
func storeCPUPer(out map[string]float64, key string, a, b cpuSample, n int) {
	if !a.ok || !b.ok || n <= 0 {
		return
	}
	out[key+"_server_cpu_us"] = us(b.server-a.server) / float64(n)
	out[key+"_self_cpu_us"] = us(b.self-a.self) / float64(n)
}
