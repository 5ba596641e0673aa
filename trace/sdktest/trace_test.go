package sdktest_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/trace"
)

// handle registers the plan-driven handler on the harness's worker.
func handle(t *testing.T, h *clocktest.Harness) {
	t.Helper()
	err := queuey.Handle(h.Worker, func(ctx context.Context, j job, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) })
	if err != nil {
		t.Fatal(err)
	}
}

func diffSpans(t *testing.T, chain []sdktrace.ReadOnlySpan, want []spanView) {
	t.Helper()
	if diff := cmp.Diff(want, views(chain)); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
}

func TestASucceedingJobIsASendAndAProcessUnderTheCallersSpan(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		var mu sync.Mutex
		var tenant string
		var handlerSpan oteltrace.SpanContext
		err := queuey.Handle(h.Worker, func(ctx context.Context, j job, jc queuey.JobContext) error {
			mu.Lock()
			defer mu.Unlock()
			tenant = baggage.FromContext(ctx).Member("tenant").Value()
			handlerSpan = oteltrace.SpanContextFromContext(ctx)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		p := r.producer(t, h.Backend, set, h.Clock)

		ctx, request := r.tp.Tracer("test").Start(withBaggage(t, t.Context(), "tenant", "acme"), "request")
		id, err := p.Enqueue(ctx, job{Name: "ok"}, queuey.WithCorrelationID("order-7"))
		request.End()
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second)

		chain := lifecycle(t, r.spans.Ended(), id)
		diffSpans(t, chain, []spanView{
			sendView(id, "enqueue", 1, 0, 0).with("messaging.message.conversation_id", "order-7"),
			processView(id, 1, 0, 0, queuey.Succeeded).with("messaging.message.conversation_id", "order-7"),
		})
		if got, want := chain[0].Parent().SpanID(), request.SpanContext().SpanID(); got != want {
			t.Errorf("enqueue span's parent: got %s, want the caller's span %s", got, want)
		}
		if got, want := chain[0].SpanContext().TraceID(), request.SpanContext().TraceID(); got != want {
			t.Errorf("the job's trace: got %s, want the caller's %s", got, want)
		}
		mu.Lock()
		if got, want := handlerSpan.SpanID(), chain[1].SpanContext().SpanID(); got != want {
			t.Errorf("handler's span: got %s, want the process span %s", got, want)
		}
		if tenant != "acme" {
			t.Errorf("handler's baggage tenant: got %q, want %q", tenant, "acme")
		}
		mu.Unlock()

		m := r.metrics(t)
		if diff := cmp.Diff(map[string]int64{"succeeded": 1}, m.outcomes(t)); diff != "" {
			t.Errorf("queuey.jobs (-want +got):\n%s", diff)
		}
		if got := summary(m.hist(t, "queuey.job.lateness", "messaging.destination.name", qWork)); got != (histSummary{Count: 1}) {
			t.Errorf("lateness: got %+v, want one run exactly on time", got)
		}
		if n := m.sum(t, "queuey.jobs.in_flight", "messaging.destination.name", qWork); n != 0 {
			t.Errorf("in flight: got %d, want 0", n)
		}
	})
}

// Each job of a batch is its own lifecycle: a send span of its own, under
// the caller's span, and the process span of its run.
func TestEachJobOfABatchIsItsOwnTrace(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		p := r.producer(t, h.Backend, set, h.Clock)
		ctx, request := r.tp.Tracer("test").Start(t.Context(), "request")
		ids, err := p.EnqueueBatch(ctx, []queuey.Job{job{Name: "a"}, job{Name: "b"}, job{Name: "c"}})
		request.End()
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second)
		for _, id := range ids {
			chain := lifecycle(t, r.spans.Ended(), id)
			diffSpans(t, chain, []spanView{
				sendView(id, "enqueue", 1, 0, 0),
				processView(id, 1, 0, 0, queuey.Succeeded),
			})
			if got, want := chain[0].Parent().SpanID(), request.SpanContext().SpanID(); got != want {
				t.Errorf("job %s: send span's parent: got %s, want the caller's span %s", id, got, want)
			}
		}
		if diff := cmp.Diff(map[string]int64{"succeeded": 3}, r.metrics(t).outcomes(t)); diff != "" {
			t.Errorf("queuey.jobs (-want +got):\n%s", diff)
		}
	})
}

