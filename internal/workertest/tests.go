package workertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// A job that meets a rate limit pauses its whole queue: its queue-mates
// wait without running (no call wasted on the limited API, no attempt
// spent), the other queue keeps running, and when the pause ends the
// deferred job runs first, then the backlog.
func pausedQueueWaits(e *env) {
	t := e.t
	const pause = time.Second // whole seconds: the quorum topology's step
	first := e.enqueue(limitedJob{plan{Name: "first", Pause: pause}})
	var backlog []string
	for i := range 4 {
		backlog = append(backlog, e.enqueue(limitedJob{plan{Name: fmt.Sprint("backlog-", i)}}))
	}
	bystander := e.enqueue(otherJob{plan{Name: "bystander"}})
	e.start()

	all := e.until("every job to finish", func(runs []run, settled []settlement) bool { return len(settled) >= 7 })
	firstRuns := of(first, all)
	if diff := cmp.Diff([][2]int{{1, 0}, {1, 1}}, attempts(firstRuns)); diff != "" {
		t.Fatalf("the pausing job's (attempt, deferrals) (-want +got):\n%s\nruns:\n%s", diff, describe(all))
	}
	resumed := firstRuns[1]
	if resumed.Priority != queuey.DefaultMaxPriority {
		t.Errorf("after the pause the job came back at priority %d, want the top (%d)", resumed.Priority, queuey.DefaultMaxPriority)
	}
	if waited := resumed.At.Sub(firstRuns[0].At); waited < pause {
		t.Errorf("the job came back after %v, before the pause of %v ended", waited, pause)
	}
	var order []string
	for _, r := range all {
		if r.JobID != bystander {
			order = append(order, r.Name)
		}
	}
	if order[0] != "first" || order[1] != "first" || len(order) != 6 {
		t.Errorf("runs on the paused queue: %v, want first twice (before and after the pause), then the backlog once each", order)
	}
	for _, id := range backlog {
		runs := of(id, all)
		if len(runs) != 1 || runs[0].Attempt != 1 || runs[0].At.Before(resumed.At) {
			t.Errorf("backlog job %s: want one run, at attempt 1, after the pause:\n%s", id, describe(all))
		}
	}
	if b := of(bystander, all); len(b) != 1 || !b[0].At.Before(resumed.At) {
		t.Errorf("the other queue's job did not run during the pause:\n%s", describe(all))
	}
}

// Retry policies change at runtime, per queue and per kind; a kind's
// override wins over its queue's; cleared, the queue's own is back.
func retryOverrides(e *env) {
	t := e.t
	e.start()
	backoff := 200 * time.Millisecond
	queuePolicy := queuey.FixedRetries(3, backoff)
	must(t, e.worker.SetQueueRetryPolicy(other, &queuePolicy))
	a := e.enqueue(otherJob{plan{Name: "a", Fail: 2}})
	runs := e.runsOf(a, 3)
	if diff := cmp.Diff([][2]int{{1, 0}, {2, 0}, {3, 0}}, attempts(runs)); diff != "" {
		t.Errorf("with the queue's override: (-want +got):\n%s", diff)
	}
	if runs[0].MaxAttempts != 3 || runs[1].At.Sub(runs[0].At) < backoff {
		t.Errorf("with the queue's override: MaxAttempts %d, retried after %v; want 3 and at least %v",
			runs[0].MaxAttempts, runs[1].At.Sub(runs[0].At), backoff)
	}

	kindPolicy := queuey.FixedRetries(2, granularity)
	must(t, e.worker.SetKindRetryPolicy("other_job", &kindPolicy))
	b := e.enqueue(otherJob{plan{Name: "b", Fail: 99}})
	dead := e.deadLetters(1)
	if diff := cmp.Diff([][2]int{{1, 0}, {2, 0}}, attempts(e.runsOf(b, 2))); diff != "" {
		t.Errorf("with the kind's override: (-want +got):\n%s", diff)
	}
	if dead[0].Job.JobID != b || dead[0].Cause != queuey.CauseExhausted {
		t.Errorf("dead letter: job %s cause %s, want %s exhausted", dead[0].Job.JobID, dead[0].Cause, b)
	}

	must(t, e.worker.SetKindRetryPolicy("other_job", nil))
	must(t, e.worker.SetQueueRetryPolicy(other, nil))
	c := e.enqueue(otherJob{plan{Name: "c", Fail: 99}})
	e.deadLetters(2)
	if runs := e.runsOf(c, 1); len(runs) != 1 || runs[0].MaxAttempts != 1 {
		t.Errorf("with the overrides cleared: %d runs, MaxAttempts %d; want the queue's single attempt", len(runs), runs[0].MaxAttempts)
	}

	if err := e.worker.SetQueueRetryPolicy("nope", nil); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("override for a queue not in the set: got %v, want ErrUnknownQueue", err)
	}
	if err := e.worker.SetKindRetryPolicy("other_job", &queuey.RetryPolicy{MaxAttempts: -1}); !errors.Is(err, queuey.ErrInvalidQueue) {
		t.Errorf("an invalid override: got %v, want ErrInvalidQueue", err)
	}
}

