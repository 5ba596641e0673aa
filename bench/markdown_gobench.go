package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// goBenchHeading is the heading of the Go benchmarks' section.
const goBenchHeading = "Go benchmarks"

// benchGoal is a goal on one metric of one Go benchmark, with the two
// sides the ratio is of (for the README's summary).
type benchGoal struct {
	name     string // the benchmark, without "Benchmark" and the -GOMAXPROCS suffix
	unit     string // the ratio it is on
	libUnit  string // queuey's side
	baseUnit string // the baseline's side
	what     string
	atLeast  bool // the goal is a floor (else a ceiling)
	goal     float64
}

// benchGoals are the tracing benchmarks' goals (trace/bench_test.go and
// trace/floor_test.go): the instrumented pipeline keeps 0.9 of plain
// throughput at 10 % sampling, and the package's hooks cost at most 1.25
// times the bare OpenTelemetry calls they make.
var benchGoals = []benchGoal{
	{name: "Instrumentation/work50us/sampled-10pct", unit: "inst/plain", libUnit: "inst-jobs/s", baseUnit: "plain-jobs/s",
		what: "tracing, 50 µs handler, 10 % sampled: jobs/s instrumented vs plain", atLeast: true, goal: 0.9},
	{name: "SDKFloor/sampled-10pct", unit: "hooks/floor", libUnit: "hooks-ns/job", baseUnit: "floor-ns/job",
		what: "tracing's hooks vs the bare OpenTelemetry calls, 10 % sampled, ns/job", atLeast: false, goal: 1.25},
}

// writeGoBench is the Go benchmarks' section: the command and setting,
// the goals, and a table of each benchmark's ratios.
func writeGoBench(w io.Writer, f *benchFile) {
	fmt.Fprintf(w, "## %s\n\n", goBenchHeading)
	var setting []string
	for _, k := range f.keys {
		if k != "command" {
			setting = append(setting, k+" "+f.config[k])
		}
	}
	if cmd, ok := f.config["command"]; ok {
		fmt.Fprintf(w, "`%s`", cmd)
		if len(setting) > 0 {
			fmt.Fprint(w, ": ")
		}
	}
	fmt.Fprintf(w, "%s. Each cell is the median, then every run.\n\n", strings.Join(setting, ", "))
	writeBenchGoals(w, f)
	for _, top := range benchTops(f.results) {
		writeBenchTable(w, top, f.results)
	}
}

// writeBenchGoals is the table of the goals whose benchmark ran.
func writeBenchGoals(w io.Writer, f *benchFile) {
	var cells [][]string
	for _, g := range benchGoals {
		v := benchValues(f.results, g.name, g.unit)
		if len(v) == 0 {
			continue
		}
		cells = append(cells, []string{g.name, g.unit, runsCell(v), g.goalString(), resultCell(g.result(v.median()))})
	}
	if len(cells) == 0 {
		return
	}
	writeTable(w, []string{"benchmark", "metric", "value", "goal", "result"}, cells)
	fmt.Fprintln(w)
}

// goalString is "≥ 0.9" or "≤ 1.25".
func (g benchGoal) goalString() string {
	if g.atLeast {
		return fmt.Sprintf("≥ %g", g.goal)
	}
	return fmt.Sprintf("≤ %g", g.goal)
}

// result is PASS or MISS for v.
func (g benchGoal) result(v float64) string {
	if g.atLeast {
		return passIf(v >= g.goal)
	}
	return passIf(v <= g.goal)
}

// benchTops are the top-level benchmarks of results, in order.
func benchTops(results []benchResult) []string {
	var tops []string
	for _, r := range results {
		if !slices.Contains(tops, r.top()) {
			tops = append(tops, r.top())
		}
	}
	return tops
}

// writeBenchTable is a table of one top-level benchmark: a row per
// sub-benchmark, a column per ratio it reports.
func writeBenchTable(w io.Writer, top string, results []benchResult) {
	var subs, units []string
	for _, r := range results {
		if r.top() != top {
			continue
		}
		if !slices.Contains(subs, r.sub()) {
			subs = append(subs, r.sub())
		}
		for _, m := range r.metrics {
			if isRatioUnit(m.unit) && !slices.Contains(units, m.unit) {
				units = append(units, m.unit)
			}
		}
	}
	if len(units) == 0 {
		units = []string{"ns/op"}
	}
	fmt.Fprintf(w, "Benchmark%s:\n\n", top)
	var cells [][]string
	for _, sub := range subs {
		line := []string{sub}
		for _, u := range units {
			line = append(line, runsCell(benchValues(results, joinName(top, sub), u)))
		}
		cells = append(cells, line)
	}
	writeTable(w, append([]string{"case"}, units...), cells)
	fmt.Fprintln(w)
}

// joinName is the full name of sub under top ("SDKFloor" alone when
// they are the same).
func joinName(top, sub string) string {
	if top == sub {
		return top
	}
	return top + "/" + sub
}

// benchValues are the values in unit of every result named name.
func benchValues(results []benchResult, name, unit string) series {
	var s series
	for _, r := range results {
		if r.name != name {
			continue
		}
		if v, ok := r.value(unit); ok {
			s = append(s, v)
		}
	}
	return s
}

// runsCell is "0.88 (0.88, 0.82, 0.90)": the median, then every run; "-"
// for none.
func runsCell(s series) string {
	switch len(s) {
	case 0:
		return "-"
	case 1:
		return benchNumber(s[0])
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = benchNumber(v)
	}
	return fmt.Sprintf("%s (%s)", benchNumber(s.median()), strings.Join(parts, ", "))
}

// benchNumber is a ratio with two decimals, a larger figure with none.
func benchNumber(v float64) string {
	if v >= 100 || v <= -100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