func TestARetriedJobIsOneTrace(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "flaky", Fail: 1})
		h.Advance(time.Second) // run 1 fails; its retry waits the 1 s backoff, then runs

		diffSpans(t, lifecycle(t, r.spans.Ended(), id), []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Retried).
				events(ev("retry_scheduled", "queuey.delay_ms", "1000", "queuey.next_attempt", "2")).
				failed("*errors.errorString", "flaky failed on attempt 1"),
			sendView(id, "retry", 2, 0, 0).with("queuey.delay_ms", "1000"),
			processView(id, 2, 0, 0, queuey.Succeeded),
		})
		m := r.metrics(t)
		if diff := cmp.Diff(map[string]int64{"retried": 1, "succeeded": 1}, m.outcomes(t)); diff != "" {
			t.Errorf("queuey.jobs (-want +got):\n%s", diff)
		}
		if got := summary(m.hist(t, "queuey.job.lateness", "messaging.destination.name", qWork)); got != (histSummary{Count: 2}) {
			t.Errorf("lateness: got %+v, want two runs exactly on time", got)
		}
		if n := m.sum(t, "queuey.jobs.held", "messaging.destination.name", qWork); n != 0 {
			t.Errorf("held after the retry ran: got %d, want 0", n)
		}
	})
}

// The key scenario: a handler meets a rate limit, defers for its
// Retry-After, and runs again; every span of both runs is one trace, and
// the second run starts exactly when its wait ends.
func TestADeferredJobIsOneTraceAcrossItsRuns(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "api", Defers: 1, DeferFor: 30 * time.Second})
		h.Clock.Add(2 * time.Second) // the worker starts 2 s after the enqueue: run 1 is 2 s late
		h.Advance(0)                 // run 1 defers for 30 s
		m := r.metrics(t)
		if n := m.sum(t, "queuey.jobs.held", "messaging.destination.name", qWork); n != 1 {
			t.Errorf("held during the deferral: got %d, want 1", n)
		}
		if n := m.sum(t, "queuey.jobs.in_flight", "messaging.destination.name", qWork); n != 0 {
			t.Errorf("in flight during the deferral: got %d, want 0", n)
		}
		h.Advance(30*time.Second - time.Millisecond)
		if n := h.Log.Len(); n != 1 {
			t.Fatalf("runs before the Retry-After passed: got %d, want 1", n)
		}
		h.Advance(time.Millisecond) // run 2, on the dot

		chain := lifecycle(t, r.spans.Ended(), id)
		diffSpans(t, chain, []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Deferred).
				events(ev("deferred", "queuey.delay_ms", "30000", "queuey.reason", "rate limited")),
			sendView(id, "deferral", 1, 1, 10).with("queuey.delay_ms", "30000"),
			processView(id, 1, 1, 10, queuey.Succeeded),
		})
		// lifecycle checked the chain; say it once more in the scenario's words.
		enqueue, run1, deferral, run2 := chain[0], chain[1], chain[2], chain[3]
		for _, rel := range []struct {
			what          string
			child, parent sdktrace.ReadOnlySpan
		}{
			{"run 1's parent is the enqueue", run1, enqueue},
			{"the deferral's parent is run 1", deferral, run1},
			{"run 2's parent is the deferral", run2, deferral},
		} {
			if rel.child.Parent().SpanID() != rel.parent.SpanContext().SpanID() {
				t.Errorf("%s: got parent %s, want %s", rel.what, rel.child.Parent().SpanID(), rel.parent.SpanContext().SpanID())
			}
		}
		if run2.SpanContext().TraceID() != enqueue.SpanContext().TraceID() {
			t.Errorf("run 2 is in trace %s, want the enqueue's %s", run2.SpanContext().TraceID(), enqueue.SpanContext().TraceID())
		}

		m = r.metrics(t)
		// Two records: run 1 was 2 s late; run 2, exactly 0.
		want := histSummary{Count: 2, Sum: 2, Min: 0, Max: 2}
		if got := summary(m.hist(t, "queuey.job.lateness", "messaging.destination.name", qWork)); got != want {
			t.Errorf("lateness: got %+v, want %+v", got, want)
		}
		if n := m.sum(t, "queuey.jobs.held", "messaging.destination.name", qWork); n != 0 {
			t.Errorf("held once run 2 started: got %d, want 0", n)
		}
		if diff := cmp.Diff(map[string]int64{"deferred": 1, "succeeded": 1}, m.outcomes(t)); diff != "" {
			t.Errorf("queuey.jobs (-want +got):\n%s", diff)
		}
	})
}

