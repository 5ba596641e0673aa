// Command ratelimit shows a real 429 deferral end to end. A local HTTP
// server in the same program plays an API that allows a few calls a second
// and answers the rest "429 Too Many Requests" with a Retry-After; a queue of
// jobs calls it, and each job that is answered 429 waits out the Retry-After
// in a hold queue and comes back ahead of the backlog, without spending an
// attempt.
//
//	cd examples/ratelimit && go run . [-jobs 20] [-rate 5] [-prefetch 5] [-mode both|defer|pause] [-url amqp://...] [-spans=false]
//
// It runs twice by default and compares the two:
//
//   - defer: the handler returns queuey.Defer(retryAfter, ...), so only its
//     own job waits; the rest of the queue keeps calling the API, and every
//     one of them is answered 429 until the next second.
//   - pause: the handler returns queuey.PauseQueue(retryAfter, ...), so the
//     worker also stops taking the queue's deliveries until the job is back;
//     only the calls already in flight (at most about the prefetch) are
//     wasted per limited second.
//
// A job gives up (queuey.Fatalf, dead-lettered) after five deferrals; any
// other failure is retried. Each run is printed with the API's answer, then
// the lifecycle of one deferred job, reconstructed from its OpenTelemetry
// spans (package trace), then a summary of both modes side by side. Every
// span is also exported to stderr as JSON with OpenTelemetry's stdout
// exporter (stdouttrace), unless -spans=false.
//
// The memory backend is used unless -url names a RabbitMQ broker
// (QUEUEY_AMQP_URL is not read). On RabbitMQ the queues get a prefix of
// their own ("ratelimit-<random>-defer.api", ...) and are deleted at the
// end. The clock is real and the API's windows are real seconds: 20 jobs at
// 5 calls a second take about three seconds per mode.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/examples/internal/scratch"
	"github.com/queuey-go/queuey/trace"
)

// maxDeferrals is the handler's own cap: a job still rate limited after
// this many deferrals gives up.
const maxDeferrals = 5

// apiQueue is the queue of calls to the API. A job names its queue only by
// Name; the QueueSet gives its settings (prefetch, retries), here from the
// flags.
var apiQueue = queuey.Queue{Name: "api"}

// CallAPI calls the rate-limited API once.
type CallAPI struct {
	N int `json:"n"`
}

func (CallAPI) Kind() string        { return "call_api" }
func (CallAPI) Queue() queuey.Queue { return apiQueue }

// config is what the flags set.
type config struct {
	Jobs     int
	Rate     int    // calls the API allows per second
	Prefetch int    // the queue's prefetch, and so the worker's concurrency
	Mode     string // "both", "defer" or "pause"
	URL      string // a RabbitMQ broker; empty: the memory backend
	Spans    bool   // export every span to stderr (stdouttrace)
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Jobs, "jobs", 20, "jobs to enqueue")
	flag.IntVar(&cfg.Rate, "rate", 5, "calls per second the API allows")
	flag.IntVar(&cfg.Prefetch, "prefetch", 5, "the queue's prefetch (also the worker's concurrency)")
	flag.StringVar(&cfg.Mode, "mode", "both", "both, defer (queuey.Defer per job) or pause (queuey.PauseQueue)")
	// No default value: flag's -help would print it, and a URL may carry a password.
	flag.StringVar(&cfg.URL, "url", "", "AMQP URL of a RabbitMQ broker to run on (default: the in-memory backend; QUEUEY_AMQP_URL is not read)")
	flag.BoolVar(&cfg.Spans, "spans", true, "export every span to stderr as JSON (stdouttrace); -spans=false to leave them out")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	_, err := run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(1)
	}
}

// summary is what run found, one modeSummary per mode run.
type summary struct {
	Modes []modeSummary
	// Queues are the broker queues the runs made; on RabbitMQ they are
	// deleted before run returns.
	Queues []string
}

// modeSummary is one mode's run.
type modeSummary struct {
	Mode     string
	Queue    string // the work queue's broker name
	Jobs     int
	Prefetch int
	// What the API answered.
	apiCounts
	// Succeeded counts the jobs whose call went through; DeadLetters the
	// messages on the dead-letter queue at the end.
	Succeeded, DeadLetters int
	// Wall is the time from the first enqueue to the last job's end.
	Wall time.Duration
	// Runs are the handler's runs, in the order they called the API.
	Runs []runRecord
}

