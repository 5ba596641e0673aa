// Command peers runs the same trivial job through queuey (RabbitMQ),
// machinery (RabbitMQ), asynq (Redis, without persistence and with an
// append-only file fsynced every second, on a Redis it starts on port 6380
// for the run) and river (PostgreSQL, in the database of -pg, which it
// creates if missing and migrates up), in one run, and prints jobs/s side
// by side, with the CPU time per job of the server (beam.smp, redis-server
// or every postgres process, from /proc) and of this process:
//
//	cd bench/peers && go run . -n 20000 -count 3
//
// Every system gets the same load: n jobs with a ~256-byte payload,
// enqueued by -publishers concurrent callers (each enqueue returns once the
// broker has taken the job: a publisher confirm on RabbitMQ, a Redis reply
// for asynq, a committed transaction for river), while a worker with
// -concurrency handlers and a trivial handler runs them. jobs/s is n over
// first enqueue to last handled. river-insertmany is the exception, and
// says so: river's bulk insert, batches of 1000 from one caller.
// It lives in a module of its own so the library's go.mod stays free of
// the peers' dependencies.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

type benchConfig struct {
	amqpURL     string
	redisAddr   string
	pgURL       string
	n           int
	publishers  int
	concurrency int
}

type system struct {
	name   string
	module string // the client module it is built on, whose version -json reports
	note   string
	server string // the processes whose CPU per job is reported: beam.smp, redis-server or postgres
	run    func(benchConfig) (float64, error)
}