// A job cancelled while it waits for its deferral stays one trace: its
// last run span is the delivery that ended it unrun, with the outcome
// cancelled and a cancelled event, and queuey.jobs counts it.
func TestACancelledJobEndsItsTraceAsCancelled(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "api", Defers: 1, DeferFor: 30 * time.Second})
		h.Advance(10 * time.Second)
		if err := h.Producer.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		h.Advance(30 * time.Second)
		if n := h.Log.Len(); n != 1 {
			t.Fatalf("runs: got %d, want 1 (before the deferral)", n)
		}
		diffSpans(t, lifecycle(t, r.spans.Ended(), id), []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Deferred).
				events(ev("deferred", "queuey.delay_ms", "30000", "queuey.reason", "rate limited")),
			sendView(id, "deferral", 1, 1, 10).with("queuey.delay_ms", "30000"),
			processView(id, 1, 1, 10, queuey.Cancelled).events(ev("cancelled")),
		})
		if diff := cmp.Diff(map[string]int64{"deferred": 1, "cancelled": 1}, r.metrics(t).outcomes(t)); diff != "" {
			t.Errorf("queuey.jobs (-want +got):\n%s", diff)
		}
	})
}

func TestAPausedQueueIsAnEventOfTheRunThatPausedIt(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "api", Defers: 1, DeferFor: 30 * time.Second, Pause: true})
		// The pause lasts the wait and a tenth of a second more (the
		// broker's landing of the expired job: queuey.PauseQueue).
		pause := 30*time.Second + 100*time.Millisecond
		h.Advance(pause)

		until := clocktest.Epoch.Add(pause).Format(time.RFC3339Nano)
		diffSpans(t, lifecycle(t, r.spans.Ended(), id), []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Deferred).events(
				ev("deferred", "queuey.delay_ms", "30000", "queuey.reason", "rate limited"),
				ev("queue_paused", "queuey.paused_until", until)),
			sendView(id, "deferral", 1, 1, 10).with("queuey.delay_ms", "30000"),
			processView(id, 1, 1, 10, queuey.Succeeded),
		})
	})
}

