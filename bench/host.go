package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// hostInfo is what BENCHMARKS.md says of the machine and the software a
// run measured.
type hostInfo struct {
	cpu        string // model name, from /proc/cpuinfo
	cores      int    // logical CPUs
	memory     string // MemTotal, from /proc/meminfo
	kernel     string // from /proc/sys/kernel/osrelease
	gomaxprocs int
	goVersion  string // with GOOS/GOARCH
	rabbitMQ   string // the broker's own product and version, or why it is unknown
	amqp091    string // amqp091-go's version as built
	commit     string // queuey's commit, "+ changes" when the tree is dirty
}

// readHost gathers hostInfo; the broker at amqpURL is asked for its
// version.
func readHost(amqpURL string) hostInfo {
	return hostInfo{
		cpu:        cpuModel("/proc/cpuinfo"),
		cores:      runtime.NumCPU(),
		memory:     memTotal("/proc/meminfo"),
		kernel:     firstLine("/proc/sys/kernel/osrelease"),
		gomaxprocs: runtime.GOMAXPROCS(0),
		goVersion:  runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		rabbitMQ:   brokerVersion(amqpURL),
		amqp091:    moduleVersion("github.com/rabbitmq/amqp091-go"),
		commit:     gitCommit(),
	}
}

// cpuModel is the first "model name" of a /proc/cpuinfo file.
func cpuModel(path string) string {
	return procField(path, "model name")
}

// memTotal is a /proc/meminfo file's MemTotal, in GiB.
func memTotal(path string) string {
	f := strings.Fields(procField(path, "MemTotal"))
	if len(f) == 0 {
		return "unknown"
	}
	kb, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// procField is the value of the first "key: value" line of path whose key
// is key, or "unknown".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// firstLine is the first line of path, or "unknown".
func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// brokerVersion is what the broker says it is when a connection opens
// (the server properties product and version).
func brokerVersion(url string) string {
	conn, err := amqp.Dial(url)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer conn.Close()
	product, _ := conn.Properties["product"].(string)
	version, _ := conn.Properties["version"].(string)
	return strings.TrimSpace(product + " " + version)
}

// moduleVersion is the version of module this binary was built with, from
// its build info.
func moduleVersion(module string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			if d.Replace != nil {
				return d.Replace.Path + " " + d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// gitCommit is the short hash of HEAD of the tree this runs in, with
// "+ changes" when tracked files differ from it; "unknown" outside git.
// (go run stamps no VCS information into the binary.)
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		commit += " + changes"
	}
	return commit
}
