package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU sums the CPU time (user and system) of every process named
// comm on this host, from /proc: the broker's (beam.smp), Redis's
// (redis-server) or PostgreSQL's (postgres: the postmaster, its background
// processes and a backend per connection). USER_HZ is 100 on Linux.
//
// For postgres it adds the CPU time of the children each process has
// reaped (cutime and cstime): a backend whose connection closes before the
// second reading (river's pool is closed at the end of each run), or an
// autovacuum worker that came and went, leaves /proc, and the postmaster,
// which waits for it, holds its time from then on. Until then it is a
// zombie whose own line still counts, so no time is lost or counted twice.
func processCPU(comm string) time.Duration {
	withReaped := comm == "postgres"
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("("+comm+")")) {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		if withReaped {
			cu, _ := strconv.ParseInt(f[13], 10, 64)
			cs, _ := strconv.ParseInt(f[14], 10, 64)
			u, s = u+cu, s+cs
		}
		total += time.Duration(u+s) * time.Second / 100
	}
	return total
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
