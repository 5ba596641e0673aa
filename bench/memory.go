package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
)

// memJob is the trivial job of the memory scenarios. Q picks its queue
// among "q0".."q<n-1>" (the zero value is q0), for the scale scenario.
type memJob struct {
	N int    `json:"n"`
	Q string `json:"q,omitempty"`
}

func (memJob) Kind() string { return "mem" }
func (j memJob) Queue() queuey.Queue {
	if j.Q == "" {
		return queuey.Queue{Name: "q0"}
	}
	return queuey.Queue{Name: j.Q}
}

// memRun is one memory-backend run.
type memRun struct {
	rate        float64 // jobs/s
	allocs      float64 // per job
	bytes       float64 // allocated per job
	heapPerJob  float64 // live heap growth per job after the run (GC'd)
	goroutines  int     // while running
	holdNs      float64 // per Hold (held scenario)
	heldBytes   float64 // live heap per held job
	releaseMs   float64 // landing every held job once due
	releaseRate float64 // jobs/s
}

func queueNames(n int) []queuey.Queue {
	qs := make([]queuey.Queue, n)
	for i := range qs {
		qs[i] = queuey.Queue{Name: fmt.Sprintf("q%d", i)}
	}
	return qs
}

// memEndToEnd enqueues n jobs from producers goroutines, spread over the
// set's queues, while a worker with concurrency handlers runs them; it
// returns when the last has run.
func memEndToEnd(be *memory.Backend, set queuey.QueueSet, wcfg queuey.WorkerConfig, n, producers int) (memRun, error) {
	ctx := context.Background()
	wcfg.Logger = discard
	producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: discard, Clock: wcfg.Clock})
	if err != nil {
		return memRun{}, err
	}
	worker, err := queuey.NewWorker(be, set, &wcfg)
	if err != nil {
		return memRun{}, err
	}
	var handled atomic.Int64
	target := atomic.Int64{}
	target.Store(1) // the warm-up job
	done := make(chan struct{}, 1)
	err = queuey.Handle(worker, func(context.Context, memJob, queuey.JobContext) error {
		if handled.Add(1) == target.Load() {
			done <- struct{}{}
		}
		return nil
	})
	if err != nil {
		return memRun{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	if _, err := producer.Enqueue(ctx, memJob{}); err != nil {
		return memRun{}, err
	}
	<-done
	names := make([]string, len(set.Queues))
	for i, q := range set.Queues {
		names[i] = q.Name
	}
	target.Store(int64(n) + 1)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				q := ""
				if len(names) > 1 {
					q = names[i%int64(len(names))]
				}
				if _, err := producer.Enqueue(ctx, memJob{N: int(i), Q: q}); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	gr := runtime.NumGoroutine()
	wg.Wait()
	if err := failed.Load(); err != nil {
		return memRun{}, *err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return memRun{}, fmt.Errorf("only %d of %d jobs ran", handled.Load()-1, n)
	}
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	out := memRun{
		rate:       float64(n) / el.Seconds(),
		allocs:     float64(after.Mallocs-before.Mallocs) / float64(n),
		bytes:      float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
		goroutines: gr,
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	out.heapPerJob = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	return out, nil
}

// bareJob is what the bare pool passes: the same struct as memJob.
var bareSink atomic.Int64

// barePool is the baseline: producers send n jobs on a channel (buffered
// like the queue's prefetch) to concurrency goroutines running a trivial
// handler.
func barePool(n, producers, concurrency, buffer int) memRun {
	ch := make(chan memJob, buffer)
	var handled atomic.Int64
	var workers sync.WaitGroup
	handler := func(_ context.Context, j memJob) error {
		bareSink.Add(int64(j.N & 1))
		return nil
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range concurrency {
		workers.Go(func() {
			for j := range ch {
				_ = handler(context.Background(), j)
				handled.Add(1)
			}
		})
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				ch <- memJob{N: int(i)}
			}
		})
	}
	wg.Wait()
	close(ch)
	workers.Wait()
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	return memRun{
		rate:   float64(n) / el.Seconds(),
		allocs: float64(after.Mallocs-before.Mallocs) / float64(n),
		bytes:  float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
	}
}

