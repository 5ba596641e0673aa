// Command bench measures queuey against raw amqp091-go (RabbitMQ) and
// against a bare channel-fed worker pool (memory backend), in one run, and
// prints one table with the ratios and the goals of the benchmark issue.
//
//	go run ./bench                       # every scenario
//	go run ./bench -scenarios 1,2 -count 3
//	go run ./bench -scenarios 5 -cpuprofile cpu.out
//
// Scenarios: 1 RabbitMQ end to end, 2 producer alone, 3 paced at 1,000
// jobs/s, 4 deferral on RabbitMQ, 5 memory end to end, 6 time travel,
// 7 scale (queues, held jobs), 8 settling on RabbitMQ (jobs that defer or
// retry once against jobs that succeed), 9 quorum queues on a cluster (on
// request), 10 scale on RabbitMQ (one worker of 5,000 queues). Each RabbitMQ scenario uses queues of its own
// with unique names and deletes them at the end. With -count > 1 every
// figure is the median of the runs and "spread" is (max-min)/median of the
// per-run figure (of the ratio, where there is one).
//
// The results table goes to stdout. With -markdown FILE the run also
// writes the whole of BENCHMARKS.md (markdown.go: the host, the command, a
// table per scenario), with the peers' results of `bench/peers -json`
// (-peers FILE) and the output of `go test -bench` (-gobench FILE) added;
// -readme FILE rewrites the README's summary between its bench:summary
// markers (readme.go). `make benchmarks` runs all of it:
//
//	go run ./bench -count 3 -markdown BENCHMARKS.md -peers peers.json -gobench trace.txt -readme README.md
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

type config struct {
	amqpURL        string
	n              int
	serialN        int
	publishers     int
	callers        int
	window         int
	pubChannels    int
	prefetch       int
	settlePrefetch []int // scenario 8's prefetches, one run set each
	pacedRate      int
	pacedFor       time.Duration
	deferred       int
	backlog        int
	memN           int
	memProducers   int
	memPrefetch    int
	travelJobs     int
	settleN        int
	scaleQueues    int // scenario 10's many queues
	count          int
	scenarios      map[int]bool
	quorum         []string // the cluster's URLs: libRig declares quorum queues there (scenario 9)
	cluster        string
}

var discard = slog.New(slog.DiscardHandler)

