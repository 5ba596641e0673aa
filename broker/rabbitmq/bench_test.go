package rabbitmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// The benchmarks compare the library with plain amqp091-go on the same
// broker, in the same run: 256-byte JSON bodies, persistent messages,
// mandatory publishes to the default exchange, a durable queue with
// x-max-priority 10.
//
//	go test -run '^$' -bench . -benchtime 5000x -count 3 ./broker/rabbitmq/

const (
	benchBodySize    = 256
	benchMaxPriority = 10
	benchWindow      = 256 // outstanding confirms of the raw publishers
	benchPublishers  = 32  // concurrent Enqueue goroutines in BenchmarkEndToEnd
	benchPrefetch    = 10
)

// dialB is dial for benchmarks, with the library's logger discarded.
func dialB(b *testing.B) *rabbitmq.Backend {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := rabbitmq.Dial(ctx, rabbittest.URL(), &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("these benchmarks need RabbitMQ: %v", err)
	}
	return be
}

// dialRaw opens a plain amqp091 connection.
func dialRaw(b *testing.B) *amqp.Connection {
	b.Helper()
	conn, err := amqp.Dial(rabbittest.URL())
	if err != nil {
		b.Fatalf("these benchmarks need RabbitMQ: %v", err)
	}
	return conn
}

// deleteQueuesB removes queues (and their dead-letter queues) on a
// connection of its own.
func deleteQueuesB(b *testing.B, queues ...string) {
	b.Helper()
	var names []string
	for _, q := range queues {
		names = append(names, q, broker.DeadQueueName(q)) // raw has no .dead: gone is fine
	}
	rabbittest.DeleteQueues(b, names...)
}

// declareRaw declares queue exactly as the backend does for a durable
// queue with MaxPriority 10.
func declareRaw(b *testing.B, ch *amqp.Channel, queue string) {
	b.Helper()
	args := amqp.Table(broker.QueueArgs(broker.QueueSpec{Name: queue, MaxPriority: benchMaxPriority, Durable: true}))
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		b.Fatal(err)
	}
}

// jsonBody is a JSON object of exactly size bytes carrying sentNs.
func jsonBody(sentNs int64, size int) []byte {
	head := fmt.Sprintf(`{"sent_ns":%d,"pad":"`, sentNs)
	pad := max(size-len(head)-2, 0)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

// benchMessage is the library's message for body: what Producer.Enqueue
// hands to Publish.
func benchMessage(queue string, body []byte) broker.Message {
	return broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "bench", Attempt: 1, Body: body}
}

// rawPublishing is the same message on the wire as the backend sends it:
// same properties and headers.
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

func reportRate(b *testing.B, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, unit)
	}
}

// confirmWindow publishes on a confirm channel with at most window
// publishes outstanding (benchWindow unless set), waiting on the oldest
// when the window is full.
type confirmWindow struct {
	b       *testing.B
	ch      *amqp.Channel
	window  int
	pending []*amqp.DeferredConfirmation // FIFO
}

func newConfirmWindow(b *testing.B, conn *amqp.Connection) *confirmWindow {
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return &confirmWindow{b: b, ch: ch, window: benchWindow, pending: make([]*amqp.DeferredConfirmation, 0, benchWindow)}
}

func (w *confirmWindow) publish(queue string, pub amqp.Publishing) {
	if len(w.pending) >= w.window {
		w.waitOldest()
	}
	dc, err := w.ch.PublishWithDeferredConfirm("", queue, true, false, pub)
	if err != nil {
		w.b.Fatal(err)
	}
	w.pending = append(w.pending, dc)
}

func (w *confirmWindow) waitOldest() {
	if !w.pending[0].Wait() {
		w.b.Fatal("broker nacked a publish")
	}
	w.pending = slices.Delete(w.pending, 0, 1)
}

func (w *confirmWindow) drain() {
	for len(w.pending) > 0 {
		w.waitOldest()
	}
}

