package sdktest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/baggage"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// The trace context survives a real broker: through the work queue, and
// through a hold queue's dead-lettering back to it.
func TestTheTraceContextTravelsThroughRabbitMQ(t *testing.T) {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "qt.trace." + hex.EncodeToString(b)
	const deferFor = 100 * time.Millisecond
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{work}, DeferGranularity: deferFor}
	queue := broker.QueueName(prefix, work.Name)
	t.Cleanup(func() {
		rabbittest.DeleteQueues(t, queue, broker.DeadQueueName(queue), broker.HoldQueueName(queue, deferFor),
			broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix))
	})

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	backend, err := rabbitmq.Dial(ctx, rabbittest.URL(), &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("this test needs RabbitMQ at %s: %v\n"+
			"start a local one with `rabbitmq-server -detached && rabbitmqctl await_startup`, "+
			"or set QUEUEY_AMQP_URL to one that runs elsewhere", rabbitmq.Redact(rabbittest.URL()), err)
	}
	t.Cleanup(func() { _ = backend.Close() })

	r := newRig(t)
	producer := r.producer(t, backend, set, nil)
	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{
		Concurrency: 1, Hooks: r.inst.Hooks(), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	var seenMu sync.Mutex
	var tenants []string // the baggage each run saw
	err = queuey.Handle(worker, func(ctx context.Context, j job, jc queuey.JobContext) error {
		seenMu.Lock()
		tenants = append(tenants, baggage.FromContext(ctx).Member("tenant").Value())
		seenMu.Unlock()
		err := j.run(ctx, clock.New(), jc)
		if err == nil {
			once.Do(func() { close(done) })
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()

	reqCtx, request := r.tp.Tracer("test").Start(withBaggage(t, ctx, "tenant", "acme"), "request")
	id, err := producer.Enqueue(reqCtx, job{Name: "remote", Defers: 1, DeferFor: deferFor})
	request.End()
	if err != nil {
		stop()
		<-stopped
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Errorf("the job did not run to success: %v", ctx.Err())
	}
	stop()
	if err := <-stopped; err != nil { // every hook's finish has run once Run returns
		t.Errorf("worker: %v", err)
	}
	if t.Failed() {
		return
	}

	chain := lifecycle(t, r.spans.Ended(), id)
	onRabbit := func(v spanView) spanView {
		v.Name = strings.Replace(v.Name, qWork, queue, 1)
		v.Attrs["messaging.system"] = "rabbitmq"
		v.Attrs["messaging.destination.name"] = strings.Replace(v.Attrs["messaging.destination.name"], qWork, queue, 1)
		return v
	}
	want := []spanView{
		onRabbit(sendView(id, "enqueue", 1, 0, 0)),
		onRabbit(processView(id, 1, 0, 0, queuey.Deferred).events(ev("deferred", "queuey.delay_ms", "100", "queuey.reason", "rate limited"))),
		onRabbit(sendView(id, "deferral", 1, 1, 10).with("queuey.delay_ms", "100")),
		onRabbit(processView(id, 1, 1, 10, queuey.Succeeded)),
	}
	if diff := cmp.Diff(want, views(chain)); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	if got, want := chain[0].SpanContext().TraceID(), request.SpanContext().TraceID(); got != want {
		t.Errorf("the job's trace: got %s, want the caller's %s", got, want)
	}
	if got, want := chain[1].Parent().SpanID(), chain[0].SpanContext().SpanID(); got != want {
		t.Errorf("the process span's parent: got %s, want the send span %s", got, want)
	}
	seenMu.Lock()
	if diff := cmp.Diff([]string{"acme", "acme"}, tenants); diff != "" {
		t.Errorf("the caller's baggage in each run (-want +got):\n%s", diff)
	}
	seenMu.Unlock()
	m := r.metrics(t)
	if n := m.sum(t, "queuey.jobs.held", "messaging.destination.name", queue); n != 0 {
		t.Errorf("held at the end: got %d, want 0 (the held header must survive the hold queue)", n)
	}
	if got := summary(m.hist(t, "queuey.job.lateness", "messaging.destination.name", queue)); got.Count != 2 || got.Min < 0 {
		t.Errorf("lateness: got %+v, want two records, none negative", got)
	}
}
