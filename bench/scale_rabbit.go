package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// scaleJob is scenario 10's job: I is its queue's index among the set's
// (s0 when it names none), SentNs when it was published.
type scaleJob struct {
	I      int    `json:"i"`
	SentNs int64  `json:"sent_ns"`
	Pad    string `json:"pad"`
}

func (scaleJob) Kind() string          { return "scale" }
func (j scaleJob) Queue() queuey.Queue { return queuey.Queue{Name: "s" + strconv.Itoa(j.I)} }

// rabbitScale is one run of scenario 10 with nq queues.
type rabbitScale struct {
	declareMs   float64 // NewProducer declaring the queues and their dead-letter queues
	consumeAll  float64 // ms from Run to the first job of every queue run
	published   float64 // jobs/s confirmed, one EnqueueBatch of them all
	rate        float64 // jobs/s, first publish to last handle
	heapPerQ    float64 // live Go heap per queue, bytes, once every queue consumes
	goroutinesQ float64 // goroutines per queue
	brokerPerQ  float64 // the broker's RSS per queue, bytes (its two queues and a channel)
}

// scaleRig is a worker of nq queues on RabbitMQ whose handler counts,
// per queue, the jobs it ran.
type scaleRig struct {
	be       *rabbitmq.Backend
	producer *queuey.Producer
	worker   *queuey.Worker
	prefix   string
	nq       int
	firsts   []atomic.Bool
	missing  atomic.Int64  // queues that have not run a job yet
	allFirst chan struct{} // closed when missing reaches 0
	lat      atomic.Pointer[latencies]
}

func newScaleRig(ctx context.Context, cfg config, nq int) (*scaleRig, float64, error) {
	quietBroker()
	be, err := rabbitmq.Dial(ctx, cfg.amqpURL, &rabbitmq.Options{Logger: discard, ConnectionName: "queuey bench scale"})
	if err != nil {
		return nil, 0, fmt.Errorf("this scenario needs RabbitMQ: %w", err)
	}
	r := &scaleRig{be: be, prefix: unique("scale"), nq: nq, firsts: make([]atomic.Bool, nq), allFirst: make(chan struct{})}
	r.missing.Store(int64(nq))
	r.lat.Store(newLatencies(0))
	set := queuey.QueueSet{Prefix: r.prefix}
	for i := range nq {
		set.Queues = append(set.Queues, queuey.Queue{Name: "s" + strconv.Itoa(i), Prefetch: cfg.prefetch, MaxPriority: maxPriority})
	}
	start := time.Now()
	if r.producer, err = queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: discard}); err != nil {
		r.close(cfg)
		return nil, 0, err
	}
	declared := float64(time.Since(start).Microseconds()) / 1000
	if r.worker, err = queuey.NewWorker(be, set, &queuey.WorkerConfig{Concurrency: cfg.prefetch, Logger: discard}); err != nil {
		r.close(cfg)
		return nil, 0, err
	}
	err = queuey.Handle(r.worker, func(_ context.Context, j scaleJob, _ queuey.JobContext) error {
		if !r.firsts[j.I].Swap(true) && r.missing.Add(-1) == 0 {
			close(r.allFirst)
		}
		r.lat.Load().record(j.SentNs)
		return nil
	})
	if err != nil {
		r.close(cfg)
		return nil, 0, err
	}
	return r, declared, nil
}

// close closes the backend and deletes the queues.
func (r *scaleRig) close(cfg config) {
	_ = r.be.Close()
	names := make([]string, 0, 2*r.nq)
	for i := range r.nq {
		q := broker.QueueName(r.prefix, "s"+strconv.Itoa(i))
		names = append(names, q, broker.DeadQueueName(q))
	}
	names = append(names, broker.CancelLedgerName(r.prefix), broker.CancelFollowersName(r.prefix))
	deleteQueues(cfg.amqpURL, names...)
}

