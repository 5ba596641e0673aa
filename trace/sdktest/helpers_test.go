package sdktest_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// work is the tests' queue; each test's QueueSet gives its settings, by name.
var work = queuey.Queue{Name: "work", Prefetch: 4, Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(time.Second)}}

const qWork = "tr.work"

func setOf(q queuey.Queue) queuey.QueueSet {
	return queuey.QueueSet{Prefix: "tr", Queues: []queuey.Queue{q}}
}

// job's handler follows its plan.
type job struct {
	Name     string        `json:"name"`
	Fail     int           `json:"fail,omitempty"`      // fail while Attempt <= Fail
	Defers   int           `json:"defers,omitempty"`    // defer while Deferrals < Defers
	DeferFor time.Duration `json:"defer_for,omitempty"` // how long each deferral asks for
	Fatal    bool          `json:"fatal,omitempty"`
	Panic    int           `json:"panic,omitempty"` // panic while Attempt <= Panic
	Hang     int           `json:"hang,omitempty"`  // wait for ctx to end while Attempt <= Hang
	Work     time.Duration `json:"work,omitempty"`  // take this long on the clock
	Pause    bool          `json:"pause,omitempty"` // defer with PauseQueue rather than Defer
}

func (job) Kind() string        { return "job" }
func (job) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

func (j job) run(ctx context.Context, c clock.Clock, jc queuey.JobContext) error {
	if jc.Attempt <= j.Hang {
		<-ctx.Done() // the job timeout, on the worker's clock
		return ctx.Err()
	}
	if j.Work > 0 {
		t := c.Timer(j.Work)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch {
	case jc.Attempt <= j.Panic:
		panic(fmt.Sprintf("boom on attempt %d", jc.Attempt))
	case j.Fatal:
		return queuey.Fatalf("%s cannot be done", j.Name)
	case jc.Deferrals < j.Defers && j.Pause:
		return queuey.PauseQueue(j.DeferFor, "rate limited")
	case jc.Deferrals < j.Defers:
		return queuey.Defer(j.DeferFor, "rate limited")
	case jc.Attempt <= j.Fail:
		return fmt.Errorf("%s failed on attempt %d", j.Name, jc.Attempt)
	}
	return nil
}

// rig is an Instrumentation on an SDK tracer provider that records every
// span and a meter provider read by hand.
type rig struct {
	inst   *trace.Instrumentation
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newRig(t testing.TB) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	var err error
	if r.inst, err = trace.New(&trace.Options{TracerProvider: r.tp, MeterProvider: mp}); err != nil {
		t.Fatal(err)
	}
	return r
}

// options puts the rig's hooks on a clocktest worker.
func (r *rig) options() *clocktest.Options {
	return &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: r.inst.Hooks()}}
}