func main() {
	var cfg benchConfig
	var count int
	var only, jsonPath string
	flag.StringVar(&cfg.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL (queuey, machinery)")
	flag.StringVar(&cfg.redisAddr, "redis", "127.0.0.1:6379", "Redis address (asynq)")
	flag.StringVar(&cfg.pgURL, "pg", "postgres://postgres@127.0.0.1:5432/queuey_peers?sslmode=disable",
		"PostgreSQL URL (river); the database is created if missing")
	flag.IntVar(&cfg.n, "n", 20000, "jobs per run")
	flag.IntVar(&cfg.publishers, "publishers", 32, "concurrent enqueuing goroutines")
	flag.IntVar(&cfg.concurrency, "concurrency", 10, "handlers at once (and prefetch on RabbitMQ)")
	flag.IntVar(&count, "count", 1, "runs per system; the figure is the median")
	flag.StringVar(&jsonPath, "json", "", "also write the results, with the versions built and run against, to this file (bench's -peers reads it)")
	flag.StringVar(&only, "systems", "queuey,machinery,asynq,asynq-aof,river,river-insertmany", "comma-separated systems to run")
	flag.Parse()

	systems := []system{
		{"queuey", "github.com/queuey-go/queuey", "RabbitMQ, confirms, persistent, manual acks: durable", "beam.smp", runQueuey},
		{"machinery v2", "github.com/RichardKnop/machinery/v2", "RabbitMQ, confirms, persistent, acks after the task: durable", "beam.smp", runMachinery},
		{"asynq", "github.com/hibiken/asynq", "Redis without persistence: not durable", "redis-server", runAsynq},
		{"asynq-aof", "github.com/hibiken/asynq", "Redis, appendonly yes, appendfsync everysec: durable to the last second", "redis-server", runAsynqAOF},
		{"river", "github.com/riverqueue/river", "PostgreSQL, committed transactions: durable (one Insert per job; FetchCooldown 2ms, FetchPollInterval 20ms; InsertMany batches are faster: river-insertmany)", "postgres", runRiver},
		{"river-insertmany", "github.com/riverqueue/river", "PostgreSQL, committed transactions: durable (InsertMany, 1000 jobs a call from one caller: not the others' load)", "postgres", runRiverInsertMany},
	}
	fmt.Printf("peers: %s, GOMAXPROCS %d, n %d, %d publishers, concurrency %d, count %d\n",
		runtime.Version(), runtime.GOMAXPROCS(0), cfg.n, cfg.publishers, cfg.concurrency, count)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| system \t jobs/s (median) \t runs \t vs queuey \t server CPU µs/job \t Go CPU µs/job \t transport \t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t")
	stopAOF := func() {}
	if slices.Contains(strings.Split(only, ","), "asynq-aof") {
		var err error
		if stopAOF, err = startAOFRedis(); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
	}
	if slices.ContainsFunc(strings.Split(only, ","), func(s string) bool { return strings.HasPrefix(s, "river") }) {
		if err := setupRiver(cfg.pgURL); err != nil {
			stopAOF()
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
	}
	selected := slices.DeleteFunc(systems, func(s system) bool {
		return !slices.Contains(strings.Split(only, ","), strings.Fields(s.name)[0])
	})
	rep := newReport(cfg, count)
	if jsonPath != "" {
		rep.Servers = serverVersions(cfg, selected)
	}
	var queueyRate float64
	failed := false
	for _, s := range selected {
		rates, serverUs, selfUs, err := measure(s, cfg, count)
		rep.add(s, rates, serverUs, selfUs, err)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.name, err)
			fmt.Fprintf(tw, "| %s \t failed: %v \t - \t - \t - \t - \t %s \t\n", s.name, err, s.note)
			failed = true
			continue
		}
		m := median(rates)
		if s.name == "queuey" {
			queueyRate = m
		}
		vs := "-"
		if queueyRate > 0 {
			vs = fmt.Sprintf("%.2f", m/queueyRate)
		}
		fmt.Fprintf(tw, "| %s \t %.0f \t %s \t %s \t %.0f (%s) \t %.0f \t %s \t\n", s.name, m, runsString(rates), vs,
			median(serverUs), s.server, median(selfUs), s.note)
	}
	_ = tw.Flush()
	stopAOF() // before os.Exit, which runs no deferred call
	if jsonPath != "" {
		if err := rep.write(jsonPath); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// measure runs s count times: its jobs/s, and its server's and this
// process's CPU time per job, in µs, per run.
func measure(s system, cfg benchConfig, count int) (rates, serverUs, selfUs []float64, err error) {
	for range max(count, 1) {
		fmt.Fprintf(os.Stderr, "%s ...\n", s.name)
		server, self := processCPU(s.server), selfCPU()
		r, err := s.run(cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		rates = append(rates, r)
		serverUs = append(serverUs, float64(processCPU(s.server)-server)/float64(time.Microsecond)/float64(cfg.n))
		selfUs = append(selfUs, float64(selfCPU()-self)/float64(time.Microsecond)/float64(cfg.n))
	}
	return rates, serverUs, selfUs, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func runsString(v []float64) string {
	parts := make([]string, len(v))
	for i, r := range v {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, " ")
}

// pad is the job's payload filler: about 256 bytes of body on the wire
// with each system's own wrapping around it.
var pad = strings.Repeat("x", 200)

func unique(name string) string {
	return fmt.Sprintf("qbench.peer.%s.%d", name, time.Now().UnixNano())
}

// counter closes done when the want-th job has been handled.
type counter struct {
	n    atomic.Int64
	want int64
	last atomic.Int64
	done chan struct{}
}

func newCounter(want int) *counter { return &counter{want: int64(want), done: make(chan struct{})} }

func (c *counter) hit() {
	c.last.Store(time.Now().UnixNano())
	if c.n.Add(1) == c.want {
		close(c.done)
	}
}

func (c *counter) wait(timeout time.Duration) error {
	select {
	case <-c.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("only %d of %d jobs handled after %v", c.n.Load(), c.want, timeout)
	}
}

func (c *counter) rate(start time.Time) float64 {
	return float64(c.want) / time.Duration(c.last.Load()-start.UnixNano()).Seconds()
}

// enqueueAll calls enqueue n times from publishers goroutines.
func enqueueAll(publishers, n int, enqueue func() error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for range publishers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := enqueue(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
