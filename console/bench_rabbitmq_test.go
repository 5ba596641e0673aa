package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
	"github.com/queuey-go/queuey/inspect"
)

// The load of BenchmarkWorkersWithAConsoleOpen: a worker (prefetch 10, as
// many handlers, a trivial handler) drains a backlog of jobs of 256
// bytes, as in scenario 1 of the bench command: openJobs an iteration,
// measured in windows of openWindow.
const (
	openJobs     = 100_000
	openPrefetch = 10
	openWindow   = 5 * time.Second
)

var openQueue = queuey.Queue{Name: "open", Prefetch: openPrefetch}

type openJob struct {
	Pad string `json:"pad"`
}

func (openJob) Kind() string        { return "open" }
func (openJob) Queue() queuey.Queue { return openQueue }

// BenchmarkWorkersWithAConsoleOpen measures what a console left open costs
// the workers, on RabbitMQ (127.0.0.1:5672, its management API on
// 127.0.0.1:15672). A worker drains a backlog, and the run is cut into
// windows of 5 s, in turns with and without the console: in a window
// with, the worker's fleet agent runs (a heartbeat at its start, as every
// 5 s), a console listens to the heartbeats, and its Overview is fetched
// every 2 s as the page's own refresh does, through the management API.
// Windows side by side make a pair (in turns, the one with the console
// first), so that the load of other programs on the host, which moves
// over seconds, weighs on both alike. It reports the medians of the
// windows' throughputs, the geometric mean of the pairs' ratios (cost-%:
// 100 × (1 − with ÷ without); in both orders in turn, so that a drift
// cancels out), and the broker requests per refresh as the console counts
// them (Console.BrokerRequests).
//
// null-% is the same figure between neighbouring windows alike (both with,
// or both without): what the host's noise alone makes of a pair. The
// share of the host's CPU that refreshes take (cpu-share-%) is measured
// apart, from 100 refreshes on an idle console. QUEUEY_CONSOLE_BENCH_WITH
// narrows what the windows with the console have: "agent" (its
// heartbeats alone), "refresh" (the page alone) or "none" (nothing: a
// null run).
//
//	go test -run '^$' -bench WorkersWithAConsoleOpen -benchtime 8x -timeout 30m ./console/
func BenchmarkWorkersWithAConsoleOpen(b *testing.B) {
	var p [6]byte
	_, _ = rand.Read(p[:])
	set := queuey.QueueSet{Prefix: "cb." + hex.EncodeToString(p[:]), Queues: []queuey.Queue{openQueue}}
	quiet := slog.New(slog.DiscardHandler)
	dial := func(role string) *rabbitmq.Backend {
		rb := rabbittest.Dial(b, &rabbitmq.Options{ConnectionName: set.Prefix + " " + role, Logger: quiet})
		b.Cleanup(func() { _ = rb.Close() })
		return rb
	}
	b.Cleanup(func() {
		n := set.BrokerName("open")
		rabbittest.DeleteQueues(b, n, broker.DeadQueueName(n), broker.CancelLedgerName(set.Prefix), broker.CancelFollowersName(set.Prefix))
	})
	producer, err := queuey.NewProducer(b.Context(), dial("producer"), set, &queuey.ProducerConfig{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	jobs := make([]queuey.Job, openJobs)
	for i := range jobs {
		jobs[i] = openJob{Pad: strings.Repeat("x", 256-len(`{"pad":""}`))}
	}
	c, err := console.New(b.Context(), dial("console"), set, &console.Options{Logger: quiet,
		Management: &inspect.Management{URL: "http://127.0.0.1:15672", User: "guest", Password: "guest"}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	srv := httptest.NewServer(c)
	defer srv.Close()
	var m windows
	for b.Loop() {
		if _, err := producer.EnqueueBatch(b.Context(), jobs); err != nil {
			b.Fatal(err)
		}
		m.drain(b, set, dial("worker"), c, srv.URL+"/?live=1")
	}
	var ratios, null []float64
	for _, run := range m.runs {
		for i := 0; i+1 < len(run); i += 2 { // (without, with), (with, without), …
			off, on := run[i], run[i+1]
			if on.with == off.with {
				continue
			}
			if !on.with {
				off, on = on, off
			}
			ratios = append(ratios, on.rate/off.rate)
			m.without, m.with = append(m.without, off.rate), append(m.with, on.rate)
			b.Logf("pair %d: %.0f jobs/s without a console, %.0f with (%.1f%%)", len(ratios), off.rate, on.rate, 100*(1-on.rate/off.rate))
		}
		for i := 1; i+1 < len(run); i += 2 { // neighbours alike: (with, with), (without, without)
			r := run[i+1].rate / run[i].rate
			if len(null)%2 == 1 {
				r = 1 / r // later over earlier, then earlier over later: a trend cancels out
			}
			null = append(null, r)
		}
	}
	b.ReportMetric(median(m.without), "jobs/s-without")
	b.ReportMetric(median(m.with), "jobs/s-with")
	b.ReportMetric(100*(1-geomean(ratios)), "cost-%")
	b.ReportMetric(float64(len(ratios)), "pairs")
	// The same between neighbouring windows alike: what the host's noise
	// alone makes of a pair, the cost's error bar.
	b.ReportMetric(100*(1-geomean(null)), "null-%")
	b.ReportMetric(100*iqr(ratios), "spread-%")
	if m.refreshes > 0 {
		b.ReportMetric(float64(m.requests)/float64(m.refreshes), "requests/refresh")
	}
	self, node := cpuPerRefresh(b, srv.URL+"/?live=1")
	b.ReportMetric(float64(self)/float64(time.Millisecond), "console-cpu-ms/refresh")
	b.ReportMetric(float64(node)/float64(time.Millisecond), "broker-cpu-ms/refresh")
	// The share of the host's CPU a console refreshed every 2 s takes.
	share := float64(self+node) / float64(console.DefaultRefresh) / float64(runtime.NumCPU())
	b.ReportMetric(100*share, "cpu-share-%")
	b.ReportMetric(0, "ns/op") // a drain is no operation to time
}

// cpuPerRefresh is the CPU time one refresh of page costs this process
// (the console: its HTTP server, the page, the management API's client)
// and the broker's node, from 100 refreshes back to back on an otherwise
// idle console, less what each used in as long idle just before (other
// programs use the broker too).
func cpuPerRefresh(b *testing.B, page string) (self, node time.Duration) {
	b.Helper()
	nodeCPU := rabbittest.NodeCPU(b)
	read := func() (time.Duration, time.Duration) {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nodeCPU()
	}
	const n = 100
	s0, n0 := read()
	start := time.Now()
	for range n {
		resp, err := http.Get(page)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	s1, n1 := read()
	<-time.After(took)
	s2, n2 := read()
	return max(0, (s1-s0)-(s2-s1)) / n, max(0, (n1-n0)-(n2-n1)) / n
}

// geomean is the geometric mean of xs: of ratios taken in turns in both
// orders (ABBA), a steady drift of the throughput cancels out in it.
func geomean(xs []float64) float64 {
	if len(xs) == 0 {
		return 1
	}
	var sum float64
	for _, x := range xs {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// iqr is the interquartile range of xs.
func iqr(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) < 4 {
		return 0
	}
	return s[3*len(s)/4] - s[len(s)/4]
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// windows are the measurements: each drain's windows in order, and the
// refreshes and their broker requests.
type windows struct {
	runs                [][]window
	with, without       []float64 // the pairs' throughputs, for the report
	refreshes, requests uint64
}

// window is one window's throughput, with the console or without.
type window struct {
	rate float64
	with bool
}

// drain runs a worker on wb until it has handled the backlog of openJobs,
// in windows with and without the console, and adds the complete pairs.
func (m *windows) drain(b *testing.B, set queuey.QueueSet, wb *rabbitmq.Backend, c *console.Console, page string) {
	b.Helper()
	defer wb.Close()
	quiet := slog.New(slog.DiscardHandler)
	agent, err := fleet.NewAgent(wb, set, &fleet.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	// The agent's hooks (an atomic add and a channel send a delivery)
	// are in both windows; the agent runs in those with the console.
	w, err := queuey.NewWorker(wb, set, &queuey.WorkerConfig{Concurrency: openPrefetch, Logger: quiet, Hooks: agent.Hooks(nil)})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	if err := queuey.Handle(w, func(context.Context, openJob, queuey.JobContext) error {
		handled.Add(1)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for handled.Load() < 2000 { // warmed up
		<-time.After(10 * time.Millisecond)
	}
	// Windows in the order without, with, with, without, …: a pair is
	// two windows side by side, each order in turn.
	ablate := os.Getenv("QUEUEY_CONSOLE_BENCH_WITH")
	var run []window
	defer func() { m.runs = append(m.runs, run) }()
	for j := 0; ; j++ {
		with := j%4 == 1 || j%4 == 2
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		before := c.BrokerRequests()
		var refreshes uint64
		if with {
			if ablate != "refresh" && ablate != "none" {
				wg.Go(func() { _ = agent.Run(wctx, w) })
			}
			if ablate != "agent" && ablate != "none" {
				wg.Go(func() { refreshes = refreshEvery(wctx, b, page, console.DefaultRefresh) })
			}
		}
		start, n0 := time.Now(), handled.Load()
		<-time.After(openWindow)
		n1, took := handled.Load(), time.Since(start)
		wcancel()
		wg.Wait()
		if n1 >= openJobs { // the backlog ran out within the window
			return
		}
		run = append(run, window{rate: float64(n1-n0) / took.Seconds(), with: with})
		if with {
			m.refreshes += refreshes
			m.requests += c.BrokerRequests() - before
		}
	}
}

// refreshEvery fetches u as the page's script does, every d until ctx
// ends, and returns how many times.
func refreshEvery(ctx context.Context, b *testing.B, u string, d time.Duration) uint64 {
	var n uint64
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return n
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "This refresh cost") {
			b.Errorf("refresh: %d\n%.500s", resp.StatusCode, body)
			return n
		}
		n++
		select {
		case <-ctx.Done():
			return n
		case <-time.After(d):
		}
	}
}