// producer is an instrumented producer on backend, on clock c.
func (r *rig) producer(t *testing.T, backend broker.Backend, set queuey.QueueSet, c clock.Clock) *queuey.Producer {
	t.Helper()
	p, err := queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: c, Hooks: r.inst.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// enqueue enqueues j through an instrumented producer on the harness's
// backend and clock, and returns its id.
func (r *rig) enqueue(t *testing.T, h *clocktest.Harness, set queuey.QueueSet, j job) string {
	t.Helper()
	id, err := r.producer(t, h.Backend, set, h.Clock).Enqueue(t.Context(), j)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// spanView is what the tests compare of a span: everything but ids and times.
type spanView struct {
	Name   string
	Kind   oteltrace.SpanKind
	Status codes.Code
	Desc   string
	Attrs  map[string]string
	Events []eventView
}

type eventView struct {
	Name  string
	Attrs map[string]string
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func view(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{Name: s.Name(), Kind: s.SpanKind(), Status: s.Status().Code, Desc: s.Status().Description, Attrs: attrMap(s.Attributes())}
	for _, e := range s.Events() {
		ev := eventView{Name: e.Name}
		if len(e.Attributes) > 0 {
			ev.Attrs = attrMap(e.Attributes)
		}
		v.Events = append(v.Events, ev)
	}
	return v
}

// with returns v with more attributes (key, value pairs).
func (v spanView) with(kv ...string) spanView {
	v.Attrs = maps.Clone(v.Attrs)
	for i := 0; i < len(kv); i += 2 {
		v.Attrs[kv[i]] = kv[i+1]
	}
	return v
}

// failed returns v with an Error status.
func (v spanView) failed(errType, desc string) spanView {
	v = v.with("error.type", errType)
	v.Status, v.Desc = codes.Error, desc
	return v
}

func (v spanView) events(evs ...eventView) spanView {
	v.Events = evs
	return v
}

func ev(name string, kv ...string) eventView {
	e := eventView{Name: name}
	if len(kv) > 0 {
		e.Attrs = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			e.Attrs[kv[i]] = kv[i+1]
		}
	}
	return e
}

// sendView is the send span of one publish of job id on the memory backend.
func sendView(id, op string, attempt, deferrals, priority int) spanView {
	dest := qWork
	if op == string(queuey.OpDeadLetter) {
		dest += ".dead"
	}
	return spanView{
		Name: "send " + dest,
		Kind: oteltrace.SpanKindProducer,
		Attrs: map[string]string{
			"messaging.system":           "memory",
			"messaging.operation.type":   "send",
			"messaging.operation.name":   "send",
			"messaging.destination.name": dest,
			"messaging.message.id":       id,
			"queuey.publish.op":          op,
			"queuey.job.kind":            "job",
			"queuey.job.attempt":         fmt.Sprint(attempt),
			"queuey.job.deferrals":       fmt.Sprint(deferrals),
			"queuey.job.priority":        fmt.Sprint(priority),
		},
	}
}

// processView is the process span of one run of job id on the memory backend.
func processView(id string, attempt, deferrals, priority int, outcome queuey.Result) spanView {
	return spanView{
		Name: "process " + qWork,
		Kind: oteltrace.SpanKindConsumer,
		Attrs: map[string]string{
			"messaging.system":           "memory",
			"messaging.operation.type":   "process",
			"messaging.operation.name":   "process",
			"messaging.destination.name": qWork,
			"messaging.message.id":       id,
			"queuey.job.kind":            "job",
			"queuey.job.attempt":         fmt.Sprint(attempt),
			"queuey.job.deferrals":       fmt.Sprint(deferrals),
			"queuey.job.priority":        fmt.Sprint(priority),
			"queuey.job.redelivered":     "false",
			"queuey.outcome":             string(outcome),
		},
	}
}

// lifecycle returns the spans of job id in parent-to-child order. It fails
// the test unless they form one chain in one trace, send and process
// alternating from a send, each process span a child of the send before it
// with a link to it too, and each later send a child of the process before.
func lifecycle(t *testing.T, spans []sdktrace.ReadOnlySpan, id string) []sdktrace.ReadOnlySpan {
	t.Helper()
	var mine []sdktrace.ReadOnlySpan
	byID := map[oteltrace.SpanID]bool{}
	for _, s := range spans {
		if attrMap(s.Attributes())["messaging.message.id"] == id {
			mine = append(mine, s)
			byID[s.SpanContext().SpanID()] = true
		}
	}
	children := map[oteltrace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range mine {
		if p := s.Parent(); p.IsValid() && byID[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	if len(roots) != 1 {
		t.Fatalf("job %s: got %d spans without a parent among its own (%v), want 1", id, len(roots), names(roots))
	}
	chain := roots
	for {
		last := chain[len(chain)-1]
		next := children[last.SpanContext().SpanID()]
		if len(next) == 0 {
			break
		}
		if len(next) > 1 {
			t.Fatalf("job %s: span %q has %d children (%v), want at most 1", id, last.Name(), len(next), names(next))
		}
		chain = append(chain, next[0])
	}
	if len(chain) != len(mine) {
		t.Fatalf("job %s: the chain from its first span holds %d of its %d spans", id, len(chain), len(mine))
	}
	traceID := chain[0].SpanContext().TraceID()
	for i, s := range chain {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("job %s: span %d (%s) is in trace %s, want %s", id, i, s.Name(), s.SpanContext().TraceID(), traceID)
		}
		wantKind := oteltrace.SpanKindProducer
		if i%2 == 1 {
			wantKind = oteltrace.SpanKindConsumer
		}
		if s.SpanKind() != wantKind {
			t.Errorf("job %s: span %d (%s) kind: got %v, want %v", id, i, s.Name(), s.SpanKind(), wantKind)
		}
		if s.SpanKind() != oteltrace.SpanKindConsumer {
			continue
		}
		links := s.Links()
		if len(links) != 1 || !links[0].SpanContext.Equal(chain[i-1].SpanContext().WithRemote(true)) {
			t.Errorf("job %s: span %d (%s) links: got %+v, want one to its parent %s", id, i, s.Name(), links, chain[i-1].SpanContext().SpanID())
		}
		if !s.Parent().IsRemote() {
			t.Errorf("job %s: span %d (%s): parent is not remote: it must come from the headers", id, i, s.Name())
		}
	}
	return chain
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name())
	}
	return n
}

func views(spans []sdktrace.ReadOnlySpan) []spanView {
	var v []spanView
	for _, s := range spans {
		v = append(v, view(s))
	}
	return v
}

// metrics collects what the rig's instruments hold.
type metrics map[string]metricdata.Aggregation

func (r *rig) metrics(t *testing.T) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != trace.ScopeName {
			t.Errorf("scope: got %q, want %q", sm.Scope.Name, trace.ScopeName)
		}
		for _, md := range sm.Metrics {
			m[md.Name] = md.Data
		}
	}
	return m
}