// A delivery a stopping worker gives back comes back redelivered; with
// PoisonAfter, the next worker counts it by publishing a copy. The held
// count stays honest through both, and the trace shows both runs.
func TestARedeliveredHeldJobIsCountedOnceAndTraced(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	opts := r.options()
	opts.Worker.ShutdownTimeout = 5 * time.Second
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		held := func() int64 {
			t.Helper()
			return r.metrics(t).sum(t, "queuey.jobs.held", "messaging.destination.name", qWork)
		}
		handle(t, h)
		id, err := r.producer(t, h.Backend, set, h.Clock).Defer(t.Context(), job{Name: "slow", Hang: 1}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 1 {
			t.Errorf("held after Defer: got %d, want 1", n)
		}
		h.Advance(10 * time.Second) // released, taken up; the handler hangs
		if n := held(); n != 0 {
			t.Errorf("held while the job runs: got %d, want 0", n)
		}
		if err := h.Stop(); err != nil { // the shutdown timeout interrupts the handler: given back
			t.Fatal(err)
		}
		if n := held(); n != 1 {
			t.Errorf("held once given back: got %d, want 1 (its next delivery counts it down)", n)
		}

		second, err := queuey.NewWorker(h.Backend, set, &queuey.WorkerConfig{
			Clock: h.Clock, Hooks: r.inst.Hooks(), PoisonAfter: 3, Concurrency: 1, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := queuey.Handle(second, func(context.Context, job, queuey.JobContext) error { return nil }); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- second.Run(ctx) }()
		synctest.Wait() // the redelivery is counted and published again; the copy runs
		stop()
		synctest.Wait()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 0 {
			t.Errorf("held at the end: got %d, want 0", n)
		}

		// send(defer) has two process children: the interrupted run and
		// the redelivery; the copy's send hangs off the latter.
		var send, copySend sdktrace.ReadOnlySpan
		var runs []sdktrace.ReadOnlySpan
		for _, s := range r.spans.Ended() {
			switch a := attrMap(s.Attributes()); {
			case a["messaging.message.id"] != id:
			case a["queuey.publish.op"] == "defer":
				send = s
			case a["queuey.publish.op"] == "redelivery":
				copySend = s
			case s.SpanKind() == oteltrace.SpanKindConsumer:
				runs = append(runs, s)
			}
		}
		if send == nil || copySend == nil || len(runs) != 3 {
			t.Fatalf("spans: defer send %v, redelivery send %v, %d process spans: want both sends and 3 runs", send != nil, copySend != nil, len(runs))
		}
		// In the order they ended: one handler slot at a time.
		type run struct{ Outcome, Redelivered, Parent string }
		var got []run
		parentName := map[oteltrace.SpanID]string{send.SpanContext().SpanID(): "defer", copySend.SpanContext().SpanID(): "redelivery"}
		for _, s := range runs {
			a := attrMap(s.Attributes())
			got = append(got, run{a["queuey.outcome"], a["queuey.job.redelivered"], parentName[s.Parent().SpanID()]})
		}
		want := []run{
			{"requeued", "false", "defer"},       // interrupted by the first worker's stop
			{"requeued", "true", "defer"},        // the redelivery, counted and replaced by a copy
			{"succeeded", "false", "redelivery"}, // the copy
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("runs (-want +got):\n%s", diff)
		}
		if copySend.Parent().SpanID() != runs[1].SpanContext().SpanID() {
			t.Errorf("the copy's send: parent %s, want the redelivered run %s", copySend.Parent().SpanID(), runs[1].SpanContext().SpanID())
		}
	})
}

func TestADeadLetteredJobEndsWithASendToTheDeadQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		job     job
		advance time.Duration
		want    func(id string) []spanView
		reason  string
	}{
		{
			name:    "retries exhausted",
			job:     job{Name: "doomed", Fail: 99},
			advance: 2 * time.Second,
			reason:  "max attempts (3) exhausted after attempt 3: doomed failed on attempt 3",
			want: func(id string) []spanView {
				retried := func(attempt string) eventView {
					return ev("retry_scheduled", "queuey.delay_ms", "1000", "queuey.next_attempt", attempt)
				}
				return []spanView{
					sendView(id, "enqueue", 1, 0, 0),
					processView(id, 1, 0, 0, queuey.Retried).events(retried("2")).
						failed("*errors.errorString", "doomed failed on attempt 1"),
					sendView(id, "retry", 2, 0, 0).with("queuey.delay_ms", "1000"),
					processView(id, 2, 0, 0, queuey.Retried).events(retried("3")).
						failed("*errors.errorString", "doomed failed on attempt 2"),
					sendView(id, "retry", 3, 0, 0).with("queuey.delay_ms", "1000"),
					processView(id, 3, 0, 0, queuey.DeadLettered).
						events(ev("dead_lettered", "queuey.reason", "max attempts (3) exhausted after attempt 3: doomed failed on attempt 3")).
						failed("*errors.errorString", "doomed failed on attempt 3"),
					sendView(id, "dead_letter", 3, 0, 0).
						with("queuey.dead_letter.reason", "max attempts (3) exhausted after attempt 3: doomed failed on attempt 3"),
				}
			},
		},
		{
			name:    "fatal",
			job:     job{Name: "bad", Fatal: true},
			advance: time.Second,
			reason:  "fatal error: bad cannot be done",
			want: func(id string) []spanView {
				return []spanView{
					sendView(id, "enqueue", 1, 0, 0),
					processView(id, 1, 0, 0, queuey.DeadLettered).
						events(ev("dead_lettered", "queuey.reason", "fatal error: bad cannot be done")).
						failed("fatal", "job failed (fatal): bad cannot be done"),
					sendView(id, "dead_letter", 1, 0, 0).with("queuey.dead_letter.reason", "fatal error: bad cannot be done"),
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			set := setOf(work)
			clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
				handle(t, h)
				id, err := r.producer(t, h.Backend, set, h.Clock).Enqueue(t.Context(), tc.job)
				if err != nil {
					t.Fatal(err)
				}
				h.Advance(tc.advance)

				chain := lifecycle(t, r.spans.Ended(), id)
				diffSpans(t, chain, tc.want(id))

				// The dead letter carries its send span's context on the wire.
				dead := h.Backend.DeadLetters(qWork)
				if len(dead) != 1 {
					t.Fatalf("dead letters: got %d, want 1", len(dead))
				}
				if dead[0].Reason != tc.reason {
					t.Errorf("dead letter reason: got %q, want %q", dead[0].Reason, tc.reason)
				}
				sent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(dead[0].Headers))
				if got, want := oteltrace.SpanContextFromContext(sent).SpanID(), chain[len(chain)-1].SpanContext().SpanID(); got != want {
					t.Errorf("dead letter's traceparent names span %s, want the dead-letter send %s", got, want)
				}
				if _, held := dead[0].Headers[trace.HeaderHeld]; held {
					t.Errorf("dead letter carries %s: a dead letter is not held", trace.HeaderHeld)
				}
				if n := r.metrics(t).outcomes(t)["dead_lettered"]; n != 1 {
					t.Errorf("queuey.jobs dead_lettered: got %d, want 1", n)
				}
			})
		})
	}
}

