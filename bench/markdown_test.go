package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the golden files: go test ./bench/ -run Golden -update
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixtureConfig is the default configuration of go run ./bench, -count 3.
func fixtureConfig() config {
	return config{
		amqpURL: "amqp://guest:guest@127.0.0.1:5672/", n: 20000, serialN: 2000, publishers: 32, callers: 256,
		window: 256, prefetch: 10, pacedRate: 1000, pacedFor: 5 * time.Second, deferred: 1000, backlog: 12000,
		memN: 200000, memProducers: 2, memPrefetch: 16, travelJobs: 10000, settleN: 4000, count: 3,
	}
}

// fixtureHost is a fixed host.
func fixtureHost() hostInfo {
	return hostInfo{cpu: "AMD EPYC 7B13", cores: 2, memory: "23.5 GiB", kernel: "6.18.44", gomaxprocs: 2,
		goVersion: "go1.26.8 linux/amd64", rabbitMQ: "RabbitMQ 3.10.8", amqp091: "v1.16.0", commit: "44de260"}
}

// fixtureRows are rows of scenarios in the shapes the scenarios make them,
// each scenario's first row a headline, rowsPer rows each.
func fixtureRows(scenarios []int, rowsPer int) []row {
	var rows []row
	for _, n := range scenarios {
		for i := range rowsPer {
			r := row{num: n, scenario: fmt.Sprintf("%d case %d", n, i%2), metric: fmt.Sprintf("metric %d.%d", n, i),
				lib: "5.53k/s", base: "4.32k/s", ratio: "1.28", spread: "12%"}
			if i == 0 {
				r.goal, r.result, r.headline = "≥ 0.95", "PASS", true
			}
			if i == 1 {
				r.goal, r.result = "≥ 1M/s", "MISS"
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// fixtureReport is a run of scenarios with the peers and Go benchmark
// samples of testdata (real outputs of small runs).
func fixtureReport(t *testing.T, scenarios []int, rowsPer int) runReport {
	t.Helper()
	peers, err := readPeers(filepath.Join("testdata", "peers.json"))
	if err != nil {
		t.Fatal(err)
	}
	bench, err := readBenchFile(filepath.Join("testdata", "trace-bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return runReport{
		host: fixtureHost(), command: "go run ./bench -count 3 -markdown BENCHMARKS.md",
		date: time.Date(2026, 12, 3, 6, 13, 0, 0, time.UTC), cfg: fixtureConfig(),
		rows: fixtureRows(scenarios, rowsPer), peers: peers, gobench: bench,
	}
}

// render is writeMarkdown's output.
func render(rep runReport) string {
	var b strings.Builder
	writeMarkdown(&b, rep)
	return b.String()
}

func TestMarkdownHasHeaderHostCommandAndDate(t *testing.T) {
	md := render(fixtureReport(t, []int{1, 5}, 2))
	for _, want := range []string{
		"# Benchmarks\n",
		"do not edit it by hand",
		"| CPU | AMD EPYC 7B13, 2 logical cores |",
		"| memory | 23.5 GiB |",
		"| kernel | Linux 6.18.44 |",
		"| Go | go1.26.8 linux/amd64, GOMAXPROCS 2 |",
		"| RabbitMQ | RabbitMQ 3.10.8, at amqp://guest@127.0.0.1:5672/ |",
		"| amqp091-go | v1.16.0 |",
		"| date | 2026-12-03 06:13 UTC |",
		"| command | `go run ./bench -count 3 -markdown BENCHMARKS.md` |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in\n%s", want, md)
		}
	}
}

func TestMarkdownHasATablePerScenario(t *testing.T) {
	all := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	md := render(fixtureReport(t, all, 3))
	for _, n := range all {
		heading := "## " + scenarioTitle(n) + "\n"
		i := strings.Index(md, heading)
		if i < 0 {
			t.Fatalf("no heading %q", heading)
		}
		section := md[i+len(heading):]
		if next := strings.Index(section, "\n## "); next >= 0 {
			section = section[:next]
		}
		if got := strings.Count(section, "\n| --- "); got != 1 {
			t.Errorf("scenario %d: %d tables, want one, in\n%s", n, got, section)
		}
		if got := strings.Count(section, "| metric | queuey | baseline | ratio | goal | result | spread |"); got != 1 {
			t.Errorf("scenario %d: %d table headers", n, got)
		}
		for i := range 3 {
			if !strings.Contains(section, fmt.Sprintf("metric %d.%d", n, i)) {
				t.Errorf("scenario %d: row %d missing from\n%s", n, i, section)
			}
		}
	}
}

func TestMarkdownOfEveryScenarioIsUnder300Lines(t *testing.T) {
	// Scenario 2 makes six rows, 5 and 7 six each: six rows for all is
	// more than a run makes.
	md := render(fixtureReport(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, 6))
	if n := strings.Count(md, "\n"); n >= 300 {
		t.Errorf("%d lines", n)
	}
}

func TestMarkdownMarksAMissAndACaseColumn(t *testing.T) {
	md := render(fixtureReport(t, []int{5}, 2))
	if !strings.Contains(md, "| case | metric | queuey |") {
		t.Errorf("rows of two cases have no case column:\n%s", md)
	}
	if !strings.Contains(md, "| case 1 | metric 5.1 | 5.53k/s | 4.32k/s | 1.28 | ≥ 1M/s | **MISS** | 12% |") {
		t.Errorf("the miss is not in bold:\n%s", md)
	}
}

func TestMarkdownGolden(t *testing.T) {
	rep := fixtureReport(t, nil, 0)
	rep.rows = goldenRows()
	rep.cfg.n, rep.cfg.memN, rep.cfg.count = 2000, 20000, 1
	rep.command = "go run ./bench -scenarios 1,5 -n 2000 -mem-n 20000 -count 1 -markdown BENCHMARKS.md"
	golden(t, filepath.Join("testdata", "benchmarks.golden.md"), render(rep))
}

// goldenRows are rows of scenarios 1 and 5 as a small run made them
// (go run ./bench -scenarios 1,5 -n 2000 -mem-n 20000 -count 1).
func goldenRows() []row {
	e2e, mem := "1 e2e 2000×256B", "5 memory c=%d"
	rows := []row{
		{num: 1, scenario: e2e, metric: "jobs/s", lib: "6294/s", base: "3762/s", ratio: "1.67", goal: "≥ 0.95", result: "PASS", headline: true},
		{num: 1, scenario: e2e, metric: "publish→handle p99", lib: "31 ms", base: "310 ms", ratio: "0.099"},
		{num: 1, scenario: e2e, metric: "broker CPU µs/job", lib: "135.0", base: "170.0", ratio: "0.79", goal: "≤ 1.1", result: "PASS", headline: true},
	}
	for c, r := range []string{"", "117.3k/s", "162.6k/s"} {
		if c == 0 {
			continue
		}
		rows = append(rows,
			row{num: 5, scenario: fmt.Sprintf(mem, c), metric: "jobs/s vs bare channel pool", lib: r, base: "7.21M/s",
				ratio: "0.023", goal: "≥ 1M/s", result: "MISS", headline: c == 2},
			row{num: 5, scenario: fmt.Sprintf(mem, c), metric: "allocs/job, bytes/job", lib: "8.0 allocs, 868 B", base: "0.0 allocs"})
	}
	return rows
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test ./bench/ -run Golden -update to accept):\n%s", path, diff)
	}
}

func TestWrappedLinesStayWithin80Columns(t *testing.T) {
	var b strings.Builder
	writeWrapped(&b, strings.Repeat("word ", 50)+"end")
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("%d columns: %q", len(line), line)
		}
	}
	if got := strings.Join(strings.Fields(b.String()), " "); got != strings.Repeat("word ", 50)+"end" {
		t.Errorf("words changed: %q", got)
	}
}