// scenarioMemory is scenario 5: the memory backend end to end at
// concurrency 1, 2 and 8 against a bare channel-fed pool.
func scenarioMemory(cfg config) ([]row, error) {
	var rows []row
	for _, c := range []int{1, 2, 8} {
		var lib, bare, la, lb, ba series
		for range cfg.count {
			set := queuey.QueueSet{Queues: []queuey.Queue{{Name: "q0", Prefetch: cfg.memPrefetch}}}
			l, err := memEndToEnd(memory.New(nil), set, queuey.WorkerConfig{Concurrency: c}, cfg.memN, cfg.memProducers)
			if err != nil {
				return rows, err
			}
			b := barePool(cfg.memN, cfg.memProducers, c, cfg.memPrefetch)
			lib, bare = append(lib, l.rate), append(bare, b.rate)
			la, lb, ba = append(la, l.allocs), append(lb, l.bytes), append(ba, b.allocs)
		}
		r := ratios(lib, bare)
		name := fmt.Sprintf("5 memory c=%d", c)
		rows = append(rows,
			row{scenario: name, metric: "jobs/s vs bare channel pool", lib: rate(lib.median()), base: rate(bare.median()),
				ratio: ratioStr(r.median()), goal: "≥ 1M/s", result: passIf(lib.median() >= 1e6), spread: lib.spread(),
				headline: c == 2},
			row{scenario: name, metric: "allocs/job, bytes/job",
				lib:  fmt.Sprintf("%.1f allocs, %.0f B", la.median(), lb.median()),
				base: fmt.Sprintf("%.1f allocs", ba.median())},
		)
	}
	return rows, nil
}

// travelJob defers and fails its way across 30 days (scenario 6):
//
//	day  0  Producer.Defer 5 d
//	day  5  attempt 1: Defer 5 d
//	day 10  attempt 1: Defer 5 d
//	day 15  attempt 1: fails → retry in 5 d
//	day 20  attempt 2: Defer 5 d
//	day 25  attempt 2: fails → retry in 5 d
//	day 30  attempt 3: succeeds
type travelJob struct {
	I int `json:"i"`
}

func (travelJob) Kind() string        { return "travel" }
func (travelJob) Queue() queuey.Queue { return queuey.Queue{Name: "travel"} }

const (
	day       = 24 * time.Hour
	travelGap = 5 * day
)

var errTravel = errors.New("simulated failure")

func travel(_ context.Context, _ travelJob, jc queuey.JobContext) error {
	switch {
	case jc.Attempt == 1 && jc.Deferrals < 2, jc.Attempt == 2 && jc.Deferrals < 3:
		return queuey.Defer(travelGap, "wait")
	case jc.Attempt < 3:
		return errTravel
	}
	return nil
}

type travelRun struct {
	wall      time.Duration
	runs      int64
	succeeded int64
	simulated time.Duration
}

