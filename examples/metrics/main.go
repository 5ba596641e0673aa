// Command metrics serves a queue set's OpenTelemetry metrics on /metrics,
// in Prometheus's text format, through the OpenTelemetry Prometheus
// exporter: package trace's job metrics (outcomes, handler durations,
// lateness, in flight) beside the queue depth gauges of
// trace.ObserveDepths (ready, unacked, held, dead, suspects), which read
// the broker at each scrape.
//
//	cd examples/metrics && go run . [-listen 127.0.0.1:9464] [-every 500ms]
//	curl -s http://127.0.0.1:9464/metrics | grep ^queuey_
//
// It runs on the memory backend, with jobs flowing: twelve at the start,
// then one every -every (0: none). A job whose number is a multiple of 4
// fails fatally (dead-lettered), one that is a multiple of 3 is deferred
// for an hour (held), and the others succeed. On RabbitMQ the same code
// takes rabbitmq.Dial's backend and a trace.DepthOptions.Management for
// the unacked and held counts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// work is the example's one queue.
var work = queuey.Queue{Name: "work", Prefetch: 4}

// set is the example's queue set: its queues are metrics.work and so on.
var set = queuey.QueueSet{Prefix: "metrics", Queues: []queuey.Queue{work}}

// Task is the example's job.
type Task struct {
	N int `json:"n"`
}

// Kind names the job on the wire.
func (Task) Kind() string { return "task" }

// Queue is the job's queue.
func (Task) Queue() queuey.Queue { return work }

// run is the handler: fatal for a multiple of 4, an hour's deferral for
// a multiple of 3, else done.
func run(_ context.Context, t Task, jc queuey.JobContext) error {
	switch {
	case t.N%4 == 0:
		return queuey.Fatalf("task %d cannot be done", t.N)
	case t.N%3 == 0 && jc.Deferrals == 0:
		return queuey.Defer(time.Hour, "not before an hour")
	}
	return nil
}

// firstJobs is how many jobs are enqueued at the start.
const firstJobs = 12

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "address to serve /metrics on (port 0: a free one)")
	every := flag.Duration("every", 500*time.Millisecond, "enqueue a job this often after the first twelve (0: none)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a, err := start(ctx, *listen, *every)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
	fmt.Printf("metrics on http://%s/metrics (Ctrl-C stops)\n", a.addr)
	if err := a.wait(); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// app is the running example: a worker, a producer feeding it and the
// metrics server, each on a goroutine of its own that ends with ctx.
type app struct {
	addr    string
	settled chan queuey.Result // each job's outcome, dropped when full
	wg      sync.WaitGroup
	errs    chan error
}

// start builds the meter provider on a Prometheus exporter, the worker
// and the server on listen, and starts them until ctx ends.
func start(ctx context.Context, listen string, every time.Duration) (*app, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	backend := memory.New(nil)
	a := &app{settled: make(chan queuey.Result, 4*firstJobs), errs: make(chan error, 3)}
	worker, producer, err := a.queues(ctx, backend, mp)
	if err != nil {
		backend.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		backend.Close()
		return nil, err
	}
	a.addr = ln.Addr().String()
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	a.spawn(func() error { return serve(ctx, srv, ln) })
	a.spawn(func() error { return worker.Run(ctx) })
	a.spawn(func() error { return feed(ctx, producer, every) })
	go func() { // stops the rest once the three have
		a.wg.Wait()
		_ = mp.Shutdown(context.Background())
		backend.Close()
		close(a.errs)
	}()
	return a, nil
}

// queues registers the instrumentation and the depth gauges on mp, and
// returns the worker and the producer, with the first jobs enqueued.
func (a *app) queues(ctx context.Context, backend *memory.Backend, mp *sdkmetric.MeterProvider) (*queuey.Worker, *queuey.Producer, error) {
	inst, err := trace.New(&trace.Options{MeterProvider: mp})
	if err != nil {
		return nil, nil, err
	}
	if _, err := trace.ObserveDepths(backend, set, &trace.DepthOptions{MeterProvider: mp}); err != nil {
		return nil, nil, err
	}
	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Hooks: a.counted(inst.Hooks())})
	if err != nil {
		return nil, nil, err
	}
	if err := queuey.Handle(worker, run); err != nil {
		return nil, nil, err
	}
	producer, err := queuey.NewProducer(ctx, backend, set, &queuey.ProducerConfig{Hooks: inst.Hooks()})
	if err != nil {
		return nil, nil, err
	}
	for n := 1; n <= firstJobs; n++ {
		if _, err := producer.Enqueue(ctx, Task{N: n}); err != nil {
			return nil, nil, err
		}
	}
	return worker, producer, nil
}

// counted is h with each delivery's outcome sent to a.settled too, once
// the instrumentation has counted it.
func (a *app) counted(h *queuey.Hooks) *queuey.Hooks {
	return &queuey.Hooks{Publish: h.Publish, Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		ctx, after := h.Deliver(ctx, d)
		return ctx, func(o queuey.Outcome) {
			after(o)
			select {
			case a.settled <- o.Result:
			default:
			}
		}
	}}
}

// spawn runs f on a goroutine of the app's.
func (a *app) spawn(f func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := f(); err != nil {
			a.errs <- err
		}
	}()
}

// wait returns once everything stopped, with the first error.
func (a *app) wait() error {
	var first error
	for err := range a.errs {
		first = errors.Join(first, err)
	}
	return first
}

// serve serves srv on ln until ctx ends.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}

// feed enqueues a job every interval until ctx ends.
func feed(ctx context.Context, p *queuey.Producer, every time.Duration) error {
	if every <= 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := firstJobs + 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, err := p.Enqueue(ctx, Task{N: n}); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}
