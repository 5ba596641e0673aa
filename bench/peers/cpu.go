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
// comm on this host, from /proc: the broker's (beam.smp) or Redis's
// (redis-server). USER_HZ is 100 on Linux.
func processCPU(comm string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("("+comm+")")) {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
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