// runRecord is one run of the handler.
type runRecord struct {
	Job                          int
	ID                           string
	Attempt, Deferrals, Priority int
	Status                       int           // the API's answer; 0 when the call failed
	RetryAfter                   time.Duration // with a 429
	Returned                     string        // what the handler returned
	Started                      time.Duration // when the handler started, since the mode's start
	At                           time.Duration // when the API answered
}

func (c config) modes() ([]string, error) {
	switch {
	case c.Jobs < 1 || c.Rate < 1 || c.Prefetch < 1:
		return nil, fmt.Errorf("-jobs (%d), -rate (%d) and -prefetch (%d) must be at least 1", c.Jobs, c.Rate, c.Prefetch)
	case c.Mode == "both":
		return []string{"defer", "pause"}, nil
	case c.Mode == "defer" || c.Mode == "pause":
		return []string{c.Mode}, nil
	default:
		return nil, fmt.Errorf("-mode %q: want both, defer or pause", c.Mode)
	}
}

// run runs each mode of cfg in turn, printing its runs, the lifecycle of a
// deferred job and, at the end, the summaries side by side to stdout; the
// library's warnings (and with cfg.Spans, the spans) go to stderr. On
// RabbitMQ it deletes the queues it made, also when a run fails.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (sum summary, err error) {
	modes, err := cfg.modes()
	if err != nil {
		return sum, err
	}
	out := &syncWriter{w: stdout}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	made := &recorded{names: map[string]bool{}}
	defer func() { sum.Queues = made.sorted() }()

	prefix, newBackend := "ratelimit", func() (broker.Backend, func()) {
		b := memory.New(nil) // a fresh one per mode
		return b, func() { _ = b.Close() }
	}
	where := "the in-memory backend"
	if cfg.URL != "" {
		prefix = scratch.Prefix("ratelimit")
		where = fmt.Sprintf("RabbitMQ at %s, queue prefix %s", rabbitmq.Redact(cfg.URL), prefix)
		// err is run's own below, so that the deferred deletion can add to it.
		var rabbit *rabbitmq.Backend
		rabbit, err = rabbitmq.Dial(ctx, cfg.URL, &rabbitmq.Options{ConnectionName: "queuey ratelimit", Logger: logger})
		if err != nil {
			// It says how to start a broker when none answers; its hint at
			// QUEUEY_AMQP_URL does not apply here.
			return sum, fmt.Errorf("%w (this program takes the broker from -url only)", err)
		}
		defer rabbit.Close()
		// A second connection, in plain amqp091, to delete the queues:
		// the queuey backend does not offer that.
		var admin *amqp.Connection
		admin, err = amqp.Dial(cfg.URL)
		if err != nil {
			return sum, fmt.Errorf("admin connection to %s: %w", rabbitmq.Redact(cfg.URL), err)
		}
		defer admin.Close()
		defer func() {
			names := made.sorted()
			if derr := scratch.DeleteQueues(admin, names); derr != nil {
				err = errors.Join(err, derr)
				return
			}
			fmt.Fprintf(out, "deleted the queues made: %s\n", strings.Join(names, ", "))
		}()
		newBackend = func() (broker.Backend, func()) { return rabbit, func() {} }
	}
	fmt.Fprintf(out, "%d jobs against an API that allows %d calls a second; prefetch %d; on %s\n",
		cfg.Jobs, cfg.Rate, cfg.Prefetch, where)

	for _, mode := range modes {
		backend, closeBackend := newBackend()
		ms, err := runMode(ctx, cfg, mode, &recorder{Backend: backend, made: made}, prefix+"-"+mode, logger, out, stderr)
		closeBackend()
		if err != nil {
			return sum, fmt.Errorf("mode %s: %w", mode, err)
		}
		sum.Modes = append(sum.Modes, ms)
	}
	printSummaries(out, sum.Modes)
	return sum, nil
}