// sum is the value of a counter or up-down counter for exactly the
// attributes kv (key, value pairs). The point must be there: an
// instrument that stopped reporting fails the test rather than read as 0.
func (m metrics) sum(t *testing.T, name string, kv ...string) int64 {
	t.Helper()
	n, ok := m.point(t, name, kv...)
	if !ok {
		t.Fatalf("%s%v: no point reported", name, kv)
	}
	return n
}

// point is sum's value and whether the point was reported.
func (m metrics) point(t *testing.T, name string, kv ...string) (int64, bool) {
	t.Helper()
	data, ok := m[name]
	if !ok {
		return 0, false
	}
	s, ok := data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: got %T, want an int64 sum", name, data)
	}
	want := attrSet(kv)
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// hist is the histogram point of name for exactly the attributes kv.
func (m metrics) hist(t *testing.T, name string, kv ...string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	data, ok := m[name]
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	h, ok := data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: got %T, want a float64 histogram", name, data)
	}
	want := attrSet(kv)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

func attrSet(kv []string) attribute.Set {
	var kvs []attribute.KeyValue
	for i := 0; i < len(kv); i += 2 {
		kvs = append(kvs, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(kvs...)
}

// histSummary is what the tests compare of a histogram point.
type histSummary struct {
	Count    uint64
	Sum      float64
	Min, Max float64
}

func summary(dp metricdata.HistogramDataPoint[float64]) histSummary {
	s := histSummary{Count: dp.Count, Sum: dp.Sum}
	if v, ok := dp.Min.Value(); ok {
		s.Min = v
	}
	if v, ok := dp.Max.Value(); ok {
		s.Max = v
	}
	return s
}

// outcomes lists queuey.jobs by outcome for the work queue.
func (m metrics) outcomes(t *testing.T) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, o := range []queuey.Result{queuey.Succeeded, queuey.Retried, queuey.Deferred, queuey.DeadLettered, queuey.Requeued, queuey.Unhandled, queuey.Cancelled} {
		// An outcome is reported once it has happened.
		if n, ok := m.point(t, "queuey.jobs", "messaging.destination.name", qWork, "queuey.outcome", string(o)); ok {
			got[string(o)] = n
		}
	}
	return got
}

// withBaggage returns ctx carrying the baggage key=value.
func withBaggage(t *testing.T, ctx context.Context, key, value string) context.Context {
	t.Helper()
	member, err := baggage.NewMember(key, value)
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, bag)
}