func TestTableCellsEscapePipes(t *testing.T) {
	var b strings.Builder
	writeTable(&b, []string{"a", "b"}, [][]string{{"x|y", "z"}})
	want := "| a | b |\n| --- | --- |\n| x\\|y | z |\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestAnchorIsGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"Scenario 1: RabbitMQ end to end":       "scenario-1-rabbitmq-end-to-end",
		"Go benchmarks":                         "go-benchmarks",
		"Scenario 5: Memory backend end to end": "scenario-5-memory-backend-end-to-end",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestEveryScenarioHasADoc(t *testing.T) {
	for n := 1; n <= 9; n++ {
		d, ok := scenarioDocs[n]
		if !ok || d.title == "" || d.describe(fixtureConfig()) == "" {
			t.Errorf("scenario %d has no doc", n)
		}
	}
}

func TestScenarioDocsSayTheRunsParameters(t *testing.T) {
	cfg := fixtureConfig()
	cfg.n = 1234
	if d := scenarioDocs[1].describe(cfg); !strings.Contains(d, "1234 jobs") {
		t.Errorf("scenario 1's doc does not say -n: %s", d)
	}
}

func TestCommandLineQuotesAndHidesPasswords(t *testing.T) {
	got := commandLine([]string{"-scenarios", "1,5", "-amqp", "amqp://u:secret@h:5672/", "-x", "a b", "-y", "it's"})
	want := `go run ./bench -scenarios 1,5 -amqp amqp://u@h:5672/ -x 'a b' -y 'it'\''s'`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := commandLine([]string{"-cluster", "amqp://a:p@n1/,amqp://a:p@n2/"}); got != "go run ./bench -cluster amqp://a@n1/,amqp://a@n2/" {
		t.Errorf("cluster: %s", got)
	}
}

func TestHostReadsProcFiles(t *testing.T) {
	dir := t.TempDir()
	cpuinfo := filepath.Join(dir, "cpuinfo")
	meminfo := filepath.Join(dir, "meminfo")
	_ = os.WriteFile(cpuinfo, []byte("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"), 0o644)
	_ = os.WriteFile(meminfo, []byte("MemTotal:       24641536 kB\nMemFree: 1 kB\n"), 0o644)
	if got := cpuModel(cpuinfo); got != "AMD EPYC 7B13" {
		t.Errorf("cpu %q", got)
	}
	if got := memTotal(meminfo); got != "23.5 GiB" {
		t.Errorf("memory %q", got)
	}
	if got := cpuModel(filepath.Join(dir, "missing")); got != "unknown" {
		t.Errorf("missing file: %q", got)
	}
}
