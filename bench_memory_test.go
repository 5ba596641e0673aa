package queuey_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// Benchmarks of the memory backend end to end (scenarios 5 and 7 of
// BENCHMARKS.md):
//
//	go test -run '^$' -bench 'Memory|BareChannel' -benchmem -count 3 .

// benchMemJob is a trivial job; Q spreads it over queues q0..qN (the zero
// value is q0, so a handler can be registered for it).
type benchMemJob struct {
	N int    `json:"n"`
	Q string `json:"q,omitempty"`
}

func (benchMemJob) Kind() string { return "bench_mem" }
func (j benchMemJob) Queue() queuey.Queue {
	if j.Q == "" {
		return queuey.Queue{Name: "q0"}
	}
	return queuey.Queue{Name: j.Q}
}

const benchMemProducers = 2 // enqueuing goroutines; the machine has 2 cores

func benchQueues(n int) []queuey.Queue {
	qs := make([]queuey.Queue, n)
	for i := range qs {
		qs[i] = queuey.Queue{Name: fmt.Sprintf("q%d", i)}
	}
	return qs
}

// floorJob is a job whose JSON costs next to nothing: it encodes as {} and
// decodes by doing nothing. It measures what queuey costs around a job's
// own encoding.
type floorJob struct{}

func (floorJob) Kind() string                 { return "bench_floor" }
func (floorJob) Queue() queuey.Queue          { return queuey.Queue{Name: "q0"} }
func (floorJob) MarshalJSON() ([]byte, error) { return []byte("{}"), nil }
func (*floorJob) UnmarshalJSON([]byte) error  { return nil }

// runMemEndToEnd enqueues b.N jobs from benchMemProducers goroutines, spread
// round-robin over set's queues, while a worker runs them; the clock stops
// when the last has run.
func runMemEndToEnd(b *testing.B, be broker.Backend, set queuey.QueueSet, wcfg queuey.WorkerConfig) {
	b.Helper()
	runMemJobs(b, be, set, wcfg, func(n int, q string) benchMemJob { return benchMemJob{N: n, Q: q} })
}

// runMemJobs is runMemEndToEnd with the jobs job(i, queue name) makes; the
// queue name is empty for the job's own queue.
func runMemJobs[J queuey.Job](b *testing.B, be broker.Backend, set queuey.QueueSet, wcfg queuey.WorkerConfig, job func(n int, q string) J) {
	b.Helper()
	ctx := context.Background()
	discard := slog.New(slog.DiscardHandler)
	wcfg.Logger = discard
	producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: discard, Clock: wcfg.Clock})
	if err != nil {
		b.Fatal(err)
	}
	w := startMemWorker[J](b, be, set, wcfg)
	defer w.stop()
	if _, err := producer.Enqueue(ctx, job(0, "")); err != nil {
		b.Fatal(err)
	}
	<-w.done // the warm-up job
	names := make([]string, len(set.Queues))
	for i, q := range set.Queues {
		names[i] = q.Name
	}
	w.target.Store(int64(b.N) + 1)

	b.ReportAllocs()
	b.ResetTimer()
	enqueueMemJobs(b, func(i int) error {
		q := "" // the job's default queue
		if len(names) > 1 {
			q = names[i%len(names)]
		}
		_, err := producer.Enqueue(ctx, job(i, q))
		return err
	})
	<-w.done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// memWorker is a running worker of the memory benchmarks, whose handler
// counts the jobs it ran and signals done when it has run target.
type memWorker struct {
	target atomic.Int64
	done   chan struct{}
	stop   func() // stops the worker and reports its error
}

