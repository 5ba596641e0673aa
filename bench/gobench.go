package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A small reader of `go test -bench` output, in the Go benchmark data
// format (golang.org/x/perf/benchfmt reads it too, but bench is in the
// library's module, whose go.mod gains nothing for it): configuration
// lines "key: value", and result lines
//
//	BenchmarkName-4   60000   19821 ns/op   0.88 inst/plain   ...
//
// of a name (with a -GOMAXPROCS suffix), an iteration count and pairs of
// value and unit. Everything else (PASS, ok, test output) is skipped.

// benchResult is one result line.
type benchResult struct {
	name    string // without "Benchmark" and the -GOMAXPROCS suffix, e.g. "SDKFloor/sampled-10pct"
	procs   int    // the suffix; 0 when absent
	iters   int
	metrics []benchMetric
	pkg     string // the "pkg" configuration in force
}

// benchMetric is one value and its unit.
type benchMetric struct {
	value float64
	unit  string
}

// benchFile is a parsed file of results.
type benchFile struct {
	config  map[string]string // first value of each configuration key (goos, cpu, command, ...)
	keys    []string          // the configuration keys, in order of first appearance
	results []benchResult
}

// configLine is a configuration line: a key that starts with a lower-case
// letter and holds no space, a colon, a value.
var configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)

// readBenchFile parses the file at path.
func readBenchFile(path string) (*benchFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseBench(f)
}

// parseBench parses benchmark output; it fails if a line that starts
// like a result is not one, or if there is no result at all.
func parseBench(r io.Reader) (*benchFile, error) {
	out := &benchFile{config: map[string]string{}}
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := configLine.FindStringSubmatch(line); m != nil {
			out.setConfig(m[1], m[2])
			if m[1] == "pkg" {
				pkg = m[2]
			}
			continue
		}
		if !isResultLine(line) {
			continue
		}
		res, err := parseResult(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		res.pkg = pkg
		out.results = append(out.results, res)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out.results) == 0 {
		return nil, fmt.Errorf("no benchmark result in the input")
	}
	return out, nil
}

// setConfig keeps the first value of key.
func (f *benchFile) setConfig(key, value string) {
	if _, ok := f.config[key]; ok {
		return
	}
	f.config[key] = value
	f.keys = append(f.keys, key)
}

// isResultLine: "Benchmark" followed by an upper-case letter, digit or
// nothing, then white space and more.
func isResultLine(line string) bool {
	rest, ok := strings.CutPrefix(line, "Benchmark")
	if !ok {
		return false
	}
	name, _, ok := strings.Cut(rest, "\t")
	if !ok {
		name, _, ok = strings.Cut(rest, " ")
	}
	if !ok || (name != "" && unicode.IsLower(rune(name[0]))) {
		return false
	}
	return true
}

// parseResult parses one result line.
func parseResult(line string) (benchResult, error) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return benchResult{}, fmt.Errorf("want a name, an iteration count and value-unit pairs: %q", line)
	}
	iters, err := strconv.Atoi(f[1])
	if err != nil {
		return benchResult{}, fmt.Errorf("iteration count %q: %w", f[1], err)
	}
	res := benchResult{iters: iters}
	res.name, res.procs = splitProcs(strings.TrimPrefix(f[0], "Benchmark"))
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return benchResult{}, fmt.Errorf("value %q of %s: %w", f[i], f[i+1], err)
		}
		res.metrics = append(res.metrics, benchMetric{value: v, unit: f[i+1]})
	}
	return res, nil
}

// splitProcs splits "Name/sub-4" into "Name/sub" and 4.
func splitProcs(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name, 0
	}
	p, err := strconv.Atoi(name[i+1:])
	if err != nil || p <= 0 {
		return name, 0
	}
	return name[:i], p
}

// top is the benchmark a sub-benchmark belongs to: "SDKFloor" of
// "SDKFloor/sampled-10pct".
func (r benchResult) top() string {
	t, _, _ := strings.Cut(r.name, "/")
	return t
}

// sub is the rest of the name after top, or top itself for a benchmark
// without sub-benchmarks.
func (r benchResult) sub() string {
	if _, s, ok := strings.Cut(r.name, "/"); ok {
		return s
	}
	return r.name
}

// value is r's value in unit, if r reports it.
func (r benchResult) value(unit string) (float64, bool) {
	for _, m := range r.metrics {
		if m.unit == unit {
			return m.value, true
		}
	}
	return 0, false
}

// isRatioUnit tells a unit that is a ratio of two sides (inst/plain,
// hooks/floor-by-cpu) from a quantity per something (ns/op, jobs/s,
// B/job, +allocs/job).
func isRatioUnit(unit string) bool {
	_, per, ok := strings.Cut(unit, "/")
	if !ok {
		return false
	}
	switch per {
	case "op", "s", "job":
		return false
	}
	return true
}
