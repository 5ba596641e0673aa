package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
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
	"github.com/queuey-go/queuey/chaos"
)

// inWorker is a queuey Worker in the test process, on a connection of its
// own, that records what it ran: bad input needs no process to kill.
type inWorker struct {
	t    *testing.T
	w    *queuey.Worker
	logs *syncBuffer

	mu       sync.Mutex
	starts   map[int][]time.Time // by seq
	attempts map[int][]int
	dead     []queuey.DeadLetterEvent
	outcomes map[queuey.Result]int

	stop context.CancelFunc
	ran  chan error
}

type inOptions struct {
	prefetch, concurrency, poisonAfter int
	unknownKindWait                    time.Duration // WorkerConfig.UnknownKindWait
	url                                string
	opts                               rabbitmq.Options
}

func (r *rig) startInWorker(o inOptions) *inWorker {
	r.t.Helper()
	iw := &inWorker{t: r.t, logs: &syncBuffer{}, starts: map[int][]time.Time{}, attempts: map[int][]int{}, outcomes: map[queuey.Result]int{}}
	log := slog.New(slog.NewJSONHandler(iw.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o.opts.ConnectionName = r.prefix + ".inworker"
	o.opts.Logger = log
	o.opts.ReconnectMin, o.opts.ReconnectMax = 50*time.Millisecond, time.Second
	b := r.dial(cmpOr(o.url, rabbittest.URL()), &o.opts)
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		return ctx, func(out queuey.Outcome) {
			iw.mu.Lock()
			iw.outcomes[out.Result]++
			iw.mu.Unlock()
		}
	}}
	var err error
	iw.w, err = queuey.NewWorker(b, chaos.QueueSet(r.prefix, cmpOr(o.prefetch, 16)), &queuey.WorkerConfig{
		Concurrency:     o.concurrency,
		PoisonAfter:     o.poisonAfter,
		UnknownKindWait: o.unknownKindWait,
		Hooks:           hooks,
		Logger:          log,
		OnDeadLetter: func(_ context.Context, dl queuey.DeadLetterEvent) {
			iw.mu.Lock()
			iw.dead = append(iw.dead, dl)
			iw.mu.Unlock()
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	err = queuey.Handle(iw.w, func(ctx context.Context, j chaos.Job, jc queuey.JobContext) error {
		iw.mu.Lock()
		iw.starts[j.Seq] = append(iw.starts[j.Seq], time.Now())
		iw.attempts[j.Seq] = append(iw.attempts[j.Seq], jc.Attempt)
		iw.mu.Unlock()
		if j.WorkMs > 0 {
			time.Sleep(time.Duration(j.WorkMs) * time.Millisecond)
		}
		switch {
		case j.Fail:
			return errors.New("chaos: every attempt fails")
		case j.FailOnce && jc.Attempt == 1:
			return errors.New("chaos: the first attempt fails")
		case j.Crash:
			panic("chaos: a handler panic")
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	iw.stop, iw.ran = stop, make(chan error, 1)
	go func() { iw.ran <- iw.w.Run(ctx) }()
	r.t.Cleanup(iw.shutdown)
	return iw
}

func (iw *inWorker) shutdown() {
	if iw.stop == nil {
		return
	}
	iw.stop()
	iw.stop = nil
	if err := <-iw.ran; err != nil {
		iw.t.Errorf("worker: %v", err)
	}
}

// ran reports the jobs that ran at least once, and the extra runs.
func (iw *inWorker) counts() (ran, extra int) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	for _, s := range iw.starts {
		ran++
		extra += len(s) - 1
	}
	return ran, extra
}

func (iw *inWorker) restarts() int { return strings.Count(iw.logs.String(), "restarting child") }

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// rawChannel is a confirm-mode channel that bypasses the library, on a
// connection the rig closes before it counts leaks.
func (r *rig) rawChannel() (*amqp.Connection, *amqp.Channel) {
	t := r.t
	t.Helper()
	conn, err := amqp.DialConfig(rabbittest.URL(), amqp.Config{Properties: amqp.Table{"connection_name": r.prefix + ".raw"}})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.raws = append(r.raws, conn)
	r.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

func rawPublish(t *testing.T, ch *amqp.Channel, queue string, p amqp.Publishing) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = errors.New("nacked")
	}
	return err
}

// envelopeBody is a valid envelope with the given fields replaced.
func envelopeBody(queue, id, kind string, attempt int, payload string) []byte {
	return fmt.Appendf(nil, `{"job_id":%q,"job_type":%q,"queue":%q,"attempt":%d,"enqueued_at_ms":%d,"deferrals":0,"priority":0,"payload":%s}`,
		id, kind, queue, attempt, time.Now().UnixMilli(), payload)
}

// Bad input 1: 1,000 malformed messages published straight into the work
// queue among 1,000 good ones. Every good one runs; every bad one is in the
// dead letters exactly once, with a reason; nothing is requeued, nothing
// crashes, no queue actor restarts.
func TestFaultMalformedMessages(t *testing.T) {
	needFaults(t)
	r := newRig(t, "malformed_messages", rigOptions{})
	_, ch := r.rawChannel()
	const n = 1000
	bad := map[string]string{} // message id → kind of damage
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for i := range n {
		r.enqueue(nil, chaos.Job{}, 0, 10*time.Second)
		id := broker.NewJobID()
		var body []byte
		kind := ""
		headers := amqp.Table{}
		switch i % 10 {
		case 0:
			kind, body = "invalid_json", []byte(`{"job_id": "`+id+`", "job_type": chaos`)
		case 1:
			full := envelopeBody(r.queue, id, "chaos", 1, `{"seq":0}`)
			kind, body = "truncated", full[:len(full)/2]
		case 2:
			kind, body = "unknown_kind", envelopeBody(r.queue, id, "no.such.kind", 1, `{}`)
		case 3:
			kind, body = "wrong_payload_schema", envelopeBody(r.queue, id, "chaos", 1, `{"seq":"not a number"}`)
		case 4:
			kind, body = "wrong_envelope_schema", []byte(strings.Replace(string(envelopeBody(r.queue, id, "chaos", 1, `{}`)), `"attempt":1`, `"attempt":"1"`, 1))
		case 5:
			kind, body = "deep_nesting", []byte(deep)
		case 6:
			kind, body = "invalid_utf8", append([]byte(`{"job_id":"`+id+`","job_type":"\xff\xfe`), `"}`...)
		case 7:
			kind, body = "invalid_utf8_kind", envelopeBody(r.queue, id, "chaos\xff", 1, `{}`)
		case 8:
			kind, body = "not_an_object", []byte(`[1,2,3]`)
		case 9:
			kind, body = "bad_fields_garbled_headers", envelopeBody(r.queue, "not-a-uuid", "chaos", 0, `{}`)
			headers = amqp.Table{"x-attempt": "garbage", "x-deferrals": amqp.Table{"nested": true}, "x-queuey-due-ms": "soon"}
		}
		bad[id] = kind
		if err := rawPublish(t, ch, r.queue, amqp.Publishing{MessageId: id, Body: body, Headers: headers, DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatalf("raw publish %s: %v", kind, err)
		}
	}
	// An unknown kind is among the bad input: dead-lettered at once, not
	// held back for a handler that never comes.
	iw := r.startInWorker(inOptions{prefetch: 32, unknownKindWait: -1})
	var deadN int
	err := within(60*time.Second, func() bool {
		ran, _ := iw.counts()
		deadN = len(listDeadIDs(t, r))
		return ran >= n && deadN >= n
	})
	time.Sleep(500 * time.Millisecond) // anything more would show now
	iw.shutdown()
	dead := getAll(t, broker.DeadQueueName(r.queue))
	seen := map[string]int{}
	reasons := map[string]int{}
	noReason := 0
	for _, d := range dead {
		seen[d.MessageId]++
		reason := fmt.Sprint(d.Headers[broker.HeaderDeathReason])
		if reason == "" || reason == "<nil>" {
			noReason++
		}
		reasons[bad[d.MessageId]+": "+firstWords(reason, 4)]++
	}
	ran, extra := iw.counts()
	score := &chaos.Score{Fault: "bad_input_malformed", Attempted: 2 * n, Confirmed: 2 * n}
	missingBad, dupBad := 0, 0
	for id := range bad {
		switch seen[id] {
		case 0:
			missingBad++
		case 1:
		default:
			dupBad += seen[id] - 1
		}
	}
	score.OK = ran + (n - missingBad)
	score.Lost = (n - ran) + missingBad
	score.DupUnexplained = extra + dupBad
	score.Figure("dead_letters", len(dead))
	score.Figure("without_reason", noReason)
	score.Figure("queue_restarts", iw.restarts())
	score.Figure("requeued", iw.outcomes[queuey.Requeued])
	if err != nil {
		score.Fail("after 60 s: %d good jobs ran, %d dead letters", ran, deadN)
	}
	if noReason > 0 {
		score.Fail("%d dead letters without a reason", noReason)
	}
	if iw.restarts() > 0 || iw.outcomes[queuey.Requeued] > 0 {
		score.Fail("%d queue actor restarts, %d requeues", iw.restarts(), iw.outcomes[queuey.Requeued])
	}
	for k, v := range reasons {
		t.Logf("dead letters: %4d %s", v, k)
	}
	r.closeOut(score)
}

func listDeadIDs(t *testing.T, r *rig) map[string]string { return r.deadLetters() }

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// Bad input 2: a 200 MB job is refused before anything is sent
// (ErrMessageTooLarge) and the producer keeps working; a 100 MB body that
// is not an envelope, published straight to the work queue, is
// dead-lettered verbatim, and the worker keeps running; a 200 MB raw
// publish is refused by the broker itself (max_message_size), closing only
// that publisher's channel.
func TestFaultOversizedMessages(t *testing.T) {
	needFaults(t)
	r := newRig(t, "oversized", rigOptions{})
	score := &chaos.Score{Fault: "bad_input_oversized"}
	maxSize := evalTerm(t, "application:get_env(rabbit, max_message_size).")
	score.Figure("broker_max_message_size", strings.Trim(strings.TrimPrefix(maxSize, "{ok,"), "}"))

	// 200 MB job through the library.
	big := chaos.Job{Pad: strings.Repeat("x", 200<<20)}
	start := time.Now()
	_, err := r.producer.Enqueue(t.Context(), big)
	score.Attempted++
	score.Figure("refused_200MB_after", time.Since(start))
	if !errors.Is(err, queuey.ErrMessageTooLarge) {
		score.Fail("a 200 MB job: got %v, want ErrMessageTooLarge", err)
	}
	big = chaos.Job{}
	runtime.GC()
	if n, err := r.backend.Depth(t.Context(), r.queue); err != nil || n != 0 {
		score.Fail("after the refused job the queue holds %d (%v), want 0", n, err)
	}

	// 100 MB of garbage straight to the work queue, then a good job.
	conn, ch := r.rawChannel()
	garbage := []byte(strings.Repeat("\x00not an envelope ", (100<<20)/17))
	if err := rawPublish(t, ch, r.queue, amqp.Publishing{MessageId: "garbage-100MB", Body: garbage, DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatalf("100 MB raw publish: %v", err)
	}
	score.Attempted++
	score.Confirmed++
	good := r.enqueue(nil, chaos.Job{}, 0, 20*time.Second)
	score.Attempted++
	if good.Confirmed {
		score.Confirmed++
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	start = time.Now()
	iw := r.startInWorker(inOptions{prefetch: 2})
	var deadReason string
	err = within(60*time.Second, func() bool {
		ran, _ := iw.counts()
		iw.mu.Lock()
		defer iw.mu.Unlock()
		for _, d := range iw.dead {
			deadReason = d.Reason
		}
		return ran == 1 && deadReason != ""
	})
	took := time.Since(start)
	close(stopWatch)
	watch.Wait()
	iw.shutdown()
	score.Figure("dead_lettered_100MB_after", took)
	score.Figure("worker_heap_peak_MB", (peak.Load()-min(peak.Load(), before.HeapInuse))>>20)
	if err != nil {
		score.Fail("the 100 MB body was not dead-lettered (reason %q) or the good job did not run", deadReason)
	} else {
		score.OK += 2
		if !strings.HasPrefix(deadReason, "malformed envelope") {
			score.Fail("dead-letter reason %q, want malformed envelope ...", deadReason)
		}
	}
	if dl := getAll(t, broker.DeadQueueName(r.queue)); len(dl) != 1 || len(dl[0].Body) != len(garbage) {
		score.Fail("dead letters: %d, want the 100 MB body verbatim", len(dl))
	}
	garbage = nil

	// 200 MB raw: the broker refuses it and closes that channel only.
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch2.NotifyClose(make(chan *amqp.Error, 1))
	huge := make([]byte, 200<<20)
	score.Attempted++
	_ = ch2.Publish("", r.queue, false, false, amqp.Publishing{Body: huge})
	huge = nil
	select {
	case e := <-closed:
		score.Figure("broker_refused_200MB", fmt.Sprintf("%q", firstWords(fmt.Sprint(e), 12)))
		if e == nil || e.Code != amqp.PreconditionFailed || !strings.Contains(e.Reason, "larger than configured max size") {
			score.Fail("the 200 MB raw publish closed its channel with %v, want PRECONDITION_FAILED max size", e)
		}
	case <-time.After(60 * time.Second):
		score.Fail("the broker did not refuse the 200 MB raw publish")
	}
	if conn.IsClosed() {
		score.Fail("the broker closed the whole connection, not just the channel")
	}
	if a := r.enqueue(nil, chaos.Job{}, 0, 10*time.Second); !a.Confirmed {
		score.Fail("enqueue after the oversized publishes: %s", a.Err)
	}
	runtime.GC()
	r.closeOut(score)
}

// Bad input 3: headers set by a raw publisher. The library reads the
// attempt from the body, so a forged x-attempt cannot skip the retries or
// the dead letters; a forged redelivery count is ignored on a first
// delivery; x-death is not read; CC and BCC (sender-selected distribution)
// are not carried into the library's republishes.
func TestFaultHeaderInjection(t *testing.T) {
	needFaults(t)
	r := newRig(t, "header_injection", rigOptions{})
	_, ch := r.rawChannel()
	victim := r.prefix + ".victim"
	if _, err := ch.QueueDeclare(victim, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	score := &chaos.Score{Fault: "bad_input_headers"}
	type forged struct {
		name        string
		attempt     int // in the body
		headers     amqp.Table
		wantRuns    []int // attempts that run
		wantVictims int   // copies the raw publish itself routes to the victim (one: the broker routes to each queue once)
	}
	cases := []forged{
		{"x-attempt=99 in the header", 1, amqp.Table{"x-attempt": int32(99), "x-deferrals": int32(50)}, []int{1, 2, 3}, 0},
		{"x-attempt=1 in the header, 3 in the body", 3, amqp.Table{"x-attempt": int32(1)}, []int{3}, 0},
		{"forged redelivery count", 1, amqp.Table{"x-queuey-redeliveries": "99"}, []int{1, 2, 3}, 0},
		{"forged x-death", 1, amqp.Table{"x-death": []any{amqp.Table{"count": int64(1000), "queue": victim, "reason": "expired"}}, "x-first-death-queue": victim}, []int{1, 2, 3}, 0},
		{"CC and BCC to a victim queue", 1, amqp.Table{"CC": []any{victim}, "BCC": []any{victim}, "x-queuey-due-ms": "1"}, []int{1, 2, 3}, 1},
	}
	ids := map[string]int{}
	wantVictims := 0
	for i, c := range cases {
		id := broker.NewJobID()
		ids[id] = i
		seq := 1000 + i
		body := envelopeBody(r.queue, id, "chaos", c.attempt, fmt.Sprintf(`{"seq":%d,"fail":true}`, seq))
		if err := rawPublish(t, ch, r.queue, amqp.Publishing{MessageId: id, Body: body, Headers: c.headers, DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantVictims += c.wantVictims
		score.Attempted++
		score.Confirmed++
	}
	iw := r.startInWorker(inOptions{prefetch: 8, poisonAfter: 3})
	var dead []amqp.Delivery
	err := within(30*time.Second, func() bool {
		dead = getAll(t, broker.DeadQueueName(r.queue))
		ran, _ := iw.counts()
		return len(dead) >= len(cases) && ran == len(cases)
	})
	time.Sleep(2 * time.Second) // a retry that should not happen would show now
	iw.shutdown()
	dead = getAll(t, broker.DeadQueueName(r.queue))
	if err != nil {
		score.Fail("only %d of %d forged jobs reached the dead letters", len(dead), len(cases))
	}
	iw.mu.Lock()
	for i, c := range cases {
		got := iw.attempts[1000+i]
		if fmt.Sprint(got) != fmt.Sprint(c.wantRuns) {
			score.Fail("%s: attempts run %v, want %v", c.name, got, c.wantRuns)
		} else {
			score.OK++
		}
	}
	iw.mu.Unlock()
	for _, d := range dead {
		i, ok := ids[d.MessageId]
		if !ok {
			score.Unexpected++
			continue
		}
		reason := fmt.Sprint(d.Headers[broker.HeaderDeathReason])
		if !strings.HasPrefix(reason, "max attempts (3) exhausted after attempt 3") {
			score.Fail("%s: dead-letter reason %q", cases[i].name, reason)
		}
		score.Figure(fmt.Sprintf("case%d_dead_attempts", i+1), d.Headers[broker.HeaderAttempts])
	}
	victims := len(getAll(t, victim))
	score.Figure("victim_copies", victims)
	score.Figure("victim_copies_from_the_raw_publish", wantVictims)
	if victims != wantVictims {
		score.Fail("the victim queue holds %d copies; the raw publish alone routes %d there, the library must add none", victims, wantVictims)
	}
	r.closeOut(score)
}

// A publish the broker refuses with a channel error (here a CC header a
// Hooks.Publish set as a string: PRECONDITION_FAILED
// unacceptable_type_in_header; on RabbitMQ 4 also any job over its 16 MiB
// max_message_size, under the library's own 128 MiB limit) comes back as
// an error at once, sent once. (Before 209e43d the publisher reported the
// closed channel as ErrConnectionLost and Backend.publish sent it again on
// a new channel until the ctx ended: about 600 channel errors a second,
// two broker log lines each, and forever under a ctx without a deadline.)
func TestFaultRefusedPublishIsAnError(t *testing.T) {
	needFaults(t)
	r := newRig(t, "refused_publish", rigOptions{})
	hooked, err := queuey.NewProducer(t.Context(), r.backend, chaos.QueueSet(r.prefix, 4), &queuey.ProducerConfig{Hooks: &queuey.Hooks{
		Publish: func(_ context.Context, p *queuey.PublishInfo) func(error) {
			p.Headers["CC"] = "someone-else"
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, offset := brokerLog(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = hooked.Enqueue(ctx, chaos.Job{Seq: 1})
	took := time.Since(start)
	time.Sleep(time.Second) // the broker writes its log line after it closed the channel
	refusals, _ := logSince(r.logPath, offset, "unacceptable_type_in_header")
	score := &chaos.Score{Fault: "refused_publish", Attempted: 1}
	score.Figure("enqueue_took", took)
	score.Figure("broker_channel_errors", refusals)
	score.Figure("error", fmt.Sprintf("%q", firstWords(fmt.Sprint(err), 12)))
	if err == nil {
		score.Fail("a publish the broker refused was reported as a success")
	}
	if refusals > 1 {
		score.Fail("one refused publish was sent %d times in %v: retried as if the connection were lost", refusals, took.Round(time.Millisecond))
	}
	if took > time.Second {
		score.Fail("Enqueue took %v (until its deadline) to report a refused publish", took.Round(time.Millisecond))
	}
	r.closeOut(score)
}

// Bad input 4: 10,000 jobs with distinct delays, 1 ms to 10 s in 1 ms
// steps. With the default 1 s granularity they share 10 hold queues; none
// runs early; they run within the granularity of their due time.
func TestFaultDistinctDelays(t *testing.T) {
	needFaults(t)
	r := newRig(t, "distinct_delays", rigOptions{})
	iw := r.startInWorker(inOptions{prefetch: 64})
	const n = 10000
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				r.enqueue(nil, chaos.Job{}, time.Duration(i)*time.Millisecond, 30*time.Second)
			}
		})
	}
	wg.Wait()
	enqueueTook := time.Since(start)
	holds := 0
	for name := range listQueues(t, r.queue+".deferred.") {
		_ = name
		holds++
	}
	err := within(60*time.Second, func() bool { ran, _ := iw.counts(); return ran >= n })
	iw.shutdown()
	score := &chaos.Score{Fault: "bad_input_distinct_delays"}
	var late []time.Duration
	r.mu.Lock()
	iw.mu.Lock()
	for _, a := range r.attempts {
		score.Attempted++
		if a.Confirmed {
			score.Confirmed++
		}
		starts := iw.starts[a.Seq]
		switch {
		case len(starts) == 0 && a.Confirmed:
			score.Lost++
		case len(starts) > 0:
			score.OK++
			score.DupUnexplained += len(starts) - 1
			if starts[0].Before(a.NotBefore) {
				score.Early++
			} else {
				late = append(late, starts[0].Sub(a.NotBefore))
			}
		}
	}
	iw.mu.Unlock()
	r.mu.Unlock()
	score.Figure("hold_queues", holds)
	score.Figure("enqueue_took", enqueueTook)
	score.Figure("lateness_p50", percentile(late, 0.5))
	score.Figure("lateness_p99", percentile(late, 0.99))
	score.Figure("lateness_max", percentile(late, 1))
	if holds > 10 {
		score.Fail("%d hold queues for delays of 1 ms..10 s at 1 s granularity, want at most 10", holds)
	}
	if err != nil {
		score.Fail("not every job ran within 60 s")
	}
	r.closeOut(score)
}

// Bad input 5: enqueue parameters out of range are refused client-side with
// typed errors, and nothing reaches the broker.
func TestFaultEnqueueParameters(t *testing.T) {
	needFaults(t)
	r := newRig(t, "enqueue_parameters", rigOptions{})
	score := &chaos.Score{Fault: "bad_input_parameters"}
	ctx := t.Context()
	check := func(name string, err, want error) {
		score.Attempted++
		if !errors.Is(err, want) {
			score.Fail("%s: got %v, want %v", name, err, want)
		} else {
			score.OK++
		}
	}
	_, err := r.producer.EnqueueAfter(ctx, chaos.Job{}, -time.Second)
	check("EnqueueAfter(-1s)", err, queuey.ErrInvalidDelay)
	_, err = r.producer.Defer(ctx, chaos.Job{}, -time.Nanosecond)
	check("Defer(-1ns)", err, queuey.ErrInvalidDelay)
	_, err = r.producer.EnqueueAfter(ctx, chaos.Job{}, 25*24*time.Hour)
	check("EnqueueAfter(25 days)", err, queuey.ErrDelayTooLong)
	_, err = r.producer.Defer(ctx, chaos.Job{}, time.Duration(broker.MaxHoldMs+1)*time.Millisecond)
	check("Defer(2^31 ms)", err, queuey.ErrDelayTooLong)
	for _, name := range []string{strings.Repeat("q", 256), strings.Repeat("q", 236), "amq.reserved", "bad\xffutf8", ""} {
		_, err = queuey.NewProducer(ctx, r.backend, queuey.QueueSet{Queues: []queuey.Queue{{Name: name}}}, nil)
		want := queuey.ErrInvalidName
		if name == "" {
			want = queuey.ErrInvalidQueue
		}
		check(fmt.Sprintf("queue name of %d bytes", len(name)), err, want)
	}
	_, err = r.producer.Enqueue(ctx, chaos.Job{}, queuey.WithCorrelationID("bad\xffutf8"))
	check("correlation id not UTF-8", err, queuey.ErrInvalidJob)
	_, err = queuey.NewProducer(ctx, r.backend, queuey.QueueSet{Queues: []queuey.Queue{{Name: "p", Prefetch: 70000}}}, nil)
	check("prefetch 70000", err, queuey.ErrInvalidQueue)
	_, err = queuey.NewProducer(ctx, r.backend, queuey.QueueSet{Queues: []queuey.Queue{{Name: "p", MaxPriority: 256}}}, nil)
	check("max priority 256", err, queuey.ErrInvalidQueue)
	if n := len(listQueues(t, r.prefix)); n != 2 { // the work queue and its dead letters
		score.Fail("%d queues of the run on the broker, want 2: something reached it", n)
	}
	score.Confirmed = 0
	r.closeOut(score)
}

// A correlation id longer than an AMQP short string (255 bytes) is refused
// by Enqueue with ErrInvalidJob before anything is sent, and the
// producer's connection survives. (Before 7139405 it was accepted; amqp091
// failed while encoding the content header, with an untyped error, and
// shut the whole connection down: one bad Enqueue cut every publish and
// consumer on that connection.)
func TestFaultLongCorrelationID(t *testing.T) {
	needFaults(t)
	r := newRig(t, "long_correlation_id", rigOptions{})
	score := &chaos.Score{Fault: "bad_input_long_correlation_id", Attempted: 2}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := r.producer.Enqueue(ctx, chaos.Job{}, queuey.WithCorrelationID(strings.Repeat("c", 300)))
	score.Figure("enqueue_took", time.Since(start))
	score.Figure("error", fmt.Sprintf("%q", firstWords(strings.ReplaceAll(fmt.Sprint(err), strings.Repeat("c", 300), "ccc..."), 14)))
	after := r.enqueue(nil, chaos.Job{}, 0, 10*time.Second) // the next publish on the same backend
	time.Sleep(time.Second)
	lost := strings.Count(r.prodLogs.String(), "rabbitmq connection lost")
	score.Figure("connections_lost", lost)
	score.Figure("next_enqueue_ok", after.Confirmed)
	if after.Confirmed {
		score.Confirmed, score.OK = 1, 1
	}
	if !errors.Is(err, queuey.ErrInvalidJob) {
		score.Fail("a 300-byte correlation id: got an untyped error (%.80s...), want ErrInvalidJob before anything is sent", fmt.Sprint(err))
	}
	if lost > 0 {
		score.Fail("the producer's connection was lost %d times by one bad enqueue", lost)
	}
	r.closeOut(score)
}

// Bad input 6: a password sentinel never appears in a log line, an error,
// or the %v/%+v/%#v of rabbitmq.Options, a *rabbitmq.Backend, a Producer or
// a Worker, through a refused password, an unreachable broker, forced
// connection closes and a handler panic. (Before 7139405 a Backend printed
// with %+v showed its URL with the password.)
func TestFaultCredentialsNeverLeak(t *testing.T) {
	needFaults(t)
	credentialsTest(t, "credentials")
}

func credentialsTest(t *testing.T, name string) {
	user := unique("user")
	secret := "S3cr3t?pw#" + user[len(user)-8:]
	mustCtl(t, "add_user", user, secret)
	t.Cleanup(func() { _, _ = ctl(60*time.Second, "delete_user", user) })
	mustCtl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	u := url.URL{Scheme: "amqp", User: url.UserPassword(user, secret), Host: "127.0.0.1:5672", Path: "/"}
	good := u.String()
	var texts []string
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// Refused password, unreachable broker.
	wrong := url.URL{Scheme: "amqp", User: url.UserPassword(user, secret+"x"), Host: "127.0.0.1:5672", Path: "/"}
	if b, err := rabbitmq.Dial(t.Context(), wrong.String(), &rabbitmq.Options{Logger: log}); err == nil {
		_ = b.Close()
		t.Error("a wrong password was accepted")
	} else {
		texts = append(texts, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	_ = l.Close()
	down := url.URL{Scheme: "amqp", User: url.UserPassword(user, secret), Host: closedAddr, Path: "/"}
	if _, err := rabbitmq.Dial(t.Context(), down.String(), &rabbitmq.Options{Logger: log}); err != nil {
		texts = append(texts, err.Error(), fmt.Sprintf("%+v", err))
	}
	_, err = rabbitmq.Dial(t.Context(), "amqp://"+user+":"+secret+"@127.0.0.1:5672/%zz", &rabbitmq.Options{Logger: log})
	texts = append(texts, fmt.Sprint(err))

	// A live connection: forced closes and a panic.
	r := newRig(t, name, rigOptions{url: good})
	opts := rabbitmq.Options{ConnectionName: r.prefix + ".secret", Logger: log, ReconnectMin: 50 * time.Millisecond}
	b := r.dial(good, &opts)
	p, err := queuey.NewProducer(t.Context(), b, chaos.QueueSet(r.prefix, 4), &queuey.ProducerConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w, err := queuey.NewWorker(b, chaos.QueueSet(r.prefix, 4), &queuey.WorkerConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var panicked atomic.Int32
	_ = queuey.Handle(w, func(ctx context.Context, j chaos.Job, jc queuey.JobContext) error {
		if j.Crash {
			panicked.Add(1)
			panic("chaos: handler panic with " + jc.JobID)
		}
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	if _, err := p.Enqueue(t.Context(), chaos.Job{Crash: true}); err != nil {
		t.Fatal(err)
	}
	_ = within(10*time.Second, func() bool { return panicked.Load() > 0 })
	for range 2 {
		closeConnection(t, opts.ConnectionName)
		time.Sleep(300 * time.Millisecond)
	}
	_ = within(10*time.Second, func() bool { return strings.Contains(logs.String(), "rabbitmq reconnected") })
	stop()
	texts = append(texts, fmt.Sprint(<-ran))
	_ = b.Close()
	_, err = p.Enqueue(t.Context(), chaos.Job{})
	texts = append(texts, fmt.Sprint(err))
	full := opts
	full.TLS = nil
	texts = append(texts, fmt.Sprintf("%v %+v %#v", full, full, full), fmt.Sprintf("%v %+v", p, w))
	texts = append(texts, fmt.Sprintf("%v", b), fmt.Sprintf("%+v", b), fmt.Sprintf("%#v", b))
	texts = append(texts, logs.String())

	score := &chaos.Score{Fault: "bad_input_" + name, Attempted: 2, Confirmed: 1, OK: 1}
	leaks := 0
	for _, s := range texts {
		leaks += strings.Count(s, secret) + strings.Count(s, url.QueryEscape(secret)) + strings.Count(s, url.PathEscape(secret)) +
			strings.Count(s, (&url.URL{User: url.UserPassword("", secret)}).String()[2:])
	}
	score.Figure("sentinel_occurrences", leaks)
	score.Figure("texts_checked", len(texts))
	score.Figure("panics", panicked.Load())
	if leaks > 0 {
		for _, s := range texts {
			if strings.Contains(s, secret) || strings.Contains(s, url.QueryEscape(secret)) {
				t.Logf("leaks the password: %s", tail(s, 400))
			}
		}
		score.Fail("the password sentinel appeared %d times", leaks)
	}
	if !strings.Contains(logs.String(), user) && !strings.Contains(strings.Join(texts, " "), user) {
		score.Fail("the errors and logs do not even name the user")
	}
	r.closeOut(score)
}
