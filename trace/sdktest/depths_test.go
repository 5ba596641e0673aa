package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

var depthSet = queuey.QueueSet{Prefix: "app", Queues: []queuey.Queue{{Name: "mail"}, {Name: "api"}}}

// mail is a job of depthSet's mail queue.
type mail struct{}

func (mail) Kind() string        { return "mail" }
func (mail) Queue() queuey.Queue { return queuey.Queue{Name: "mail"} }

// depthReader is a meter provider read by hand, with the depth gauges of
// depthSet on backend registered.
type depthReader struct {
	reader *sdkmetric.ManualReader
	reg    interface{ Unregister() error }
}

func newDepthReader(t *testing.T, backend broker.Backend) *depthReader {
	t.Helper()
	d := &depthReader{reader: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(d.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := trace.ObserveDepths(backend, depthSet, &trace.DepthOptions{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	d.reg = reg
	return d
}

// gauges collects once and returns each gauge's value by queue:
// "queuey.queue.ready app.mail" -> 2. A collection's error is returned.
func (d *depthReader) gauges(t *testing.T) (map[string]int64, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := d.reader.Collect(context.Background(), &rm)
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			g, ok := md.Data.(metricdata.Gauge[int64])
			if !ok {
				t.Fatalf("%s: got %T, want an int64 gauge", md.Name, md.Data)
			}
			if md.Unit != "{message}" {
				t.Errorf("%s: unit %q, want {message}", md.Name, md.Unit)
			}
			for _, dp := range g.DataPoints {
				q, _ := dp.Attributes.Value("messaging.destination.name")
				got[md.Name+" "+q.AsString()] = dp.Value
			}
		}
	}
	return got, err
}

// depths is what gauges should report for app.mail and app.api.
func depths(ready, unacked, held, dead int64) map[string]int64 {
	m := map[string]int64{}
	for _, q := range []string{"app.mail", "app.api"} {
		for _, g := range []string{"ready", "unacked", "held", "dead", "suspects"} {
			m["queuey.queue."+g+" "+q] = 0
		}
	}
	m["queuey.queue.ready app.mail"], m["queuey.queue.unacked app.mail"] = ready, unacked
	m["queuey.queue.held app.mail"], m["queuey.queue.dead app.mail"] = held, dead
	return m
}

func TestTheDepthGaugesReportWhatTheMemoryBackendHolds(t *testing.T) {
	ctx := t.Context()
	mock := clock.NewMock()
	backend := memory.New(&memory.Options{Clock: mock})
	defer backend.Close()
	producer, err := queuey.NewProducer(ctx, backend, depthSet, &queuey.ProducerConfig{Clock: mock})
	if err != nil {
		t.Fatal(err)
	}
	d := newDepthReader(t, backend)
	for i := range 5 {
		var err error
		if i < 3 {
			_, err = producer.Enqueue(ctx, mail{})
		} else {
			_, err = producer.EnqueueAfter(ctx, mail{}, 30*time.Second) // held
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := backend.DeadLetter(ctx, broker.DeadLetter{Message: broker.Message{Queue: "app.mail", ID: "x", Body: []byte("{}")}, Reason: "fatal"}); err != nil {
		t.Fatal(err)
	}
	c, err := backend.Consume(ctx, "app.mail", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	<-c.Deliveries() // one held by a consumer: unacked

	got, err := d.gauges(t)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(depths(2, 1, 2, 1), got); diff != "" {
		t.Errorf("gauges (-want +got):\n%s", diff)
	}

	mock.Add(30 * time.Second) // the holds end: both jobs are ready
	if got, err = d.gauges(t); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(depths(4, 1, 0, 1), got); diff != "" {
		t.Errorf("gauges after 30 s (-want +got):\n%s", diff)
	}

	if err := d.reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got, err = d.gauges(t); err != nil || len(got) != 0 {
		t.Errorf("gauges after Unregister: %v, %v; want none", got, err)
	}
}

// callCounter is a backend whose Depth calls are counted (and fail while
// fail is set), and which the inspector does not know as the memory
// backend: it reads it as it reads RabbitMQ without the management API.
type callCounter struct {
	broker.Backend
	calls int
	fail  error
}

func (c *callCounter) Depth(ctx context.Context, q string) (int, error) {
	c.calls++
	if c.fail != nil {
		return 0, c.fail
	}
	return c.Backend.Depth(ctx, q)
}

func TestACollectionCostsThreeDepthCallsAQueueWithoutTheManagementAPI(t *testing.T) {
	mem := memory.New(nil)
	defer mem.Close()
	if _, err := queuey.NewProducer(t.Context(), mem, depthSet, nil); err != nil {
		t.Fatal(err)
	}
	b := &callCounter{Backend: mem}
	d := newDepthReader(t, b)
	got, err := d.gauges(t)
	if err != nil {
		t.Fatal(err)
	}
	if b.calls != 6 {
		t.Errorf("one collection made %d Depth calls, want 6 (3 queues each of 2), shared by the five gauges", b.calls)
	}
	// Without the management API, unacked and held cannot be told: not
	// reported, rather than reported as 0. The suspects queues were never
	// declared, so their count is unknown too.
	want := map[string]int64{"queuey.queue.ready app.mail": 0, "queuey.queue.dead app.mail": 0, "queuey.queue.ready app.api": 0, "queuey.queue.dead app.api": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gauges (-want +got):\n%s", diff)
	}

	b.fail = errors.New("connection lost")
	got, err = d.gauges(t)
	if err == nil || !strings.Contains(err.Error(), "queue depths: connection lost") || len(got) != 0 {
		t.Errorf("a collection whose look fails: %v, %v; want no gauge and the look's error", got, err)
	}
}

// BenchmarkDepthCollection is one collection of the depth gauges of 200
// queues on the memory backend: one look at it and 1,000 observations.
func BenchmarkDepthCollection(b *testing.B) {
	mem := memory.New(nil)
	defer mem.Close()
	set := queuey.QueueSet{Prefix: "bench"}
	for i := range 200 {
		set.Queues = append(set.Queues, queuey.Queue{Name: fmt.Sprintf("q%03d", i)})
	}
	if _, err := queuey.NewProducer(b.Context(), mem, set, nil); err != nil {
		b.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	if _, err := trace.ObserveDepths(mem, set, &trace.DepthOptions{MeterProvider: mp}); err != nil {
		b.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	for b.Loop() {
		if err := reader.Collect(context.Background(), &rm); err != nil {
			b.Fatal(err)
		}
	}
}
