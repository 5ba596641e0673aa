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

// cpuTimes is the CPU time, user and system, the broker's process and this
// process have used so far.
type cpuTimes struct {
	broker, self time.Duration
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on Linux, whatever the kernel's own tick).
const clockTicks = 100

// readCPU reads both processes' CPU times; broker is 0 when no broker
// process (beam.smp) runs on this host.
func readCPU() cpuTimes {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuTimes{broker: brokerCPU(), self: self}
}

// brokerCPU sums the CPU time of every beam.smp process (the RabbitMQ node
// on this host), from /proc.
func brokerCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("(beam.smp)")) {
			continue
		}
		// Fields after the command's closing parenthesis: state is the
		// first, utime the 12th and stime the 13th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * time.Second / clockTicks
	}
	return total
}

// perJob is the CPU time used since start, per job, in microseconds.
func (start cpuTimes) perJob(jobs int) (brokerUs, selfUs float64) {
	now := readCPU()
	return float64(now.broker-start.broker) / float64(time.Microsecond) / float64(jobs),
		float64(now.self-start.self) / float64(time.Microsecond) / float64(jobs)
}

// quietBroker waits, for up to 10 s, until the broker uses less than 5 %
// of a core over 200 ms. A run that deleted its queue leaves the broker
// cleaning up after it (20,000 persistent messages), which would slow
// whichever run comes next; each run starts on a quiet broker instead.
func quietBroker() {
	const window, busy = 200 * time.Millisecond, 10 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		before := brokerCPU()
		time.Sleep(window)
		if brokerCPU()-before < busy {
			return
		}
	}
}