func TestATimedOutRunIsAFailedSpanAndItsRetryFollows(t *testing.T) {
	q := work
	q.JobTimeout, q.Retry = 5*time.Second, &queuey.RetryPolicy{MaxAttempts: 2, Backoff: queuey.FixedBackoff(time.Second)}
	set := setOf(q)
	r := newRig(t)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "stuck", Hang: 1})
		h.Advance(5*time.Second - time.Millisecond)
		if n := r.metrics(t).sum(t, "queuey.jobs.in_flight", "messaging.destination.name", qWork); n != 1 {
			t.Errorf("in flight while the handler hangs: got %d, want 1", n)
		}
		for _, s := range r.spans.Ended() {
			if s.SpanKind() == oteltrace.SpanKindConsumer {
				t.Errorf("span %q ended while its handler still runs", s.Name())
			}
		}
		h.Advance(time.Second + time.Millisecond) // the timeout, then the 1 s backoff

		diffSpans(t, lifecycle(t, r.spans.Ended(), id), []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Retried).
				events(ev("timed_out"), ev("retry_scheduled", "queuey.delay_ms", "1000", "queuey.next_attempt", "2")).
				failed("timeout", "job timed out after 5s: context deadline exceeded"),
			sendView(id, "retry", 2, 0, 0).with("queuey.delay_ms", "1000"),
			processView(id, 2, 0, 0, queuey.Succeeded),
		})
		m := r.metrics(t)
		// Run 2 took no virtual time, so only run 1's 5 s is recorded.
		want := histSummary{Count: 1, Sum: 5, Min: 5, Max: 5}
		if got := summary(m.hist(t, "queuey.handler.duration", "messaging.destination.name", qWork, "queuey.job.kind", "job")); got != want {
			t.Errorf("handler duration: got %+v, want %+v", got, want)
		}
		if n := m.sum(t, "queuey.jobs.in_flight", "messaging.destination.name", qWork); n != 0 {
			t.Errorf("in flight at the end: got %d, want 0", n)
		}
	})
}