// BenchmarkPublish measures confirmed publishes: the backend one at a time
// (serial: a broker round trip and a confirm per op), the backend from many
// goroutines (parallel: 32 × GOMAXPROCS publishes in flight), and raw
// amqp091 from one goroutine, one publish in flight (serial) or with a
// window of benchWindow outstanding confirms (window).
func BenchmarkPublish(b *testing.B) {
	body := jsonBody(time.Now().UnixNano(), benchBodySize)

	b.Run("queuey/serial", func(b *testing.B) {
		be := dialB(b)
		defer be.Close()
		queue := unique("bench-pub-serial")
		defer deleteQueuesB(b, queue)
		ctx := context.Background()
		if err := be.Declare(ctx, broker.QueueSpec{Name: queue, MaxPriority: benchMaxPriority, Durable: true}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchBodySize)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := be.Publish(ctx, benchMessage(queue, body)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportRate(b, "msgs/s")
	})

	b.Run("queuey/parallel", func(b *testing.B) {
		be := dialB(b)
		defer be.Close()
		queue := unique("bench-pub-parallel")
		defer deleteQueuesB(b, queue)
		ctx := context.Background()
		if err := be.Declare(ctx, broker.QueueSpec{Name: queue, MaxPriority: benchMaxPriority, Durable: true}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchBodySize)
		b.ReportAllocs()
		b.SetParallelism(32) // 32 × GOMAXPROCS goroutines
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := be.Publish(ctx, benchMessage(queue, body)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		reportRate(b, "msgs/s")
	})

	// raw/serial is the baseline of queuey/serial: one publish in flight.
	b.Run("raw/serial", func(b *testing.B) {
		conn := dialRaw(b)
		defer conn.Close()
		queue := unique("bench-pub-raw-serial")
		defer deleteQueuesB(b, queue)
		w := newConfirmWindow(b, conn)
		declareRaw(b, w.ch, queue)
		b.SetBytes(benchBodySize)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			w.publish(queue, rawPublishing(body))
			w.drain()
		}
		b.StopTimer()
		reportRate(b, "msgs/s")
	})

	b.Run("raw/window", func(b *testing.B) {
		conn := dialRaw(b)
		defer conn.Close()
		queue := unique("bench-pub-raw")
		defer deleteQueuesB(b, queue)
		w := newConfirmWindow(b, conn)
		declareRaw(b, w.ch, queue)
		b.SetBytes(benchBodySize)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			w.publish(queue, rawPublishing(body))
		}
		w.drain()
		b.StopTimer()
		reportRate(b, "msgs/s")
	})
}

// holdWindow is how many holds BenchmarkHold keeps in flight: a worker's
// at prefetch 32 (bench scenario 8).
const holdWindow = 32

// benchHoldTTL is BenchmarkHold's wait: far longer than a run.
const benchHoldTTL = 30 * time.Minute

// BenchmarkHold measures holds, holdWindow in flight, and what each costs
// the broker's node (broker-µs/op; the node must run on this host): the
// backend's Hold (a passive declare of the work queue, then the publish,
// ARCHITECTURE.md "Waiting: hold queues") on the holds' publishing
// channel, raw amqp091 publishing the same message into the same hold
// queue on one channel, and raw amqp091 sending the same passive declare
// before each publish (raw/checked): the difference between the raw runs
// is what the work-queue check costs the broker.
func BenchmarkHold(b *testing.B) {
	body := jsonBody(time.Now().UnixNano(), benchBodySize)

	b.Run("queuey", func(b *testing.B) { queueyHolds(b, body) })
	for _, checked := range []bool{false, true} {
		name := "raw"
		if checked {
			name = "raw/checked"
		}
		b.Run(name, func(b *testing.B) { rawHolds(b, body, checked) })
	}
}