// startMemWorker starts a worker of set on be whose handler of J counts
// the jobs; its target is 1, the warm-up job.
func startMemWorker[J queuey.Job](b *testing.B, be broker.Backend, set queuey.QueueSet, wcfg queuey.WorkerConfig) *memWorker {
	b.Helper()
	worker, err := queuey.NewWorker(be, set, &wcfg)
	if err != nil {
		b.Fatal(err)
	}
	w := &memWorker{done: make(chan struct{}, 1)}
	w.target.Store(1)
	var handled atomic.Int64
	if err := queuey.Handle(worker, func(context.Context, J, queuey.JobContext) error {
		if handled.Add(1) == w.target.Load() {
			w.done <- struct{}{}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	w.stop = func() {
		stop()
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}
	return w
}

// enqueueMemJobs calls enqueue with 0 to b.N-1 from benchMemProducers
// goroutines at once.
func enqueueMemJobs(b *testing.B, enqueue func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchMemProducers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := enqueue(int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkMemoryEndToEnd: producer, memory backend, worker (prefetch 16,
// concurrency 1, 2, 8) and a trivial handler. Goal: 1,000,000 jobs/s.
func BenchmarkMemoryEndToEnd(b *testing.B) {
	for _, c := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			set := queuey.QueueSet{Queues: []queuey.Queue{{Name: "q0", Prefetch: queuey.DefaultPrefetch}}}
			runMemEndToEnd(b, memory.New(nil), set, queuey.WorkerConfig{Concurrency: c})
		})
	}
}

// BenchmarkMemoryCancellation is what following the ledger of
// cancellations costs jobs that are not cancelled (ARCHITECTURE.md §2,
// "Cancellation: the ledger"), at concurrency 8, in one run: a worker on
// a backend that keeps no ledger (a wrapper hides it: no follower, no
// look, no ctx of the job's own), one with an empty ledger, and one with
// 1,000 other jobs cancelled (a look in the set for every job).
func BenchmarkMemoryCancellation(b *testing.B) {
	set := queuey.QueueSet{Queues: []queuey.Queue{{Name: "q0", Prefetch: queuey.DefaultPrefetch}}}
	wcfg := queuey.WorkerConfig{Concurrency: 8}
	b.Run("ledger=none", func(b *testing.B) {
		runMemEndToEnd(b, struct{ broker.Backend }{memory.New(nil)}, set, wcfg)
	})
	b.Run("ledger=empty", func(b *testing.B) { runMemEndToEnd(b, memory.New(nil), set, wcfg) })
	b.Run("ledger=1000", func(b *testing.B) {
		be := memory.New(nil)
		p, err := queuey.NewProducer(context.Background(), be, set, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 1000 {
			if err := p.Cancel(context.Background(), fmt.Sprintf("other-%d", i)); err != nil {
				b.Fatal(err)
			}
		}
		runMemEndToEnd(b, be, set, wcfg)
	})
}

// BenchmarkMemoryFloor is BenchmarkMemoryEndToEnd at concurrency 8 with a
// job whose JSON costs next to nothing (floorJob): the rest of the
// pipeline (envelope, backend, mailbox, acks, garbage collection), which
// bounds what making the payload's encoding cheaper could gain.
func BenchmarkMemoryFloor(b *testing.B) {
	set := queuey.QueueSet{Queues: []queuey.Queue{{Name: "q0", Prefetch: queuey.DefaultPrefetch}}}
	runMemJobs(b, memory.New(nil), set, queuey.WorkerConfig{Concurrency: 8}, func(int, string) floorJob { return floorJob{} })
}

// BenchmarkBareChannelPool is the baseline of BenchmarkMemoryEndToEnd: the
// same job values sent on a channel (buffered like the prefetch) to a pool
// of goroutines running a trivial handler.
func BenchmarkBareChannelPool(b *testing.B) {
	for _, c := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			ch := make(chan benchMemJob, queuey.DefaultPrefetch)
			var sink atomic.Int64
			handler := func(_ context.Context, j benchMemJob) error {
				sink.Add(int64(j.N & 1))
				return nil
			}
			b.ReportAllocs()
			b.ResetTimer()
			var workers sync.WaitGroup
			for range c {
				workers.Go(func() {
					for j := range ch {
						_ = handler(context.Background(), j)
					}
				})
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			for range benchMemProducers {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						ch <- benchMemJob{N: int(i)}
					}
				})
			}
			wg.Wait()
			close(ch)
			workers.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkMemoryQueues: end to end as the queue actors grow (jobs spread
// round-robin, concurrency 8).
func BenchmarkMemoryQueues(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			set := queuey.QueueSet{Queues: benchQueues(n)}
			runMemEndToEnd(b, memory.New(nil), set, queuey.WorkerConfig{Concurrency: 8})
		})
	}
}

// heldBackend returns a backend on a mock clock holding n jobs deferred an
// hour, and the producer that held them.
func heldBackend(b *testing.B, n int) (*memory.Backend, *clock.Mock, *queuey.Producer, queuey.QueueSet) {
	b.Helper()
	mock := clock.NewMock()
	be := memory.New(&memory.Options{Clock: mock})
	set := queuey.QueueSet{Queues: benchQueues(1)}
	producer, err := queuey.NewProducer(context.Background(), be, set,
		&queuey.ProducerConfig{Clock: mock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := producer.Defer(context.Background(), benchMemJob{N: i}, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	return be, mock, producer, set
}

var heldSizes = []int{0, 10_000, 100_000}

// BenchmarkMemoryHold: the cost of one more Defer (one more held job) when
// 0, 10k or 100k are held already.
func BenchmarkMemoryHold(b *testing.B) {
	for _, n := range heldSizes {
		b.Run(fmt.Sprintf("held=%dk", n/1000), func(b *testing.B) {
			be, _, producer, _ := heldBackend(b, n)
			defer be.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := producer.Defer(ctx, benchMemJob{N: i}, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemoryHeldEndToEnd: end-to-end throughput of ordinary jobs
// while 0, 10k or 100k other jobs are held.
func BenchmarkMemoryHeldEndToEnd(b *testing.B) {
	for _, n := range heldSizes {
		b.Run(fmt.Sprintf("held=%dk", n/1000), func(b *testing.B) {
			be, mock, _, set := heldBackend(b, n)
			defer be.Close()
			runMemEndToEnd(b, be, set, queuey.WorkerConfig{Concurrency: 8, Clock: mock})
		})
	}
}

// BenchmarkMemoryRelease: landing 10k or 100k held jobs on their queue when
// their hold ends (no consumer). One op releases them all; ns/op includes
// the 1 ms the mock clock sleeps after firing a timer.
func BenchmarkMemoryRelease(b *testing.B) {
	for _, n := range heldSizes[1:] {
		b.Run(fmt.Sprintf("held=%dk", n/1000), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				be, mock, _, _ := heldBackend(b, n)
				b.StartTimer()
				mock.Add(time.Hour)
				for be.Pending("q0") < n { // Pending releases what is due itself
				}
				b.StopTimer()
				_ = be.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