// A job that decides its own retry policy from its content keeps it, even
// over an override for its kind.
func ownRetryPolicy(e *env) {
	t := e.t
	e.start()
	override := queuey.FixedRetries(5, granularity)
	must(t, e.worker.SetKindRetryPolicy("own_policy_job", &override))
	a := e.enqueue(ownPolicyJob{plan{Name: "a", Attempts: 3, Fail: 2}})
	runs := e.runsOf(a, 3)
	if diff := cmp.Diff([][2]int{{1, 0}, {2, 0}, {3, 0}}, attempts(runs)); diff != "" || runs[2].MaxAttempts != 3 {
		t.Errorf("a job allowing 3 attempts: MaxAttempts %d, (attempt, deferrals) (-want +got):\n%s", runs[2].MaxAttempts, diff)
	}
	b := e.enqueue(ownPolicyJob{plan{Name: "b", Attempts: 2, Fail: 99}})
	dead := e.deadLetters(1)
	if n := len(e.runsOf(b, 2)); n != 2 || dead[0].Job.JobID != b || dead[0].Cause != queuey.CauseExhausted {
		t.Errorf("a job allowing 2 attempts: %d runs, dead letter %s (%s); want 2 and %s exhausted", n, dead[0].Job.JobID, dead[0].Cause, b)
	}
}

// The dead-letter hook hears of every dead letter, with its cause, before
// it is published.
func deadLetterHook(e *env) {
	t := e.t
	e.start()
	fatal := e.enqueue(limitedJob{plan{Name: "fatal", Fatal: true}})
	e.deadLetters(1)
	exhausted := e.enqueue(otherJob{plan{Name: "exhausted", Fail: 1}})
	e.deadLetters(2)
	orphan := e.enqueue(orphanJob{plan{Name: "orphan"}})
	e.deadLetters(3)
	garbage := broker.Message{ID: "garbage", Queue: broker.QueueName(e.set.Prefix, other), Body: []byte("\x00{not an envelope")}
	must(t, e.backend.Publish(t.Context(), garbage))
	dead := e.deadLetters(4)

	type told struct {
		JobID string
		Cause queuey.DeadLetterCause
	}
	var got []told
	for _, d := range dead {
		got = append(got, told{d.Job.JobID, d.Cause})
		if d.Reason == "" {
			t.Errorf("dead letter of %q (%s) without a reason", d.Job.JobID, d.Cause)
		}
	}
	want := []told{{fatal, queuey.CauseFatal}, {exhausted, queuey.CauseExhausted}, {orphan, queuey.CauseNoHandler}, {"", queuey.CauseMalformed}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the hook was told (-want +got):\n%s", diff)
	}
}