// timeTravel runs n travelJobs through 30 simulated days on a clock.Mock.
// All jobs are enqueued at the same mock instant, so each round's holds
// fall due together: one backend timer fires per round, and the mock's
// 1 ms real sleep per fired timer is paid 6 times, not 60,000.
func timeTravel(n int) (travelRun, error) {
	ctx := context.Background()
	mock := clock.NewMock()
	epoch := mock.Now()
	be := memory.New(&memory.Options{Clock: mock})
	defer be.Close()
	set := queuey.QueueSet{Queues: []queuey.Queue{{
		Name: "travel", Prefetch: 64,
		Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(travelGap)},
	}}}
	producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Clock: mock, Logger: discard})
	if err != nil {
		return travelRun{}, err
	}
	worker, err := queuey.NewWorker(be, set, &queuey.WorkerConfig{Clock: mock, Logger: discard, Concurrency: 8})
	if err != nil {
		return travelRun{}, err
	}
	var runs, succeeded atomic.Int64
	if err := queuey.Handle(worker, func(ctx context.Context, j travelJob, jc queuey.JobContext) error {
		runs.Add(1)
		err := travel(ctx, j, jc)
		if err == nil {
			succeeded.Add(1)
		}
		return err
	}); err != nil {
		return travelRun{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	defer func() { stop(); <-ran }()

	queue := "travel"
	start := time.Now()
	for i := range n {
		if _, err := producer.Defer(ctx, travelJob{I: i}, travelGap); err != nil {
			return travelRun{}, err
		}
	}
	for round := int64(1); round <= 6; round++ {
		mock.Add(travelGap)
		deadline := time.Now().Add(time.Minute)
		for runs.Load() < round*int64(n) || be.Pending(queue) > 0 || be.InFlight(queue) > 0 {
			if time.Now().After(deadline) {
				return travelRun{}, fmt.Errorf("round %d: %d runs, %d pending, %d in flight",
					round, runs.Load(), be.Pending(queue), be.InFlight(queue))
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return travelRun{wall: time.Since(start), runs: runs.Load(), succeeded: succeeded.Load(), simulated: mock.Now().Sub(epoch)}, nil
}

// scenarioTimeTravel is scenario 6.
func scenarioTimeTravel(cfg config) ([]row, error) {
	var wall series
	var last travelRun
	for range cfg.count {
		t, err := timeTravel(cfg.travelJobs)
		if err != nil {
			return nil, err
		}
		if t.succeeded != int64(cfg.travelJobs) {
			return nil, fmt.Errorf("%d of %d jobs succeeded", t.succeeded, cfg.travelJobs)
		}
		wall, last = append(wall, t.wall.Seconds()), t
	}
	return []row{{
		scenario: fmt.Sprintf("6 time travel %d jobs", cfg.travelJobs),
		metric:   fmt.Sprintf("wall time for %.0f simulated days, %d runs", last.simulated.Hours()/24, last.runs),
		lib:      fmt.Sprintf("%.0f ms", wall.median()*1000), goal: "< 1 s",
		result: passIf(wall.median() < 1), spread: wall.spread(), headline: true,
	}}, nil
}

// memHeld holds n jobs (a long deferral, on a mock clock that does not
// move), then measures end-to-end throughput with them sitting there, then
// the release of all of them at once.
func memHeld(cfg config, n int) (memRun, error) {
	ctx := context.Background()
	mock := clock.NewMock()
	be := memory.New(&memory.Options{Clock: mock})
	defer be.Close()
	set := queuey.QueueSet{Queues: []queuey.Queue{{Name: "q0", Prefetch: cfg.memPrefetch}}}
	producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Clock: mock, Logger: discard})
	if err != nil {
		return memRun{}, err
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := range n {
		if _, err := producer.Defer(ctx, memJob{N: i}, time.Hour); err != nil {
			return memRun{}, err
		}
	}
	var out memRun
	if n > 0 {
		out.holdNs = float64(time.Since(start).Nanoseconds()) / float64(n)
		runtime.GC()
		runtime.ReadMemStats(&after)
		out.heldBytes = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	}
	e, err := memEndToEnd(be, set, queuey.WorkerConfig{Concurrency: 8, Clock: mock}, cfg.memN, cfg.memProducers)
	if err != nil {
		return memRun{}, err
	}
	out.rate = e.rate
	if n > 0 {
		start = time.Now()
		mock.Add(time.Hour) // the mock sleeps 1 ms after firing the backend's timer
		for be.Pending("q0") < n {
			time.Sleep(10 * time.Microsecond)
		}
		el := time.Since(start)
		out.releaseMs = float64(el.Microseconds()) / 1000
		out.releaseRate = float64(n) / el.Seconds()
	}
	return out, nil
}

// scenarioScale is scenario 7: throughput and memory as queues and held
// jobs grow.
func scenarioScale(cfg config) ([]row, error) {
	var rows []row
	var base float64
	for _, nq := range []int{1, 10, 100} {
		var r, heap series
		gr := 0
		for range cfg.count {
			set := queuey.QueueSet{Queues: queueNames(nq)}
			for i := range set.Queues {
				set.Queues[i].Prefetch = cfg.memPrefetch
			}
			m, err := memEndToEnd(memory.New(nil), set, queuey.WorkerConfig{Concurrency: 8}, cfg.memN, cfg.memProducers)
			if err != nil {
				return rows, err
			}
			r, heap, gr = append(r, m.rate), append(heap, m.heapPerJob), m.goroutines
		}
		if nq == 1 {
			base = r.median()
		}
		rows = append(rows, row{
			scenario: fmt.Sprintf("7 scale %d queue actors", nq),
			metric:   fmt.Sprintf("jobs/s (c=8); live heap/job after; goroutines %d", gr),
			lib:      fmt.Sprintf("%s; %.0f B", rate(r.median()), heap.median()),
			ratio:    fmt.Sprintf("%.2f vs 1 queue", r.median()/base), spread: r.spread(),
		})
	}
	for _, n := range []int{0, 10000, 100000} {
		var r, hold, hb, rel series
		for range cfg.count {
			m, err := memHeld(cfg, n)
			if err != nil {
				return rows, err
			}
			r, hold, hb, rel = append(r, m.rate), append(hold, m.holdNs), append(hb, m.heldBytes), append(rel, m.releaseMs)
		}
		if n == 0 {
			base = r.median()
			rows = append(rows, row{scenario: "7 scale 0 held", metric: "jobs/s (c=8)", lib: rate(r.median()), spread: r.spread()})
			continue
		}
		rows = append(rows, row{
			scenario: fmt.Sprintf("7 scale %dk held", n/1000),
			metric:   "jobs/s (c=8) with them held; Defer cost; live B/held job; release all",
			lib: fmt.Sprintf("%s; %.2f µs/Defer; %.0f B; %s", rate(r.median()), hold.median()/1000, hb.median(),
				ms(rel.median())),
			ratio: fmt.Sprintf("%.2f vs 0 held", r.median()/base), spread: r.spread(),
			headline: n == 100000,
		})
	}
	return rows, nil
}
