package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBenchRealSample(t *testing.T) {
	f, err := readBenchFile(filepath.Join("testdata", "trace-bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.results) != 10 {
		t.Fatalf("%d results, want 10", len(f.results))
	}
	r := f.results[2]
	if r.name != "Instrumentation/work50us/sampled-10pct" || r.procs != 2 || r.iters != 3000 {
		t.Errorf("result 2: %+v", r)
	}
	if r.top() != "Instrumentation" || r.sub() != "work50us/sampled-10pct" {
		t.Errorf("top %q sub %q", r.top(), r.sub())
	}
	if v, ok := r.value("inst/plain"); !ok || v != 0.6659 {
		t.Errorf("inst/plain = %v, %v", v, ok)
	}
	if v, ok := r.value("ns/op"); !ok || v != 89774 {
		t.Errorf("ns/op = %v, %v", v, ok)
	}
	if r.pkg != "github.com/queuey-go/queuey/trace" {
		t.Errorf("pkg %q", r.pkg)
	}
	if f.config["cpu"] != "Intel(R) Xeon(R) Processor" || !strings.HasPrefix(f.config["command"], "cd trace/sdktest && go test") {
		t.Errorf("config %v", f.config)
	}
	if got := benchValues(f.results, "SDKFloor/sampled-10pct", "hooks/floor"); len(got) != 2 || got[0] != 1.050 {
		t.Errorf("hooks/floor at 10 %%: %v", got)
	}
}

func TestParseBenchSkipsOtherLinesAndFailsOnBadResults(t *testing.T) {
	f, err := parseBench(strings.NewReader("BenchmarkX\n    x_test.go:1: log\nBenchmarkX-8 \t 10\t 5 ns/op\nPASS\nok  \tpkg\t1s\n"))
	if err != nil || len(f.results) != 1 || f.results[0].name != "X" || f.results[0].procs != 8 {
		t.Fatalf("%+v, %v", f, err)
	}
	for name, in := range map[string]string{
		"no result":     "PASS\n",
		"odd fields":    "BenchmarkX-2 10 5 ns/op 3\n",
		"bad count":     "BenchmarkX-2 ten 5 ns/op\n",
		"bad value":     "BenchmarkX-2 10 five ns/op\n",
		"only the name": "BenchmarkX-2 10\n",
	} {
		if _, err := parseBench(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSplitProcs(t *testing.T) {
	for in, want := range map[string]struct {
		name  string
		procs int
	}{
		"A/b-c-4": {"A/b-c", 4},
		"A/b-c":   {"A/b-c", 0},
		"A":       {"A", 0},
		"A/x-0":   {"A/x-0", 0},
	} {
		if name, procs := splitProcs(in); name != want.name || procs != want.procs {
			t.Errorf("splitProcs(%q) = %q, %d", in, name, procs)
		}
	}
}

func TestRatioUnits(t *testing.T) {
	for unit, want := range map[string]bool{
		"inst/plain": true, "hooks/floor-by-cpu": true, "ns/op": false, "plain-jobs/s": false, "+allocs/job": false, "B/op": false,
	} {
		if isRatioUnit(unit) != want {
			t.Errorf("isRatioUnit(%q) = %v", unit, !want)
		}
	}
}

func TestGoBenchSectionShowsGoalsAndRatios(t *testing.T) {
	f, err := readBenchFile(filepath.Join("testdata", "trace-bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeGoBench(&b, f)
	for _, want := range []string{
		"`cd trace/sdktest && go test -run '^$' -bench 'Instrumentation/work50us|SDKFloor' -benchtime 3000x -count 2`",
		"| SDKFloor/sampled-10pct | hooks/floor | 1.16 (1.05, 1.26) | ≤ 1.25 | PASS |",
		"| Instrumentation/work50us/sampled-10pct | inst/plain | 0.51 (0.67, 0.35) | ≥ 0.9 | **MISS** |",
		"| case | floor/plain | floor/plain-by-cpu | inst/floor | inst/plain | inst/plain-by-cpu |",
		"| sampled-0pct | 1.05 (1.04, 1.06) | 1.05 (1.03, 1.08) |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