func TestAPanicIsAnEventWithoutItsValue(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	clocktest.Run(t, set, r.options(), func(t *testing.T, h *clocktest.Harness) {
		handle(t, h)
		id := r.enqueue(t, h, set, job{Name: "boom", Panic: 1, Work: 250 * time.Millisecond})
		h.Advance(2 * time.Second)

		diffSpans(t, lifecycle(t, r.spans.Ended(), id), []spanView{
			sendView(id, "enqueue", 1, 0, 0),
			processView(id, 1, 0, 0, queuey.Retried).
				events(ev("panicked"), ev("retry_scheduled", "queuey.delay_ms", "1000", "queuey.next_attempt", "2")).
				failed("panic", "handler panicked"),
			sendView(id, "retry", 2, 0, 0).with("queuey.delay_ms", "1000"),
			processView(id, 2, 0, 0, queuey.Succeeded),
		})
		want := histSummary{Count: 2, Sum: 0.5, Min: 0.25, Max: 0.25}
		if got := summary(r.metrics(t).hist(t, "queuey.handler.duration", "messaging.destination.name", qWork, "queuey.job.kind", "job")); got != want {
			t.Errorf("handler duration: got %+v, want %+v", got, want)
		}
	})
}

func TestAFailedPublishIsAFailedSpanAndHoldsNothing(t *testing.T) {
	r := newRig(t)
	set := setOf(work)
	backend := memory.New(nil)
	defer backend.Close()
	_, err := r.producer(t, backend, set, nil).Defer(t.Context(), job{Name: "later"}, 25*24*time.Hour)
	if !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Fatalf("Defer 25 days: got %v, want ErrDelayTooLong", err)
	}
	spans := r.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("spans: got %d (%v), want 1", len(spans), names(spans))
	}
	s := view(spans[0])
	if s.Name != "send "+qWork || s.Kind != oteltrace.SpanKindProducer || s.Status != codes.Error || s.Attrs["error.type"] == "" ||
		s.Attrs["queuey.publish.op"] != "defer" || s.Attrs["queuey.delay_ms"] != "2160000000" {
		t.Errorf("send span: got %+v, want a failed defer of %s", s, qWork)
	}
	if s.Desc == "" || !strings.HasSuffix(err.Error(), s.Desc) { // Defer wraps what the hook saw
		t.Errorf("status description: got %q, want the publish's error (within %q)", s.Desc, err)
	}
	if n := r.metrics(t).sum(t, "queuey.jobs.held", "messaging.destination.name", qWork); n != 0 {
		t.Errorf("held after a refused hold: got %d, want 0", n)
	}
}