// runMode enqueues cfg.Jobs calls, runs a worker until every job has
// succeeded or given up, and reports.
func runMode(ctx context.Context, cfg config, mode string, backend broker.Backend, prefix string,
	logger *slog.Logger, out *syncWriter, stderr io.Writer) (ms modeSummary, err error) {
	api := newAPI(cfg.Rate)
	srv := httptest.NewServer(api) // on loopback
	defer srv.Close()

	// Every span goes to the recorder, for the lifecycle printout, and
	// (unless -spans=false) to stderr through the stdout exporter, batched
	// and flushed by Shutdown.
	spans := tracetest.NewSpanRecorder()
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(spans)}
	if cfg.Spans {
		exporter, err := stdouttrace.New(stdouttrace.WithWriter(stderr))
		if err != nil {
			return ms, err
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exporter))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	defer func() { err = errors.Join(err, tp.Shutdown(context.WithoutCancel(ctx))) }()
	ins, err := trace.New(&trace.Options{TracerProvider: tp, MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		return ms, err
	}

	q := apiQueue
	q.Prefetch = cfg.Prefetch
	// A failed call (not a 429) is retried: three attempts, a second apart.
	q.Retry = &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(time.Second)}
	app := queuey.QueueSet{
		Prefix: prefix,
		Queues: []queuey.Queue{q},
		// Retry-After is whole seconds, so a 1 s step waits exactly what
		// the API asked.
		DeferGranularity: time.Second,
	}
	ms = modeSummary{Mode: mode, Queue: broker.QueueName(prefix, q.Name), Jobs: cfg.Jobs, Prefetch: cfg.Prefetch}

	producer, err := queuey.NewProducer(ctx, backend, app, &queuey.ProducerConfig{Logger: logger, Hooks: ins.Hooks()})
	if err != nil {
		return ms, err
	}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Logger: logger, Hooks: ins.Hooks()})
	if err != nil {
		return ms, err
	}
	h := &handler{
		mode: mode, pause: mode == "pause", url: srv.URL, client: srv.Client(), out: out,
		start: time.Now(), remaining: cfg.Jobs, done: make(chan struct{}),
	}
	if err := queuey.Handle(worker, h.callAPI); err != nil {
		return ms, err
	}

	how := "each 429 defers its own job: queuey.Defer(retryAfter, ...)"
	if h.pause {
		how = "a 429 pauses the whole queue: queuey.PauseQueue(retryAfter, ...)"
	}
	fmt.Fprintf(out, "\n== %s: %s; queue %s\n", mode, how, ms.Queue)
	// Everything is queued before the worker starts, one at a time so that
	// the queue holds the jobs in order (EnqueueBatch would publish them
	// concurrently). Each job's send span starts a trace of its own.
	for n := 1; n <= cfg.Jobs; n++ {
		if _, err := producer.Enqueue(ctx, CallAPI{N: n}); err != nil {
			return ms, err
		}
	}

	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(workerCtx) }()
	select {
	case <-h.done:
	case <-ctx.Done():
	}
	// A graceful stop: Run returns once the running handlers have settled,
	// and so once every span has ended.
	stopWorker()
	if err := <-stopped; err != nil {
		return ms, err
	}
	if ctx.Err() != nil {
		return ms, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}

	h.mu.Lock()
	ms.Runs, ms.Succeeded, ms.Wall = slices.Clone(h.runs), h.succeeded, h.wall
	h.mu.Unlock()
	ms.apiCounts = api.counts()
	if ms.DeadLetters, err = backend.Depth(ctx, broker.DeadQueueName(ms.Queue)); err != nil {
		return ms, fmt.Errorf("count the dead letters: %w", err)
	}

	fmt.Fprintln(out)
	if job, id, ok := pickDeferred(ms.Runs); ok {
		printLifecycle(out, spans.Ended(), job, id)
	} else {
		fmt.Fprintln(out, "no job was deferred: no lifecycle to show")
	}
	if cfg.Spans {
		fmt.Fprintf(out, "every span of this run: on stderr, as JSON (-spans=false leaves them out)\n")
	}
	return ms, nil
}

// handler calls the API for each job and prints each run.
type handler struct {
	mode   string
	pause  bool
	url    string
	client *http.Client
	out    *syncWriter
	start  time.Time

	mu        sync.Mutex
	runs      []runRecord
	succeeded int
	remaining int           // jobs not yet done, succeeded or given up
	done      chan struct{} // closed when remaining reaches 0
	wall      time.Duration
}

func (h *handler) callAPI(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
	r := runRecord{Job: job.N, ID: jc.JobID, Attempt: jc.Attempt, Deferrals: jc.Deferrals, Priority: jc.Priority, Started: time.Since(h.start)}
	err := h.call(ctx, &r, jc)
	r.At = time.Since(h.start)
	var final bool
	switch {
	case err == nil:
		r.Returned, final = "nil: acked", true
	case errors.As(err, new(*queuey.DeferError)):
		r.Returned = fmt.Sprintf("Defer(%v)", r.RetryAfter)
	case errors.As(err, new(*queuey.PauseError)):
		r.Returned = fmt.Sprintf("PauseQueue(%v)", r.RetryAfter)
	case errors.As(err, new(*queuey.FatalError)):
		r.Returned, final = "Fatalf: dead-lettered", true
	default:
		r.Returned, final = "error: "+err.Error(), jc.IsLastAttempt()
	}
	h.record(r, final)
	return err
}