// Dead letters are listed oldest first, shown one by one, and replayed by
// id, by kind (after a wait, at the top priority) and all together, with
// their attempts reset; each leaves the dead letters once replayed.
func deadLetterReplay(e *env) {
	t := e.t
	ctx := t.Context()
	e.start()
	dl, err := queuey.NewDeadLetters(ctx, e.backend, e.set, nil)
	must(t, err)
	o1 := e.enqueue(otherJob{plan{Name: "o1", Fatal: true}})
	o2 := e.enqueue(otherJob{plan{Name: "o2", Fatal: true}})
	p1 := e.enqueue(ownPolicyJob{plan{Name: "p1", Attempts: 1, Fatal: true}}, queuey.WithCorrelationID("order-7"))
	e.deadLetters(3)

	listed := func() []string {
		t.Helper()
		list, err := dl.List(ctx, other)
		must(t, err)
		var ids []string
		for _, d := range list {
			ids = append(ids, d.ID)
		}
		return ids
	}
	list, err := dl.List(ctx, other)
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("listed %d dead letters, want 3", len(list))
	}
	// Their publishes are made at once, in any order.
	byID := map[string]queuey.DeadLetter{}
	for _, d := range list {
		byID[d.ID] = d
	}
	for _, want := range []struct{ id, kind string }{{o1, "other_job"}, {o2, "other_job"}, {p1, "own_policy_job"}} {
		d, ok := byID[want.id]
		if !ok || d.Kind != want.kind || d.Attempts != 1 || !strings.Contains(d.Reason, "cannot run") || d.Malformed || d.Age < 0 {
			t.Errorf("dead letter %s: %+v; want %s, 1 attempt, the handler's reason", want.id, d, want.kind)
		}
	}

	shown, err := dl.Show(ctx, other, p1)
	must(t, err)
	var payload plan
	if err := json.Unmarshal(shown.Payload, &payload); err != nil || payload.Name != "p1" || shown.CorrelationID != "order-7" {
		t.Errorf("shown: payload %s (%v), correlation id %q; want p1's and order-7", shown.Payload, err, shown.CorrelationID)
	}
	if _, err := dl.Show(ctx, other, "nope"); !errors.Is(err, queuey.ErrNotFound) {
		t.Errorf("show an unknown id: got %v, want ErrNotFound", err)
	}
	if _, err := dl.Replay(ctx, other, queuey.ReplayOptions{}); !errors.Is(err, queuey.ErrInvalidJob) {
		t.Errorf("replay without a selection: got %v, want ErrInvalidJob", err)
	}

	e.cured.Store(true)
	if n, err := dl.Replay(ctx, other, queuey.ReplayOptions{Select: queuey.ByID(o1)}); n != 1 || err != nil {
		t.Fatalf("replay by id: %d, %v", n, err)
	}
	if r := e.runsOf(o1, 2)[1]; r.Attempt != 1 || r.Deferrals != 0 {
		t.Errorf("replayed by id: attempt %d deferrals %d, want 1 and 0", r.Attempt, r.Deferrals)
	}
	if diff := cmp.Diff([]string{o2, p1}, listed(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("after replaying o1 (-want +got):\n%s", diff)
	}

	const after = 300 * time.Millisecond
	asked := time.Now()
	if n, err := dl.Replay(ctx, other, queuey.ReplayOptions{Select: queuey.ByKind("own_policy_job"), After: after}); n != 1 || err != nil {
		t.Fatalf("replay by kind: %d, %v", n, err)
	}
	r := e.runsOf(p1, 2)[1]
	if r.At.Sub(asked) < after || r.Priority != queuey.DefaultMaxPriority || r.Attempt != 1 || r.CorrelationID != "order-7" {
		t.Errorf("replayed after %v: ran after %v at priority %d, attempt %d, correlation id %q; want the wait, the top priority, 1, order-7",
			after, r.At.Sub(asked), r.Priority, r.Attempt, r.CorrelationID)
	}

	var progress [][2]int
	n, err := dl.Replay(ctx, other, queuey.ReplayOptions{Select: queuey.All(), Progress: func(done, total int) {
		progress = append(progress, [2]int{done, total})
	}})
	if n != 1 || err != nil || !slices.Equal(progress, [][2]int{{1, 1}}) {
		t.Errorf("replay all: %d, %v, progress %v; want 1, nil, [[1 1]]", n, err, progress)
	}
	e.runsOf(o2, 2)
	if left := listed(); len(left) != 0 {
		t.Errorf("dead letters left after replaying all: %v", left)
	}
}

// A correlation id given at enqueue reaches every run, through a deferral
// and a retry.
func correlationID(e *env) {
	t := e.t
	e.start()
	id := e.enqueue(ownPolicyJob{plan{Name: "c", Attempts: 2, Defers: 1, Fail: 1}}, queuey.WithCorrelationID("order-7"))
	runs := e.runsOf(id, 3)
	if diff := cmp.Diff([][2]int{{1, 0}, {1, 1}, {2, 1}}, attempts(runs)); diff != "" {
		t.Errorf("(attempt, deferrals) (-want +got):\n%s", diff)
	}
	for _, r := range runs {
		if r.CorrelationID != "order-7" {
			t.Errorf("attempt %d deferrals %d: correlation id %q, want order-7", r.Attempt, r.Deferrals, r.CorrelationID)
		}
	}
}

// A body over the worker's MaxMessageBytes is dead-lettered verbatim, as
// too large, without being read as an envelope; the next job runs.
func tooLarge(e *env) {
	t := e.t
	e.start()
	body := bytes.Repeat([]byte("y"), maxBytes+1)
	must(t, e.backend.Publish(t.Context(), broker.Message{ID: "too-large", Queue: broker.QueueName(e.set.Prefix, other), Body: body}))
	next := e.enqueue(otherJob{plan{Name: "next"}})
	dead := e.deadLetters(1)
	e.runsOf(next, 1)
	if dead[0].Cause != queuey.CauseTooLarge || !strings.HasPrefix(dead[0].Reason, "too large: ") {
		t.Errorf("dead letter: cause %s, reason %q; want too_large", dead[0].Cause, dead[0].Reason)
	}
	dl, err := queuey.NewDeadLetters(t.Context(), e.backend, e.set, nil)
	must(t, err)
	list, err := dl.List(t.Context(), other)
	must(t, err)
	if len(list) != 1 || !bytes.Equal(list[0].Body, body) || !list[0].Malformed {
		t.Errorf("dead letters: %d; want the body verbatim (and not replayable)", len(list))
	}
}