// rabbitScaleRun starts a worker of nq queues, times it until every
// queue has run a job, measures what it holds then, and puts cfg.n jobs
// spread over the queues through it.
func rabbitScaleRun(ctx context.Context, cfg config, nq int) (rabbitScale, error) {
	r, declared, err := newScaleRig(ctx, cfg, nq)
	if err != nil {
		return rabbitScale{}, err
	}
	defer r.close(cfg)
	out := rabbitScale{declareMs: declared}
	heap0, gr0, rss0 := liveHeap(), runtime.NumGoroutine(), brokerRSS()
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	start := time.Now()
	go func() { ran <- r.worker.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	firsts := make([]queuey.Job, nq)
	for i := range firsts {
		firsts[i] = scaleJob{I: i, SentNs: time.Now().UnixNano()}
	}
	if _, err := r.producer.EnqueueBatch(ctx, firsts); err != nil {
		return out, err
	}
	select {
	case <-r.allFirst:
	case <-time.After(5 * time.Minute):
		return out, fmt.Errorf("after 5 min, %d of %d queues had run no job", r.missing.Load(), nq)
	}
	out.consumeAll = float64(time.Since(start).Microseconds()) / 1000
	out.heapPerQ = float64(liveHeap()-heap0) / float64(nq)
	out.goroutinesQ = float64(runtime.NumGoroutine()-gr0) / float64(nq)
	out.brokerPerQ = float64(brokerRSS()-rss0) / float64(nq)

	return out, r.throughput(ctx, cfg, &out)
}

// throughput publishes cfg.n jobs spread over the queues in one
// EnqueueBatch (256 confirms in flight) while the worker runs them.
func (r *scaleRig) throughput(ctx context.Context, cfg config, out *rabbitScale) error {
	lat, pad := newLatencies(cfg.n), envelopePad(r.prefix+".s0")
	r.lat.Store(lat)
	jobs := make([]queuey.Job, cfg.n)
	begin := time.Now()
	for i := range jobs {
		jobs[i] = scaleJob{I: i % r.nq, SentNs: begin.UnixNano(), Pad: pad}
	}
	if _, err := r.producer.EnqueueBatch(ctx, jobs); err != nil {
		return err
	}
	out.published = float64(cfg.n) / time.Since(begin).Seconds()
	if err := lat.wait(5 * time.Minute); err != nil {
		return err
	}
	out.rate = lat.result(begin).rate
	return nil
}

// liveHeap is the Go heap in use after a collection, bytes.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// brokerRSS sums the resident memory of every beam.smp process (the
// RabbitMQ node on this host), bytes, from /proc; 0 without one.
func brokerRSS() int64 {
	stats, _ := filepath.Glob("/proc/[0-9]*/status")
	var total int64
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("Name:\tbeam.smp")) {
			continue
		}
		_, rest, _ := bytes.Cut(b, []byte("VmRSS:"))
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		kb, _ := strconv.ParseInt(string(bytes.Fields(line)[0]), 10, 64)
		total += kb * 1024
	}
	return total
}

// scenarioRabbitScale is scenario 10: one worker of 1 queue, then of
// cfg.scaleQueues, on RabbitMQ, in the same run.
func scenarioRabbitScale(cfg config) ([]row, error) {
	ctx := context.Background()
	var rows []row
	var base series
	for _, nq := range []int{1, cfg.scaleQueues} {
		var decl, all, r, pub, heap, gr, rss series
		for range cfg.count {
			m, err := rabbitScaleRun(ctx, cfg, nq)
			if err != nil {
				return rows, fmt.Errorf("%d queues: %w", nq, err)
			}
			decl, all, r, pub = append(decl, m.declareMs), append(all, m.consumeAll), append(r, m.rate), append(pub, m.published)
			heap, gr, rss = append(heap, m.heapPerQ), append(gr, m.goroutinesQ), append(rss, m.brokerPerQ)
		}
		if nq == 1 {
			base = r
		}
		name := fmt.Sprintf("10 rabbitmq %d queue(s)", nq)
		rows = append(rows,
			row{scenario: name, metric: "declare the queues (NewProducer)", lib: ms(decl.median()), spread: decl.spread()},
			row{scenario: name, metric: "Run to every queue consuming (its first job run)", lib: ms(all.median()), spread: all.spread(), headline: nq > 1},
			row{scenario: name, metric: fmt.Sprintf("jobs/s, %d jobs spread over the queues (c=%d), first publish to last run", cfg.n, cfg.prefetch), lib: rate(r.median()),
				ratio: fmt.Sprintf("%.2f vs 1 queue", ratios(r, base).median()), spread: r.spread()},
			row{scenario: name, metric: "of which the publish alone (the batch confirmed)", lib: rate(pub.median()), spread: pub.spread()},
			row{scenario: name, metric: "per queue: live Go heap; goroutines; broker RSS", lib: fmt.Sprintf("%.1f kB; %.1f; %.0f kB",
				heap.median()/1024, gr.median(), rss.median()/1024)},
		)
	}
	return rows, nil
}