// call makes the request and says what to do with the answer.
func (h *handler) call(ctx context.Context, r *runRecord, jc queuey.JobContext) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/?job=%d", h.url, r.Job), nil)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err // retryable: backoff, then the dead letters
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	r.Status = resp.StatusCode
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusTooManyRequests:
		retryAfter, err := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if err != nil {
			retryAfter = time.Second // a 429 without a usable Retry-After: wait a second
		}
		r.RetryAfter = retryAfter
		if jc.Deferrals >= maxDeferrals { // the cap is the handler's own
			return queuey.Fatalf("still rate limited after %d deferrals", jc.Deferrals)
		}
		if h.pause {
			return queuey.PauseQueue(retryAfter, "429")
		}
		return queuey.Defer(retryAfter, "429 rate limited") // same attempt, ahead of the backlog
	default:
		return fmt.Errorf("unexpected answer %s", resp.Status)
	}
}

// record keeps and prints a run; final says the job is done.
func (h *handler) record(r runRecord, final bool) {
	answer := "call failed"
	switch r.Status {
	case 0:
	case http.StatusTooManyRequests:
		answer = fmt.Sprintf("429 Retry-After: %d", int(r.RetryAfter/time.Second))
	default:
		answer = fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
	}
	h.out.printf("%s %6.3fs  job %3d  attempt %d  deferrals %d  priority %2d  API %-22s -> %s\n",
		h.mode, r.At.Seconds(), r.Job, r.Attempt, r.Deferrals, r.Priority, answer, r.Returned)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, r)
	if r.Status == http.StatusOK {
		h.succeeded++
	}
	if final {
		if h.remaining--; h.remaining == 0 {
			h.wall = time.Since(h.start)
			close(h.done)
		}
	}
}

// printSummaries prints the modes' summaries side by side.
func printSummaries(out io.Writer, modes []modeSummary) {
	fmt.Fprintf(out, "\n%-36s", "summary")
	for _, m := range modes {
		fmt.Fprintf(out, "%10s", m.Mode)
	}
	fmt.Fprintln(out)
	row := func(label string, value func(modeSummary) string) {
		fmt.Fprintf(out, "  %-34s", label)
		for _, m := range modes {
			fmt.Fprintf(out, "%10s", value(m))
		}
		fmt.Fprintln(out)
	}
	num := func(f func(modeSummary) int) func(modeSummary) string {
		return func(m modeSummary) string { return fmt.Sprint(f(m)) }
	}
	row("jobs", num(func(m modeSummary) int { return m.Jobs }))
	row("jobs succeeded", num(func(m modeSummary) int { return m.Succeeded }))
	row("calls OK (200)", num(func(m modeSummary) int { return m.OK }))
	row("calls answered 429 (wasted)", num(func(m modeSummary) int { return m.Limited }))
	row("seconds with a 429", num(func(m modeSummary) int { return m.LimitedSeconds }))
	row("most 429s in one second", num(func(m modeSummary) int { return m.MostInASecond }))
	row("dead letters", num(func(m modeSummary) int { return m.DeadLetters }))
	row("wall time", func(m modeSummary) string { return fmt.Sprintf("%.1fs", m.Wall.Seconds()) })
	if len(modes) == 2 {
		fmt.Fprintf(out, "with Defer every queued job calls again and is told 429 each second; with PauseQueue only the\n"+
			"calls already in flight are (about the prefetch, %d, per limited second), and no attempt is spent either way\n", modes[1].Prefetch)
	}
}

// syncWriter serialises writes: handlers run concurrently.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) printf(format string, args ...any) { fmt.Fprintf(s, format, args...) }

// recorder is a backend that notes the queues declared and the hold queues
// used, so that they can be deleted from RabbitMQ at the end.
type recorder struct {
	broker.Backend
	made *recorded
}

type recorded struct {
	mu    sync.Mutex
	names map[string]bool
}

func (r *recorded) add(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.names[n] = true
	}
}

func (r *recorded) sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.names))
}

func (r *recorder) Declare(ctx context.Context, queues ...broker.QueueSpec) error {
	// Noted before the call: a declare that fails part-way may have made some.
	for _, q := range queues {
		r.made.add(q.Name, broker.DeadQueueName(q.Name))
	}
	return r.Backend.Declare(ctx, queues...)
}

func (r *recorder) DeclareHold(ctx context.Context, queue string, ttl time.Duration) error {
	r.made.add(broker.HoldQueueName(queue, ttl))
	return r.Backend.DeclareHold(ctx, queue, ttl)
}