// queueyHolds makes b.N holds through a backend, holdWindow in flight.
func queueyHolds(b *testing.B, body []byte) {
	be := rabbittest.Dial(b, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer be.Close()
	queue := unique("bench-hold")
	defer deleteQueuesB(b, queue, broker.HoldQueueName(queue, benchHoldTTL))
	ctx := context.Background()
	if err := be.Declare(ctx, broker.QueueSpec{Name: queue, MaxPriority: benchMaxPriority, Durable: true}); err != nil {
		b.Fatal(err)
	}
	if err := be.DeclareHold(ctx, queue, benchHoldTTL); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(max(1, holdWindow/runtime.GOMAXPROCS(0)))
	measureHolds(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := be.Hold(ctx, benchMessage(queue, body), benchHoldTTL); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// rawHolds publishes b.N messages into a hold queue declared as the
// backend declares it, holdWindow in flight, each after a passive declare
// of its work queue when checked.
func rawHolds(b *testing.B, body []byte, checked bool) {
	conn := dialRaw(b)
	defer conn.Close()
	queue := unique("bench-hold-raw")
	hold := broker.HoldQueueName(queue, benchHoldTTL)
	defer deleteQueuesB(b, queue, hold)
	w := newConfirmWindow(b, conn)
	declareRaw(b, w.ch, queue)
	if _, err := w.ch.QueueDeclare(hold, true, false, false, false, amqp.Table(broker.HoldQueueArgs(queue, benchHoldTTL))); err != nil {
		b.Fatal(err)
	}
	w.window = holdWindow
	measureHolds(b, func() {
		for range b.N {
			if checked {
				if _, err := w.ch.QueueDeclarePassive(queue, false, false, false, true, nil); err != nil {
					b.Fatal(err)
				}
			}
			w.publish(hold, rawPublishing(body))
		}
		w.drain()
	})
}

// measureHolds times holds, which makes b.N of them, and reports their
// rate and the broker's CPU time per hold.
func measureHolds(b *testing.B, holds func()) {
	nodeCPU := rabbittest.NodeCPU(b)
	b.SetBytes(benchBodySize)
	b.ReportAllocs()
	b.ResetTimer()
	start := nodeCPU()
	holds()
	b.StopTimer()
	b.ReportMetric(float64(nodeCPU()-start)/float64(time.Microsecond)/float64(b.N), "broker-µs/op")
	reportRate(b, "msgs/s")
}

// benchJob carries its send time; Pad brings the encoded envelope to about
// benchBodySize bytes.
type benchJob struct {
	SentNs int64  `json:"sent_ns"`
	Pad    string `json:"pad"`
}

func (benchJob) Kind() string        { return "bench" }
func (benchJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// envelopePad is the Pad that makes benchJob's envelope on queue about
// benchBodySize bytes (sent_ns always has 19 digits until 2286).
func envelopePad(b *testing.B, queue string) string {
	payload, _ := json.Marshal(benchJob{SentNs: time.Now().UnixNano()})
	body, err := broker.NewEnvelope("bench", queue, payload, time.Now()).Encode()
	if err != nil {
		b.Fatal(err)
	}
	return strings.Repeat("x", max(benchBodySize-len(body), 0))
}

// latencies records publish-to-handle latencies, and closes done when all
// want have come.
type latencies struct {
	lat  []time.Duration
	n    atomic.Int64
	done chan struct{}
}

func newLatencies(want int) *latencies {
	return &latencies{lat: make([]time.Duration, want), done: make(chan struct{})}
}

func (l *latencies) record(sentNs int64) {
	d := time.Duration(time.Now().UnixNano() - sentNs)
	i := l.n.Add(1) - 1
	if int(i) < len(l.lat) {
		l.lat[i] = d
	}
	if int(i) == len(l.lat)-1 {
		close(l.done)
	}
}

func (l *latencies) report(b *testing.B) {
	reportRate(b, "jobs/s")
	s := slices.Clone(l.lat)
	slices.Sort(s)
	pct := func(p int) float64 {
		return float64(s[min(len(s)-1, len(s)*p/100)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(50), "p50-ms")
	b.ReportMetric(pct(99), "p99-ms")
}

// wait waits for every job, failing after timeout.
func (l *latencies) wait(b *testing.B, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
		b.Fatalf("only %d of %d jobs handled after %v", l.n.Load(), len(l.lat), timeout)
	}
}

// BenchmarkEndToEnd measures b.N jobs published (confirmed) while a consumer
// with prefetch 10 and manual acks handles them, until the last is handled.
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("queuey", func(b *testing.B) {
		be := dialB(b)
		defer be.Close()
		prefix := unique("bench-e2e")
		set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: benchPrefetch, MaxPriority: benchMaxPriority}}}
		queue := broker.QueueName(prefix, "work")
		defer deleteQueuesB(b, queue)
		ctx := context.Background()
		producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		worker, err := queuey.NewWorker(be, set, &queuey.WorkerConfig{Concurrency: benchPrefetch, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		var cur atomic.Pointer[latencies]
		cur.Store(newLatencies(1)) // the warm-up job
		err = queuey.Handle(worker, func(_ context.Context, j benchJob, _ queuey.JobContext) error {
			cur.Load().record(j.SentNs)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- worker.Run(runCtx) }()
		defer func() {
			stop()
			if err := <-ran; err != nil {
				b.Errorf("worker: %v", err)
			}
		}()

		pad := envelopePad(b, queue)
		// Warm up: one job through, so the consumer is running.
		if _, err := producer.Enqueue(ctx, benchJob{SentNs: time.Now().UnixNano(), Pad: pad}); err != nil {
			b.Fatal(err)
		}
		cur.Load().wait(b, 30*time.Second)
		lat := newLatencies(b.N)
		cur.Store(lat)

		b.ReportAllocs()
		b.ResetTimer()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range benchPublishers {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if _, err := producer.Enqueue(ctx, benchJob{SentNs: time.Now().UnixNano(), Pad: pad}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		lat.wait(b, 5*time.Minute)
		b.StopTimer()
		lat.report(b)
	})

	b.Run("raw", func(b *testing.B) {
		conn := dialRaw(b)
		defer conn.Close()
		queue := unique("bench-e2e-raw")
		defer deleteQueuesB(b, queue)
		w := newConfirmWindow(b, conn)
		declareRaw(b, w.ch, queue)

		cch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := cch.Qos(benchPrefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		deliveries, err := cch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		var cur atomic.Pointer[latencies]
		cur.Store(newLatencies(1)) // the warm-up message
		consumed := make(chan struct{})
		go func() {
			defer close(consumed)
			for d := range deliveries {
				var j benchJob
				if err := json.Unmarshal(d.Body, &j); err != nil {
					b.Error(err)
				}
				if err := d.Ack(false); err != nil {
					b.Error(err)
				}
				cur.Load().record(j.SentNs)
			}
		}()
		defer func() {
			_ = cch.Close()
			<-consumed
		}()

		w.publish(queue, rawPublishing(jsonBody(time.Now().UnixNano(), benchBodySize)))
		w.drain()
		cur.Load().wait(b, 30*time.Second)
		lat := newLatencies(b.N)
		cur.Store(lat)

		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			w.publish(queue, rawPublishing(jsonBody(time.Now().UnixNano(), benchBodySize)))
		}
		w.drain()
		lat.wait(b, 5*time.Minute)
		b.StopTimer()
		lat.report(b)
	})
}