func main() {
	var cfg config
	var scen, cpuprofile, memprofile string
	var out outputs
	flag.StringVar(&cfg.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL (scenarios 1-4)")
	flag.IntVar(&cfg.n, "n", 20000, "jobs per RabbitMQ end-to-end and producer run (scenarios 1, 2)")
	flag.IntVar(&cfg.serialN, "serial-n", 2000, "publishes of the one-at-a-time producer runs (scenario 2)")
	flag.IntVar(&cfg.publishers, "publishers", 32, "concurrent Enqueue goroutines of queuey's producer (scenarios 1, 3, 4)")
	flag.IntVar(&cfg.callers, "callers", 256, "concurrent Enqueue goroutines of the many-callers producer run (scenario 2); default: as many as the raw window")
	flag.IntVar(&cfg.window, "window", 256, "outstanding confirms of the raw amqp091 publisher")
	flag.IntVar(&cfg.pubChannels, "publish-channels", 0, "rabbitmq.Options.PublishChannels (0: the library default, 4)")
	flag.IntVar(&cfg.prefetch, "prefetch", 10, "consumer prefetch on RabbitMQ (worker concurrency too)")
	flag.IntVar(&cfg.pacedRate, "paced-rate", 1000, "jobs/s of the paced run (scenario 3)")
	flag.DurationVar(&cfg.pacedFor, "paced-for", 5*time.Second, "length of the paced run (scenario 3)")
	flag.IntVar(&cfg.deferred, "deferred", 1000, "jobs deferred 1 s (scenario 4)")
	flag.IntVar(&cfg.backlog, "backlog", 12000, "backlog the deferred jobs must overtake (scenario 4)")
	flag.IntVar(&cfg.memN, "mem-n", 200000, "jobs per memory-backend run (scenarios 5, 7)")
	flag.IntVar(&cfg.memProducers, "mem-producers", 2, "enqueuing goroutines on the memory backend (scenarios 5, 7)")
	flag.IntVar(&cfg.memPrefetch, "mem-prefetch", 16, "queue prefetch on the memory backend (scenarios 5, 7)")
	flag.IntVar(&cfg.settleN, "settle-n", 10000, "jobs per run of the settle scenario (8)")
	flag.Func("settle-prefetch", "comma-separated prefetches of the settle scenario (8), a run set each (default 10,32)", func(v string) error {
		ps, err := positiveInts(v)
		cfg.settlePrefetch = ps
		return err
	})
	flag.IntVar(&cfg.scaleQueues, "scale-queues", 5000, "queues of the one worker of the RabbitMQ scale scenario (10)")
	flag.IntVar(&cfg.travelJobs, "travel-jobs", 10000, "jobs of the time-travel run (scenario 6)")
	flag.StringVar(&cfg.cluster, "cluster", os.Getenv("QUEUEY_CLUSTER"), "comma-separated URLs of a RabbitMQ cluster's nodes (scenario 9; `make cluster` prints them)")
	flag.IntVar(&cfg.count, "count", 1, "runs of each measurement; figures are medians")
	flag.StringVar(&scen, "scenarios", "1,2,3,4,5,6,7,8", "comma-separated scenarios to run (on request: 9, quorum queues on a cluster; 10, 5,000 queues on RabbitMQ, about 11 minutes of heavy broker load)")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (samples labelled scenario=N, and run=<name> in scenarios 2 and 8: go tool pprof -tagfocus)")
	flag.StringVar(&memprofile, "memprofile", "", "write an allocation profile at the end to this file")
	out.registerFlags(flag.CommandLine)
	flag.Parse()
	if cfg.settlePrefetch == nil {
		cfg.settlePrefetch = []int{10, 32}
	}
	if err := out.load(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	cfg.scenarios = map[int]bool{}
	for _, s := range strings.Split(scen, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || i < 1 || i > 10 {
			fmt.Fprintf(os.Stderr, "bench: bad scenario %q (want 1..10)\n", s)
			os.Exit(2)
		}
		cfg.scenarios[i] = true
	}
	cfg.count = max(cfg.count, 1)

	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	var report runReport
	if out.wanted() {
		report = out.newReport(cfg, time.Now())
	}
	fmt.Printf("queuey bench: %s, GOMAXPROCS %d, %s/%s, count %d\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, cfg.count)
	var rows []row
	steps := []struct {
		n   int
		run func(config) ([]row, error)
	}{
		{1, scenarioEndToEnd},
		{2, scenarioProducer},
		{3, scenarioPaced},
		{4, scenarioDeferral},
		{5, scenarioMemory},
		{6, scenarioTimeTravel},
		{7, scenarioScale},
		{8, scenarioSettle},
		{9, scenarioQuorum},
		{10, scenarioRabbitScale},
	}
	failed := false
	for _, s := range steps {
		if !cfg.scenarios[s.n] {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "scenario %d ...\n", s.n)
		var r []row
		var err error
		// A CPU profile (-cpuprofile) tells the scenarios apart by this
		// label, which the goroutines a scenario starts inherit.
		pprof.Do(context.Background(), pprof.Labels("scenario", strconv.Itoa(s.n)), func(context.Context) { r, err = s.run(cfg) })
		if err != nil {
			fmt.Fprintf(os.Stderr, "scenario %d: %v\n", s.n, err)
			failed = true
		}
		fmt.Fprintf(os.Stderr, "scenario %d done in %v\n", s.n, time.Since(start).Round(time.Millisecond))
		for i := range r {
			r[i].num = s.n
		}
		rows = append(rows, r...)
	}
	printTable(os.Stdout, rows)
	if out.wanted() && failed {
		fmt.Fprintln(os.Stderr, "bench: a scenario failed: no document written")
	} else if out.wanted() {
		report.rows = rows
		if err := out.write(report); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			failed = true
		}
	}
	if memprofile != "" {
		f, err := os.Create(memprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			fatal(err)
		}
		_ = f.Close()
	}
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// row is one line of the table.
type row struct {
	num      int // the scenario's number, set by main
	scenario string
	metric   string
	lib      string // queuey's figure
	base     string // the baseline's figure, if any
	ratio    string
	goal     string
	result   string // PASS, MISS or empty
	spread   string
	headline bool // one of the scenario's headline figures: a row of the README's summary
}

// headlined is r marked as a headline figure.
func headlined(r row) row {
	r.headline = true
	return r
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| # \t metric \t queuey \t baseline \t ratio \t goal \t result \t spread \t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s \t %s \t %s \t %s \t %s \t %s \t %s \t %s \t\n",
			r.scenario, r.metric, r.lib, dash(r.base), dash(r.ratio), dash(r.goal), dash(r.result), dash(r.spread))
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// series is one figure over the -count runs.
type series []float64

func (s series) median() float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// spread is (max-min)/median, as a percentage; empty for a single run.
func (s series) spread() string {
	if len(s) < 2 {
		return ""
	}
	m := s.median()
	if m == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f%%", (slices.Max(s)-slices.Min(s))/m*100)
}

// ratios divides a by b run by run.
func ratios(a, b series) series {
	out := make(series, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

func passIf(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

func ms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func ratioStr(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// percentile of sorted durations, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, int(float64(len(sorted))*p/100))
	return float64(sorted[i]) / float64(time.Millisecond)
}

func unique(name string) string {
	return fmt.Sprintf("qbench.%s.%d", name, time.Now().UnixNano())
}

// positiveInts parses a comma-separated list of positive integers.
func positiveInts(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}