// The hooks on their own, for what a backend cannot easily be made to do.
func TestTheDeliverHook(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	delivery := func() *queuey.DeliveryInfo {
		return &queuey.DeliveryInfo{
			System: "rabbitmq", Queue: "work", BrokerQueue: qWork, Started: started,
			Job: queuey.JobContext{JobID: "j1", Kind: "job", Queue: "work", BrokerQueue: qWork, Attempt: 1, CorrelationID: "order-7", Redelivered: true},
		}
	}

	t.Run("without a trace context it starts a new trace, whatever the worker's ctx holds", func(t *testing.T) {
		r := newRig(t)
		ctx, run := r.tp.Tracer("test").Start(t.Context(), "worker run")
		defer run.End()
		ctx = withBaggage(t, ctx, "worker_secret", "s3cr3t")
		hctx, finish := r.inst.Hooks().Deliver(ctx, delivery())
		if got := baggage.FromContext(hctx); got.Len() != 0 {
			t.Errorf("the handler's baggage is the worker's: %v", got)
		}
		got := oteltrace.SpanContextFromContext(hctx)
		finish(queuey.Outcome{Result: queuey.Succeeded})
		s := r.spans.Ended()[0]
		if s.Parent().IsValid() || len(s.Links()) != 0 {
			t.Errorf("parent %v, links %v: want a root span without links", s.Parent(), s.Links())
		}
		if got.TraceID() == run.SpanContext().TraceID() {
			t.Errorf("the job joined the worker's trace %s", got.TraceID())
		}
		attrs := view(s).Attrs
		if attrs["messaging.system"] != "rabbitmq" || attrs["queuey.job.redelivered"] != "true" || attrs["messaging.message.conversation_id"] != "order-7" {
			t.Errorf("attributes: got %v", attrs)
		}
		if got := summary(r.metrics(t).hist(t, "queuey.job.lateness", "messaging.destination.name", qWork)); got.Count != 0 {
			t.Errorf("lateness without a due time: got %+v, want nothing recorded", got)
		}
	})

	t.Run("a panic after the job's timeout keeps its value off the span", func(t *testing.T) {
		r := newRig(t)
		_, finish := r.inst.Hooks().Deliver(t.Context(), delivery())
		finish(queuey.Outcome{Result: queuey.Retried, TimedOut: true, Panicked: true, Ran: true,
			Err: errors.New("job timed out after 50ms: handler panicked: password=hunter2")})
		s := r.spans.Ended()[0]
		if got := s.Status(); got.Code != codes.Error || got.Description != "handler panicked" {
			t.Errorf("status %v %q, want Error \"handler panicked\"", got.Code, got.Description)
		}
		if got := view(s).Attrs["error.type"]; got != "panic" {
			t.Errorf("error.type %q, want panic", got)
		}
	})

	t.Run("lateness is never negative", func(t *testing.T) {
		r := newRig(t)
		d := delivery()
		d.DueAt = started.Add(time.Second) // clocks of producer and worker disagree
		_, finish := r.inst.Hooks().Deliver(t.Context(), d)
		finish(queuey.Outcome{Result: queuey.Succeeded})
		if got := summary(r.metrics(t).hist(t, "queuey.job.lateness", "messaging.destination.name", qWork)); got != (histSummary{Count: 1}) {
			t.Errorf("lateness: got %+v, want one record of 0", got)
		}
	})

	t.Run("a body that is not an envelope has no job attributes", func(t *testing.T) {
		r := newRig(t)
		d := delivery()
		d.Job = queuey.JobContext{}
		_, finish := r.inst.Hooks().Deliver(t.Context(), d)
		finish(queuey.Outcome{Result: queuey.DeadLettered, Reason: "malformed envelope: eof"})
		got := view(r.spans.Ended()[0])
		want := spanView{
			Name: "process " + qWork, Kind: oteltrace.SpanKindConsumer, Status: codes.Error, Desc: "malformed envelope: eof",
			Attrs: map[string]string{
				"messaging.system": "rabbitmq", "messaging.operation.type": "process", "messaging.operation.name": "process",
				"messaging.destination.name": qWork, "queuey.outcome": "dead_lettered", "error.type": "_OTHER",
			},
			Events: []eventView{ev("dead_lettered", "queuey.reason", "malformed envelope: eof")},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("span (-want +got):\n%s", diff)
		}
	})

	t.Run("a held delivery given back is counted as held again", func(t *testing.T) {
		r := newRig(t)
		d := delivery()
		d.Headers = map[string]string{trace.HeaderHeld: "1"}
		_, finish := r.inst.Hooks().Deliver(t.Context(), d)
		m := r.metrics(t)
		if n := m.sum(t, "queuey.jobs.held", "messaging.destination.name", qWork); n != -1 {
			t.Errorf("held once taken up: got %d, want -1 (the +1 was another process's)", n)
		}
		finish(queuey.Outcome{Result: queuey.Requeued, SettleErr: errors.New("channel closed")})

		m = r.metrics(t)
		for _, c := range []struct {
			name string
			want int64
		}{{"queuey.jobs.held", 0}, {"queuey.jobs.in_flight", 0}, {"queuey.settle.failures", 1}} {
			if n := m.sum(t, c.name, "messaging.destination.name", qWork); n != c.want {
				t.Errorf("%s: got %d, want %d", c.name, n, c.want)
			}
		}
		got := view(r.spans.Ended()[0])
		if got.Status != codes.Error || got.Desc != "settle failed: channel closed" || got.Attrs["error.type"] != "settle_failed" {
			t.Errorf("status %v %q, error.type %q: want Error, settle failed", got.Status, got.Desc, got.Attrs["error.type"])
		}
		if diff := cmp.Diff([]eventView{ev("settle_failed", "queuey.error", "channel closed")}, got.Events); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestHooksIsOneValue(t *testing.T) {
	r := newRig(t)
	first, second := r.inst.Hooks(), r.inst.Hooks()
	if first != second || first.Publish == nil || first.Deliver == nil {
		t.Errorf("Hooks: want the same complete value on every call")
	}
	if _, err := trace.New(nil); err != nil {
		t.Errorf("New(nil): %v", err)
	}
}
