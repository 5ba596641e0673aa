package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// report is what -json writes: the run's load, the versions it was built
// with and ran against, and every system's figures per run. bench's
// -peers flag reads it (bench/peersfile.go holds the same shape) to write
// the peers' table of BENCHMARKS.md.
type report struct {
	Command     string            `json:"command"`
	Date        time.Time         `json:"date"`
	Go          string            `json:"go"`
	GOMAXPROCS  int               `json:"gomaxprocs"`
	N           int               `json:"n"`
	Publishers  int               `json:"publishers"`
	Concurrency int               `json:"concurrency"`
	Count       int               `json:"count"`
	Servers     map[string]string `json:"servers"` // server name → version it reported
	Systems     []systemResult    `json:"systems"`
}

// systemResult is one system's runs.
type systemResult struct {
	Name     string    `json:"name"`
	Module   string    `json:"module"`  // the client module it is built on
	Version  string    `json:"version"` // that module's version as built
	Note     string    `json:"note"`    // transport and durability
	Server   string    `json:"server"`  // the processes whose CPU per job is counted
	Rates    []float64 `json:"rates"`   // jobs/s, per run
	ServerUs []float64 `json:"server_us_per_job"`
	SelfUs   []float64 `json:"self_us_per_job"`
	Error    string    `json:"error,omitempty"` // why it failed, if it did
}

// newReport is a report of this run with no system yet.
func newReport(cfg benchConfig, count int) *report {
	return &report{
		Command:     "cd bench/peers && go run . " + strings.Join(os.Args[1:], " "),
		Date:        time.Now().UTC(),
		Go:          runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		N:           cfg.n,
		Publishers:  cfg.publishers,
		Concurrency: cfg.concurrency,
		Count:       count,
	}
}

// add records s's runs, or its failure.
func (r *report) add(s system, rates, serverUs, selfUs []float64, err error) {
	res := systemResult{Name: s.name, Module: s.module, Version: moduleVersion(s.module), Note: s.note,
		Server: s.server, Rates: rates, ServerUs: serverUs, SelfUs: selfUs}
	if err != nil {
		res.Error = err.Error()
	}
	r.Systems = append(r.Systems, res)
}

// write writes r as indented JSON to path.
func (r *report) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// moduleVersion is the version of module this binary was built with, from
// its build info: "(devel)" for the main module, "this tree" for a module
// replaced by a directory (queuey, by ../..).
func moduleVersion(module string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != module {
			continue
		}
		if d.Replace == nil {
			return d.Version
		}
		if isDirectory(d.Replace.Path) {
			return "this tree (replaced by " + d.Replace.Path + ")"
		}
		return d.Replace.Path + " " + d.Replace.Version
	}
	return "unknown"
}

// isDirectory tells a replacement by a directory ("../..") from one by a
// module path, as go.mod does: a directory starts with ./, ../ or /.
func isDirectory(path string) bool {
	return strings.HasPrefix(path, "./") || strings.HasPrefix(path, "../") || strings.HasPrefix(path, "/")
}
