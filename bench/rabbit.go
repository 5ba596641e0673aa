package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// The RabbitMQ scenarios compare the library with plain amqp091-go on the
// same broker, in the same run: 256-byte JSON bodies, persistent messages,
// mandatory publishes to the default exchange, confirms, a durable queue
// declared with the library's own arguments (x-max-priority 10), manual
// acks and the same prefetch.

const (
	bodySize    = 256
	maxPriority = 10
)

// benchJob carries its send time; Pad brings the encoded envelope to about
// bodySize bytes.
type benchJob struct {
	SentNs int64  `json:"sent_ns"`
	Pad    string `json:"pad"`
}

func (benchJob) Kind() string        { return "bench" }
func (benchJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// backlogJob is the backlog a deferral must overtake (scenario 4).
type backlogJob struct {
	Pad string `json:"pad"`
}

func (backlogJob) Kind() string        { return "backlog" }
func (backlogJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// deferredJob is deferred by the producer (scenario 4).
type deferredJob struct {
	I int `json:"i"`
}

func (deferredJob) Kind() string        { return "deferred" }
func (deferredJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// envelopePad is the Pad that makes benchJob's envelope on queue about
// bodySize bytes (sent_ns has 19 digits until 2286).
func envelopePad(queue string) string {
	payload, _ := json.Marshal(benchJob{SentNs: time.Now().UnixNano()})
	body, _ := broker.NewEnvelope("bench", queue, payload, time.Now()).Encode()
	return strings.Repeat("x", max(bodySize-len(body), 0))
}

// jsonBody is a JSON object of exactly size bytes carrying sentNs: the raw
// baseline's body.
func jsonBody(sentNs int64, size int) []byte {
	head := fmt.Sprintf(`{"sent_ns":%d,"pad":"`, sentNs)
	pad := max(size-len(head)-2, 0)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

// rawPublishing is the library's message on the wire, as the backend sends
// it: same properties and headers (but the x-queuey-due-ms stamp).
func rawPublishing(body []byte) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    broker.NewJobID(),
		Type:         "bench",
		Headers:      amqp.Table{broker.HeaderAttempt: uint32(1), broker.HeaderDeferrals: uint32(0)},
		Body:         body,
	}
}

// latencies records publish-to-handle latencies and when the last came.
type latencies struct {
	lat  []time.Duration
	n    atomic.Int64
	last atomic.Int64 // unix ns of the latest record
	done chan struct{}
}

func newLatencies(want int) *latencies {
	return &latencies{lat: make([]time.Duration, want), done: make(chan struct{})}
}

func (l *latencies) record(sentNs int64) {
	now := time.Now().UnixNano()
	i := l.n.Add(1) - 1
	if int(i) < len(l.lat) {
		l.lat[i] = time.Duration(now - sentNs)
	}
	l.last.Store(now)
	if int(i) == len(l.lat)-1 {
		close(l.done)
	}
}

func (l *latencies) wait(timeout time.Duration) error {
	select {
	case <-l.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("only %d of %d jobs handled after %v", l.n.Load(), len(l.lat), timeout)
	}
}

// e2e is one end-to-end (or paced) run.
type e2e struct {
	rate     float64 // jobs/s, first publish to last handle
	p50, p99 float64 // ms
	// brokerUs and selfUs are the broker's and this process's CPU time per
	// job, µs, over the same span (this process: producer and consumer).
	brokerUs, selfUs float64
}

func (l *latencies) result(start time.Time) e2e {
	s := slices.Clone(l.lat)
	slices.Sort(s)
	el := time.Duration(l.last.Load() - start.UnixNano())
	return e2e{rate: float64(len(s)) / el.Seconds(), p50: percentile(s, 50), p99: percentile(s, 99)}
}

// deleteQueues removes queues, each on a channel of its own (a missing
// queue is not an error, but a failed delete closes its channel).
func deleteQueues(url string, names ...string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}

func libQueues(queue string) []string {
	prefix := strings.TrimSuffix(queue, ".work")
	return []string{queue, broker.DeadQueueName(queue), broker.HoldQueueName(queue, time.Second), broker.LaneQueueName(queue),
		broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix)}
}

// libRig is queuey on RabbitMQ: a producer and a running worker whose
// handler records latencies.
type libRig struct {
	cfg      config
	be       *rabbitmq.Backend
	producer *queuey.Producer
	worker   *queuey.Worker
	queue    string
	pad      string
	cur      atomic.Pointer[latencies]
	stop     context.CancelFunc
	ran      chan error

	closeOnce sync.Once
	closeErr  error
}

func newLibRig(ctx context.Context, cfg config, name string, hooks *queuey.Hooks, register func(*libRig) error) (*libRig, error) {
	quietBroker()
	urls, qtype := []string{cfg.amqpURL}, queuey.Classic
	if len(cfg.quorum) > 0 {
		urls, qtype = cfg.quorum, queuey.Quorum
	}
	be, err := rabbitmq.DialCluster(ctx, urls, &rabbitmq.Options{Logger: discard, PublishChannels: cfg.pubChannels})
	if err != nil {
		return nil, fmt.Errorf("this scenario needs RabbitMQ: %w", err)
	}
	prefix := unique(name)
	set := queuey.QueueSet{Prefix: prefix, Type: qtype, Queues: []queuey.Queue{{Name: "work", Prefetch: cfg.prefetch, MaxPriority: maxPriority}}}
	r := &libRig{cfg: cfg, be: be, queue: broker.QueueName(prefix, "work")}
	r.pad = envelopePad(r.queue)
	r.cur.Store(newLatencies(1)) // the warm-up job
	fail := func(err error) (*libRig, error) {
		_ = be.Close()
		deleteQueues(cfg.amqpURL, libQueues(r.queue)...)
		return nil, err
	}
	if r.producer, err = queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: discard}); err != nil {
		return fail(err)
	}
	if r.worker, err = queuey.NewWorker(be, set, &queuey.WorkerConfig{Concurrency: cfg.prefetch, Logger: discard, Hooks: hooks}); err != nil {
		return fail(err)
	}
	err = queuey.Handle(r.worker, func(_ context.Context, j benchJob, _ queuey.JobContext) error {
		r.cur.Load().record(j.SentNs)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if register != nil {
		if err := register(r); err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// start runs the worker and puts one job through it.
func (r *libRig) start(ctx context.Context) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.ran = stop, make(chan error, 1)
	go func() { r.ran <- r.worker.Run(runCtx) }()
	if _, err := r.producer.Enqueue(ctx, benchJob{SentNs: time.Now().UnixNano(), Pad: r.pad}); err != nil {
		return err
	}
	return r.cur.Load().wait(30 * time.Second)
}

// close stops the worker, closes the backend and deletes the queues; it
// may be called again.
func (r *libRig) close() error {
	r.closeOnce.Do(func() {
		if r.stop != nil {
			r.stop()
			r.closeErr = <-r.ran
		}
		_ = r.be.Close()
		deleteQueues(r.cfg.amqpURL, libQueues(r.queue)...)
	})
	return r.closeErr
}

// enqueueAll enqueues n jobs from publishers goroutines.
func enqueueAll(ctx context.Context, publishers, n int, enqueue func() error) error {
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

func libEndToEnd(ctx context.Context, cfg config) (e2e, error) {
	r, err := newLibRig(ctx, cfg, "e2e", nil, nil)
	if err != nil {
		return e2e{}, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return e2e{}, err
	}
	lat := newLatencies(cfg.n)
	r.cur.Store(lat)
	cpu, start := readCPU(), time.Now()
	err = enqueueAll(ctx, cfg.publishers, cfg.n, func() error {
		_, err := r.producer.Enqueue(ctx, benchJob{SentNs: time.Now().UnixNano(), Pad: r.pad})
		return err
	})
	if err != nil {
		return e2e{}, err
	}
	if err := lat.wait(5 * time.Minute); err != nil {
		return e2e{}, err
	}
	res := lat.result(start)
	res.brokerUs, res.selfUs = cpu.perJob(cfg.n)
	return res, r.close()
}

// confirmWindow publishes on a confirm channel with at most size publishes
// outstanding, waiting on the oldest when the window is full. One goroutine
// uses it.
type confirmWindow struct {
	ch      *amqp.Channel
	size    int
	pending []*amqp.DeferredConfirmation // FIFO
}

func newConfirmWindow(conn *amqp.Connection, size int) (*confirmWindow, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	return &confirmWindow{ch: ch, size: size}, nil
}

func (w *confirmWindow) publish(queue string, pub amqp.Publishing) error {
	if len(w.pending) >= w.size {
		if err := w.waitOldest(); err != nil {
			return err
		}
	}
	dc, err := w.ch.PublishWithDeferredConfirm("", queue, true, false, pub)
	if err != nil {
		return err
	}
	w.pending = append(w.pending, dc)
	return nil
}

func (w *confirmWindow) waitOldest() error {
	ok := w.pending[0].Wait()
	w.pending = slices.Delete(w.pending, 0, 1)
	if !ok {
		return errors.New("broker nacked a publish")
	}
	return nil
}

func (w *confirmWindow) drain() error {
	for len(w.pending) > 0 {
		if err := w.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// rawRig is plain amqp091-go: one connection, a confirm window and a
// consumer with the same prefetch and manual acks.
type rawRig struct {
	cfg      config
	conn     *amqp.Connection
	w        *confirmWindow
	cch      *amqp.Channel
	queue    string
	cur      atomic.Pointer[latencies]
	consumed chan struct{}
	closed   bool
}

func newRawRig(cfg config, name string, consume bool) (*rawRig, error) {
	quietBroker()
	conn, err := amqp.Dial(cfg.amqpURL)
	if err != nil {
		return nil, fmt.Errorf("this scenario needs RabbitMQ: %w", err)
	}
	r := &rawRig{cfg: cfg, conn: conn, queue: unique(name)}
	fail := func(err error) (*rawRig, error) {
		_ = conn.Close()
		deleteQueues(cfg.amqpURL, r.queue)
		return nil, err
	}
	if r.w, err = newConfirmWindow(conn, cfg.window); err != nil {
		return fail(err)
	}
	args := amqp.Table(broker.QueueArgs(broker.QueueSpec{Name: r.queue, MaxPriority: maxPriority, Durable: true}))
	if _, err := r.w.ch.QueueDeclare(r.queue, true, false, false, false, args); err != nil {
		return fail(err)
	}
	if !consume {
		return r, nil
	}
	if r.cch, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := r.cch.Qos(cfg.prefetch, 0, false); err != nil {
		return fail(err)
	}
	deliveries, err := r.cch.Consume(r.queue, "", false, false, false, false, nil)
	if err != nil {
		return fail(err)
	}
	r.cur.Store(newLatencies(1))
	r.consumed = make(chan struct{})
	go func() {
		defer close(r.consumed)
		for d := range deliveries {
			var j benchJob
			_ = json.Unmarshal(d.Body, &j)
			_ = d.Ack(false)
			r.cur.Load().record(j.SentNs)
		}
	}()
	if err := r.w.publish(r.queue, rawPublishing(jsonBody(time.Now().UnixNano(), bodySize))); err != nil {
		return fail(err)
	}
	if err := r.w.drain(); err != nil {
		return fail(err)
	}
	if err := r.cur.Load().wait(30 * time.Second); err != nil {
		return fail(err)
	}
	return r, nil
}

func (r *rawRig) close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.cch != nil {
		_ = r.cch.Close()
		<-r.consumed
	}
	_ = r.conn.Close()
	deleteQueues(r.cfg.amqpURL, r.queue)
}

func rawEndToEnd(cfg config) (e2e, error) {
	r, err := newRawRig(cfg, "e2e-raw", true)
	if err != nil {
		return e2e{}, err
	}
	defer r.close()
	lat := newLatencies(cfg.n)
	r.cur.Store(lat)
	cpu, start := readCPU(), time.Now()
	for range cfg.n {
		if err := r.w.publish(r.queue, rawPublishing(jsonBody(time.Now().UnixNano(), bodySize))); err != nil {
			return e2e{}, err
		}
	}
	if err := r.w.drain(); err != nil {
		return e2e{}, err
	}
	if err := lat.wait(5 * time.Minute); err != nil {
		return e2e{}, err
	}
	res := lat.result(start)
	res.brokerUs, res.selfUs = cpu.perJob(cfg.n)
	return res, nil
}

// inTurn runs the library's measurement and the baseline's of one round,
// the library's first in even rounds and the baseline's first in odd ones.
// The broker cleans up after a run's queue of 20,000 persistent messages
// while the next run goes on, and the first run of the process starts
// cold: neither side always takes the same place (scenario 2 swaps its
// runs in the same way).
func inTurn(round int, lib, base func() error) error {
	first, second := lib, base
	if round%2 == 1 {
		first, second = base, lib
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

// wrap names the side of a comparison that failed.
func wrap(side string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", side, err)
	}
	return nil
}

// scenarioEndToEnd is scenario 1: N jobs published with confirms while a
// worker with prefetch 10 and a trivial handler consumes them.
func scenarioEndToEnd(cfg config) ([]row, error) {
	ctx := context.Background()
	var libRate, rawRate, libP50, rawP50, libP99, rawP99, libBroker, rawBroker, libSelf, rawSelf series
	for round := range cfg.count {
		var l, r e2e
		err := inTurn(round,
			func() (err error) { l, err = libEndToEnd(ctx, cfg); return wrap("queuey", err) },
			func() (err error) { r, err = rawEndToEnd(cfg); return wrap("raw", err) })
		if err != nil {
			return nil, err
		}
		libRate, rawRate = append(libRate, l.rate), append(rawRate, r.rate)
		libP50, rawP50 = append(libP50, l.p50), append(rawP50, r.p50)
		libP99, rawP99 = append(libP99, l.p99), append(rawP99, r.p99)
		libBroker, rawBroker = append(libBroker, l.brokerUs), append(rawBroker, r.brokerUs)
		libSelf, rawSelf = append(libSelf, l.selfUs), append(rawSelf, r.selfUs)
	}
	rr := ratios(libRate, rawRate)
	name := fmt.Sprintf("1 e2e %d×256B", cfg.n)
	return []row{
		{scenario: name, metric: "jobs/s", lib: rate(libRate.median()), base: rate(rawRate.median()),
			ratio: ratioStr(rr.median()), goal: "≥ 0.95", result: passIf(rr.median() >= 0.95), spread: rr.spread(), headline: true},
		{scenario: name, metric: "publish→handle p50", lib: ms(libP50.median()), base: ms(rawP50.median()),
			ratio: ratioStr(ratios(libP50, rawP50).median()), spread: ratios(libP50, rawP50).spread()},
		{scenario: name, metric: "publish→handle p99", lib: ms(libP99.median()), base: ms(rawP99.median()),
			ratio: ratioStr(ratios(libP99, rawP99).median()), spread: ratios(libP99, rawP99).spread()},
		headlined(cpuRow(name, "broker CPU µs/job", libBroker, rawBroker, 1.1)),
		headlined(cpuRow(name, "Go CPU µs/job", libSelf, rawSelf, 1.3)),
	}, nil
}

// scenarioQuorum is scenario 9: scenario 1's queuey run on quorum queues
// on a three-node cluster (-cluster), against classic queues on the one
// broker, in turn in each round.
func scenarioQuorum(cfg config) ([]row, error) {
	if cfg.cluster == "" {
		return nil, fmt.Errorf("scenario 9 needs a cluster: run `make cluster` and pass its URLs with -cluster or QUEUEY_CLUSTER")
	}
	quorum := cfg
	quorum.quorum = strings.Split(cfg.cluster, ",")
	quorum.amqpURL = quorum.quorum[0] // where its queues are deleted
	ctx := context.Background()
	var quorumRate, classicRate, quorumP99, classicP99 series
	for round := range cfg.count {
		var q, c e2e
		err := inTurn(round,
			func() (err error) { q, err = libEndToEnd(ctx, quorum); return wrap("quorum", err) },
			func() (err error) { c, err = libEndToEnd(ctx, cfg); return wrap("classic", err) })
		if err != nil {
			return nil, err
		}
		quorumRate, classicRate = append(quorumRate, q.rate), append(classicRate, c.rate)
		quorumP99, classicP99 = append(quorumP99, q.p99), append(classicP99, c.p99)
	}
	name := fmt.Sprintf("9 e2e quorum, 3 nodes / classic, 1 node, %d jobs", cfg.n)
	rr := ratios(quorumRate, classicRate)
	return []row{
		{scenario: name, metric: "jobs/s", lib: rate(quorumRate.median()), base: rate(classicRate.median()),
			ratio: ratioStr(rr.median()), spread: rr.spread(), headline: true},
		{scenario: name, metric: "publish→handle p99", lib: ms(quorumP99.median()), base: ms(classicP99.median()),
			ratio: ratioStr(ratios(quorumP99, classicP99).median()), spread: ratios(quorumP99, classicP99).spread()},
	}, nil
}

// cpuRow compares CPU time per job, the library's over the baseline's,
// against a goal of at most goal times.
func cpuRow(name, metric string, lib, base series, goal float64) row {
	rr := ratios(lib, base)
	return row{scenario: name, metric: metric, lib: fmt.Sprintf("%.1f", lib.median()), base: fmt.Sprintf("%.1f", base.median()),
		ratio: ratioStr(rr.median()), goal: fmt.Sprintf("≤ %.1f", goal), result: passIf(rr.median() <= goal), spread: rr.spread()}
}

// infoRow is r without a goal: a figure that explains others.
func infoRow(r row) row {
	r.goal, r.result = "", ""
	return r
}

// libPublish is confirmed publishes/s of Producer.Enqueue from callers
// goroutines, with no consumer.
func libPublish(ctx context.Context, cfg config, callers, n int) (pubResult, error) {
	r, err := newLibRig(ctx, cfg, "pub", nil, nil)
	if err != nil {
		return pubResult{}, err
	}
	defer r.close()
	cpu, start := readCPU(), time.Now()
	err = enqueueAll(ctx, callers, n, func() error {
		_, err := r.producer.Enqueue(ctx, benchJob{SentNs: time.Now().UnixNano(), Pad: r.pad})
		return err
	})
	if err != nil {
		return pubResult{}, err
	}
	res := pubResult{rate: float64(n) / time.Since(start).Seconds()}
	res.brokerUs, res.selfUs = cpu.perJob(n)
	return res, r.close()
}

// pubResult is a publishing run: confirmed publishes/s, and the broker's
// and this process's CPU time per publish while it published.
type pubResult struct{ rate, brokerUs, selfUs float64 }

// libPublishBatch is confirmed publishes/s of ONE caller passing all n jobs
// to one Producer.EnqueueBatch (each still confirmed before it is
// reported), as the raw baseline keeps its window full from first to last.
func libPublishBatch(ctx context.Context, cfg config, n int) (float64, error) {
	r, err := newLibRig(ctx, cfg, "pubbatch", nil, nil)
	if err != nil {
		return 0, err
	}
	defer r.close()
	start := time.Now()
	jobs := make([]queuey.Job, n)
	for i := range jobs {
		jobs[i] = benchJob{SentNs: time.Now().UnixNano(), Pad: r.pad}
	}
	if _, err := r.producer.EnqueueBatch(ctx, jobs); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), r.close()
}

// rawPublish is confirmed publishes/s of one goroutine with a confirm
// window (window 1: one publish in flight).
func rawPublish(cfg config, window, n int) (pubResult, error) {
	cfg.window = window
	r, err := newRawRig(cfg, "pub-raw", false)
	if err != nil {
		return pubResult{}, err
	}
	defer r.close()
	body := jsonBody(time.Now().UnixNano(), bodySize)
	cpu, start := readCPU(), time.Now()
	for range n {
		if err := r.w.publish(r.queue, rawPublishing(body)); err != nil {
			return pubResult{}, err
		}
	}
	if err := r.w.drain(); err != nil {
		return pubResult{}, err
	}
	res := pubResult{rate: float64(n) / time.Since(start).Seconds()}
	res.brokerUs, res.selfUs = cpu.perJob(n)
	return res, nil
}

// scenarioProducer is scenario 2: confirmed publishes/s, the producer
// alone, against raw amqp091 with a confirm window.
func scenarioProducer(cfg config) ([]row, error) {
	ctx := context.Background()
	var par, bat, ser, rawWin, rawSer series
	var parBroker, parSelf, winBroker, winSelf series // CPU µs per publish
	// Each run deletes its queue, and the broker cleans up after a queue
	// of 20,000 persistent messages while the next run goes on: every
	// big run comes right after another big run, and the two that make the
	// goal's ratios swap places from round to round.
	runs := []struct {
		name string
		run  func() (float64, error)
		into *series
	}{
		{"queuey parallel", func() (float64, error) {
			r, err := libPublish(ctx, cfg, cfg.callers, cfg.n)
			parBroker, parSelf = append(parBroker, r.brokerUs), append(parSelf, r.selfUs)
			return r.rate, err
		}, &par},
		{"queuey batch", func() (float64, error) { return libPublishBatch(ctx, cfg, cfg.n) }, &bat},
		{"raw window", func() (float64, error) {
			r, err := rawPublish(cfg, cfg.window, cfg.n)
			winBroker, winSelf = append(winBroker, r.brokerUs), append(winSelf, r.selfUs)
			return r.rate, err
		}, &rawWin},
		{"queuey serial", func() (float64, error) { r, err := libPublish(ctx, cfg, 1, cfg.serialN); return r.rate, err }, &ser},
		{"raw serial", func() (float64, error) { r, err := rawPublish(cfg, 1, cfg.serialN); return r.rate, err }, &rawSer},
	}
	for round := range cfg.count {
		order := []int{0, 1, 2, 3, 4}
		if round%2 == 1 {
			order = []int{0, 2, 1, 4, 3}
		}
		for _, k := range order {
			var v float64
			var err error
			// A CPU profile (-cpuprofile) tells the runs apart by this
			// label, which the goroutines a run starts inherit.
			pprof.Do(ctx, pprof.Labels("run", runs[k].name), func(context.Context) { v, err = runs[k].run() })
			if err != nil {
				return nil, fmt.Errorf("%s: %w", runs[k].name, err)
			}
			*runs[k].into = append(*runs[k].into, v)
		}
	}
	pr, br, sr, ss := ratios(par, rawWin), ratios(bat, rawWin), ratios(ser, rawWin), ratios(ser, rawSer)
	return []row{
		{scenario: "2 producer", metric: fmt.Sprintf("confirmed pub/s, %d callers vs raw window %d", cfg.callers, cfg.window),
			lib: rate(par.median()), base: rate(rawWin.median()), ratio: ratioStr(pr.median()), goal: "≥ 0.95",
			result: passIf(pr.median() >= 0.95), spread: pr.spread(), headline: true},
		infoRow(cpuRow("2 producer", fmt.Sprintf("broker CPU µs per publish, %d callers vs raw window %d", cfg.callers, cfg.window), parBroker, winBroker, 0)),
		infoRow(cpuRow("2 producer", fmt.Sprintf("Go CPU µs per publish, %d callers vs raw window %d", cfg.callers, cfg.window), parSelf, winSelf, 0)),
		{scenario: "2 producer", metric: fmt.Sprintf("confirmed pub/s, ONE caller, EnqueueBatch of all %d vs raw window %d", cfg.n, cfg.window),
			lib: rate(bat.median()), base: rate(rawWin.median()), ratio: ratioStr(br.median()), goal: "≥ 0.95",
			result: passIf(br.median() >= 0.95), spread: br.spread(), headline: true},
		{scenario: "2 producer", metric: fmt.Sprintf("confirmed pub/s, ONE caller, one Enqueue at a time vs raw window %d", cfg.window),
			lib: rate(ser.median()), base: rate(rawWin.median()), ratio: ratioStr(sr.median()), spread: sr.spread()},
		{scenario: "2 producer", metric: "confirmed pub/s, ONE caller, one Enqueue at a time vs raw one in flight",
			lib: rate(ser.median()), base: rate(rawSer.median()), ratio: ratioStr(ss.median()), spread: ss.spread()},
	}, nil
}

// pace calls send at rate per second for total jobs, on schedule: a late
// tick is sent at once, never skipped.
func pace(rate, total int, send func(i int) error) error {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if err := send(i); err != nil {
			return err
		}
	}
	return nil
}

func libPaced(ctx context.Context, cfg config, total int) (e2e, error) {
	r, err := newLibRig(ctx, cfg, "paced", nil, nil)
	if err != nil {
		return e2e{}, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return e2e{}, err
	}
	lat := newLatencies(total)
	r.cur.Store(lat)
	// A pool of callers takes the jobs the pacer stamps, so a publish
	// waiting for its confirm does not hold the next one up.
	jobs := make(chan benchJob, total)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range cfg.publishers {
		wg.Go(func() {
			for j := range jobs {
				if _, err := r.producer.Enqueue(ctx, j); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	start := time.Now()
	_ = pace(cfg.pacedRate, total, func(int) error {
		jobs <- benchJob{SentNs: time.Now().UnixNano(), Pad: r.pad}
		return nil
	})
	close(jobs)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return e2e{}, *err
	}
	if err := lat.wait(time.Minute); err != nil {
		return e2e{}, err
	}
	return lat.result(start), r.close()
}

func rawPaced(cfg config, total int) (e2e, error) {
	r, err := newRawRig(cfg, "paced-raw", true)
	if err != nil {
		return e2e{}, err
	}
	defer r.close()
	lat := newLatencies(total)
	r.cur.Store(lat)
	start := time.Now()
	err = pace(cfg.pacedRate, total, func(int) error {
		return r.w.publish(r.queue, rawPublishing(jsonBody(time.Now().UnixNano(), bodySize)))
	})
	if err != nil {
		return e2e{}, err
	}
	if err := r.w.drain(); err != nil {
		return e2e{}, err
	}
	if err := lat.wait(time.Minute); err != nil {
		return e2e{}, err
	}
	return lat.result(start), nil
}

// scenarioPaced is scenario 3: jobs at a steady rate, publish-to-handle
// latency.
func scenarioPaced(cfg config) ([]row, error) {
	ctx := context.Background()
	total := int(float64(cfg.pacedRate) * cfg.pacedFor.Seconds())
	var libP50, rawP50, libP99, rawP99 series
	for round := range cfg.count {
		var l, r e2e
		err := inTurn(round,
			func() (err error) { l, err = libPaced(ctx, cfg, total); return wrap("queuey", err) },
			func() (err error) { r, err = rawPaced(cfg, total); return wrap("raw", err) })
		if err != nil {
			return nil, err
		}
		libP50, rawP50 = append(libP50, l.p50), append(rawP50, r.p50)
		libP99, rawP99 = append(libP99, l.p99), append(rawP99, r.p99)
	}
	r99 := ratios(libP99, rawP99)
	name := fmt.Sprintf("3 paced %d/s × %v", cfg.pacedRate, cfg.pacedFor)
	return []row{
		{scenario: name, metric: "publish→handle p50", lib: ms(libP50.median()), base: ms(rawP50.median()),
			ratio: ratioStr(ratios(libP50, rawP50).median()), spread: ratios(libP50, rawP50).spread()},
		{scenario: name, metric: "publish→handle p99", lib: ms(libP99.median()), base: ms(rawP99.median()),
			ratio: ratioStr(r99.median()), goal: "≤ 1.5× raw", result: passIf(r99.median() <= 1.5), spread: r99.spread(), headline: true},
	}, nil
}

// deferralRun is one run of scenario 4.
type deferralRun struct {
	p50, p99, max float64 // ms from the due stamp (publish + rounded hold) to the run
	ahead         bool    // every deferred job ran while the backlog was still there, at the top priority
	backlogLeft   int     // backlog jobs not yet started when the last deferred job ran
	fromCall      float64 // ms, max of (run - Defer call - 1 s): adds the confirmed publish
}

type dueKey struct{}

// libDeferral defers cfg.deferred jobs by 1 s while a worker chews through
// a backlog, and measures how late each deferred job starts.
func libDeferral(ctx context.Context, cfg config) (deferralRun, error) {
	var backlogDone atomic.Int64
	gate := make(chan struct{})
	type ran struct {
		at, due   time.Time
		priority  int
		backlogAt int64
	}
	runs := make([]ran, cfg.deferred)
	var deferredDone atomic.Int64
	allDone := make(chan struct{})
	// The worker's Deliver hook hands the handler the due time stamped
	// on the held message (when it was published + the rounded hold).
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		return context.WithValue(ctx, dueKey{}, d.DueAt), nil
	}}
	r, err := newLibRig(ctx, cfg, "defer", hooks, func(r *libRig) error {
		if err := queuey.Handle(r.worker, func(_ context.Context, _ backlogJob, _ queuey.JobContext) error {
			<-gate
			time.Sleep(5 * time.Millisecond) // the backlog must outlast the deferrals
			backlogDone.Add(1)
			return nil
		}); err != nil {
			return err
		}
		return queuey.Handle(r.worker, func(ctx context.Context, j deferredJob, jc queuey.JobContext) error {
			due, _ := ctx.Value(dueKey{}).(time.Time)
			runs[j.I] = ran{at: time.Now(), due: due, priority: jc.Priority, backlogAt: backlogDone.Load()}
			if deferredDone.Add(1) == int64(cfg.deferred) {
				close(allDone)
			}
			return nil
		})
	})
	if err != nil {
		return deferralRun{}, err
	}
	defer r.close()
	// The worker runs, but the backlog handlers wait at the gate until
	// the whole backlog is on the queue, so the deferred jobs meet all of
	// it (less the prefetch the worker holds).
	if err := r.start(ctx); err != nil {
		return deferralRun{}, err
	}
	pad := strings.Repeat("x", bodySize-150)
	if err := enqueueAll(ctx, cfg.publishers, cfg.backlog, func() error {
		_, err := r.producer.Enqueue(ctx, backlogJob{Pad: pad})
		return err
	}); err != nil {
		close(gate)
		return deferralRun{}, err
	}
	close(gate)
	var next atomic.Int64
	sent := make([]time.Time, cfg.deferred)
	if err := enqueueAll(ctx, cfg.publishers, cfg.deferred, func() error {
		i := int(next.Add(1) - 1)
		sent[i] = time.Now()
		_, err := r.producer.Defer(ctx, deferredJob{I: i}, time.Second)
		return err
	}); err != nil {
		return deferralRun{}, err
	}
	select {
	case <-allDone:
	case <-time.After(2 * time.Minute):
		return deferralRun{}, fmt.Errorf("only %d of %d deferred jobs ran", deferredDone.Load(), cfg.deferred)
	}
	out := deferralRun{ahead: true}
	late := make([]time.Duration, 0, cfg.deferred)
	var lastAt int64
	for i, x := range runs {
		late = append(late, x.at.Sub(x.due))
		out.fromCall = max(out.fromCall, float64(x.at.Sub(sent[i])-time.Second)/float64(time.Millisecond))
		if x.priority != maxPriority || x.backlogAt >= int64(cfg.backlog) {
			out.ahead = false
		}
		lastAt = max(lastAt, x.backlogAt)
	}
	slices.Sort(late)
	out.p50, out.p99 = percentile(late, 50), percentile(late, 99)
	out.max = float64(late[len(late)-1]) / float64(time.Millisecond)
	out.backlogLeft = cfg.backlog - int(lastAt)
	return out, r.close()
}

// rawDeferral is the broker's own TTL expiry of the same burst: plain
// amqp091 publishes cfg.deferred messages into a hold queue of 1 s (the
// arguments queuey gives one) dead-lettering into a work queue, each
// stamped with its due time (publish + 1 s), and a consumer with the same
// prefetch takes them; its lateness is the time from due to delivery.
func rawDeferral(cfg config) (p50, p99 float64, err error) {
	r, err := newRawRig(cfg, "defer-raw", true)
	if err != nil {
		return 0, 0, err
	}
	defer r.close()
	hold := broker.HoldQueueName(r.queue, time.Second)
	defer deleteQueues(cfg.amqpURL, hold)
	if _, err := r.w.ch.QueueDeclare(hold, true, false, false, false, amqp.Table(broker.HoldQueueArgs(r.queue, time.Second))); err != nil {
		return 0, 0, err
	}
	lat := newLatencies(cfg.deferred)
	r.cur.Store(lat)
	for range cfg.deferred {
		pub := rawPublishing(jsonBody(time.Now().Add(time.Second).UnixNano(), bodySize))
		pub.Priority = maxPriority
		if err := r.w.publish(hold, pub); err != nil {
			return 0, 0, err
		}
	}
	if err := r.w.drain(); err != nil {
		return 0, 0, err
	}
	if err := lat.wait(2 * time.Minute); err != nil {
		return 0, 0, err
	}
	res := lat.result(time.Now())
	return res.p50, res.p99, nil
}

// scenarioDeferral is scenario 4: deferral release lateness on RabbitMQ,
// against the broker's own TTL expiry of the same burst (rawDeferral).
func scenarioDeferral(cfg config) ([]row, error) {
	ctx := context.Background()
	var p50, p99, mx, fc, rawP50, rawP99 series
	ahead := true
	left := series{}
	for round := range cfg.count {
		var d deferralRun
		var r50, r99 float64
		err := inTurn(round,
			func() (err error) { d, err = libDeferral(ctx, cfg); return wrap("queuey", err) },
			func() (err error) { r50, r99, err = rawDeferral(cfg); return wrap("raw", err) })
		if err != nil {
			return nil, err
		}
		p50, p99, mx, fc = append(p50, d.p50), append(p99, d.p99), append(mx, d.max), append(fc, d.fromCall)
		rawP50, rawP99 = append(rawP50, r50), append(rawP99, r99)
		ahead = ahead && d.ahead
		left = append(left, float64(d.backlogLeft))
	}
	name := fmt.Sprintf("4 defer %d×1s", cfg.deferred)
	rr := ratios(p99, rawP99)
	return []row{
		{scenario: name, metric: "release lateness p50 (raw: TTL expiry)", lib: ms(p50.median()), base: ms(rawP50.median()),
			ratio: ratioStr(ratios(p50, rawP50).median()), spread: ratios(p50, rawP50).spread()},
		{scenario: name, metric: "release lateness p99 (raw: TTL expiry)", lib: ms(p99.median()), base: ms(rawP99.median()),
			ratio: ratioStr(rr.median()), goal: "≤ 1.2", result: passIf(rr.median() <= 1.2), spread: rr.spread(), headline: true},
		{scenario: name, metric: "release lateness max", lib: ms(mx.median()), spread: mx.spread()},
		{scenario: name, metric: "max of run - Defer call - 1 s (adds the confirmed publish)", lib: ms(fc.median()), spread: fc.spread()},
		{scenario: name, metric: fmt.Sprintf("ahead of a %d-job backlog, priority 10", cfg.backlog),
			lib: fmt.Sprintf("%.0f backlog jobs left", left.median()), goal: "all ahead", result: passIf(ahead), headline: true},
	}, nil
}
