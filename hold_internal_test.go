package queuey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/mailbox"
)

// The hold actor keeps at most its limit of publishes in flight, starts a
// waiting one as each ends, and answers those still waiting when it stops,
// so that no asker waits for ever.
func TestTheHoldActorBoundsItsPublishesInFlight(t *testing.T) {
	synctest.Test(t, testHoldActorBounds)
}

func testHoldActorBounds(t *testing.T) {
	started := make(chan *settlement, 10)
	release := make(chan struct{})
	a := newHoldActor(holder{}, 2, func(s *settlement, _ holdPlan) (leaseNews, error) {
		started <- s
		<-release
		return leaseNews{}, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	answers := mailbox.New[queueMsg](10)
	for i := range 5 {
		if err := a.tell(&settlement{ctx: t.Context(), run: i, inbox: answers}); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait() // everything that can happen has happened
	if n := len(started); n != 2 {
		t.Fatalf("%d publishes started with a limit of 2", n)
	}
	<-started
	<-started
	release <- struct{}{} // one ends: the third starts
	synctest.Wait()
	if n := len(started); n != 1 {
		t.Fatalf("%d publishes started after one ended, want 1", n)
	}
	<-started
	if m := <-answers.Receive(); m.(publishDone).err != nil {
		t.Fatalf("the first publish's answer: %v", m.(publishDone).err)
	}
	cancel()
	close(release) // the two in flight end
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if done, stopped := countAnswers(t, answers, 4); stopped != 2 || done != 2 {
		t.Errorf("answers after the stop: %d made, %d refused as stopped; want 2 and 2", done, stopped)
	}
}

// countAnswers reads n of the hold actor's answers: those made, and those
// refused because it stopped.
func countAnswers(t *testing.T, answers *mailbox.Mailbox[queueMsg], n int) (done, stopped int) {
	t.Helper()
	for range n {
		switch err := (<-answers.Receive()).(publishDone).err; {
		case errors.Is(err, errHoldStopped):
			stopped++
		case err == nil:
			done++
		default:
			t.Fatalf("an answer: %v", err)
		}
	}
	return done, stopped
}

// holdTransport is a backend whose hold calls are recorded and fail as a
// test tells them to; the rest is the memory backend's. A test sets its
// fields while no hold is under way.
type holdTransport struct {
	broker.Backend
	clock      clock.Clock
	holdErrs   []error                                     // the next Hold calls' errors, in turn
	declareErr error                                       // every DeclareHold's
	duringHold func(msg broker.Message, ttl time.Duration) // called in each Hold

	mu         sync.Mutex
	declared   []time.Time        // when each DeclareHold was called
	redeclared []broker.QueueSpec // the work queues Declare was called for
	holds      int                // Hold's calls
	events     []string           // "declare <ttl> at <time>", "hold <ttl> at <time>", in turn
}

func (b *holdTransport) note(what string, ttl time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if what == "declare" {
		b.declared = append(b.declared, now)
	} else {
		b.holds++
	}
	b.events = append(b.events, fmt.Sprintf("%s %v at %v", what, ttl, now.Sub(time.Unix(0, 0))))
}

func (b *holdTransport) DeclareHold(ctx context.Context, queue string, ttl time.Duration) error {
	b.note("declare", ttl)
	if b.declareErr != nil {
		return b.declareErr
	}
	return b.Backend.DeclareHold(ctx, queue, ttl)
}

func (b *holdTransport) Declare(ctx context.Context, specs ...broker.QueueSpec) error {
	b.mu.Lock()
	b.redeclared = append(b.redeclared, specs...)
	b.mu.Unlock()
	return b.Backend.Declare(ctx, specs...)
}

func (b *holdTransport) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	if b.duringHold != nil {
		b.duringHold(msg, ttl)
	}
	b.note("hold", ttl)
	b.mu.Lock()
	var err error
	if len(b.holdErrs) > 0 {
		err, b.holdErrs = b.holdErrs[0], b.holdErrs[1:]
	}
	b.mu.Unlock()
	if err != nil {
		return err
	}
	return b.Backend.Hold(ctx, msg, ttl)
}

// holdsOn returns a producer's holds for the queue "work" (prefix "h")
// through a holdTransport on a memory backend, and that transport.
func holdsOn(t *testing.T, c *clock.Mock) (*producerHolds, *holdTransport) {
	t.Helper()
	set, err := resolve(QueueSet{Prefix: "h", Queues: []Queue{{Name: "work"}}})
	if err != nil {
		t.Fatal(err)
	}
	b := &holdTransport{Backend: memory.New(&memory.Options{Clock: c}), clock: c}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Backend.Declare(t.Context(), set.byName["work"].spec()); err != nil {
		t.Fatal(err)
	}
	h := &producerHolds{holder: holder{backend: b, set: set, log: slog.New(slog.DiscardHandler), clock: c}, leases: newHoldLeases()}
	return h, b
}

// holdWork holds a job of h.work for d.
func holdWork(t *testing.T, h *producerHolds, d time.Duration) error {
	t.Helper()
	return h.hold(t.Context(), broker.Message{Queue: "h.work", ID: broker.NewJobID(), Body: []byte("{}")}, d, holdDefer)
}

// A hold declares its hold queue when the record has no lease of it
// fresher than ttl/2, and only then: a minute's hold queue is declared by
// the first hold, not by those of the next 29 s, again at 30 s.
func TestAHoldDeclaresItsQueueOncePerHalfItsTTL(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	for _, after := range []time.Duration{0, time.Second, 28 * time.Second, time.Second, time.Second} {
		c.Add(after)
		if err := holdWork(t, h, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Unix(0, 0).UTC()
	want := []time.Time{start, start.Add(30 * time.Second)}
	if !slices.EqualFunc(b.declared, want, time.Time.Equal) || b.holds != 5 {
		t.Errorf("5 holds at 0, 1, 29, 30 and 31 s: declares at %v and %d publishes; want declares at %v and 5", b.declared, b.holds, want)
	}
}

// A hold that finds its hold queue gone (deleted, or lost with a broker
// that restarted) declares it again at once and holds the job once.
func TestAHoldFindingItsHoldGoneDeclaresItAgain(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(holdWork(t, h, time.Minute))
	c.Add(time.Second)
	b.holdErrs = []error{fmt.Errorf("%w: returned", broker.ErrNoHold)}
	must(holdWork(t, h, time.Minute))
	if len(b.declared) != 2 || b.holds != 3 {
		t.Fatalf("a hold that found its hold gone: %d declares, %d publishes in all; want 2 and 3", len(b.declared), b.holds)
	}
	c.Add(29 * time.Second) // 30 s after the first declare, 29 after the second
	must(holdWork(t, h, time.Minute))
	if len(b.declared) != 2 {
		t.Errorf("the declare after a hold gone was not recorded: %d declares; want 2", len(b.declared))
	}
}

// A hold that finds its work queue gone declares it again as the set
// declares it, and holds the job.
func TestAHoldFindingItsWorkQueueGoneDeclaresItAgain(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	b.holdErrs = []error{fmt.Errorf("%w: 404", broker.ErrNoQueue)}
	if err := holdWork(t, h, time.Minute); err != nil {
		t.Fatal(err)
	}
	want := []broker.QueueSpec{h.set.byName["work"].spec()}
	if !slices.Equal(b.redeclared, want) || b.holds != 2 {
		t.Errorf("work queues declared again: %+v, %d publishes; want %+v and 2", b.redeclared, b.holds, want)
	}
}

// A hold whose publish reaches the broker ttl/2 or more after the declare
// it relied on declares its hold queue again, once the broker has it: the
// queue would otherwise expire (2×ttl after that declare) before the job's
// wait ends.
func TestALateHoldDeclaresItsQueueAgain(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	if err := holdWork(t, h, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.duringHold = func(broker.Message, time.Duration) { c.Add(40 * time.Second) } // the next publish is held up 40 s
	if err := holdWork(t, h, time.Minute); err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0).UTC()
	want := []time.Time{start, start.Add(40 * time.Second)}
	if !slices.EqualFunc(b.declared, want, time.Time.Equal) {
		t.Errorf("declares at %v; want %v (the first, then after the late publish)", b.declared, want)
	}
}

// A declare that fails fails its hold, and the record keeps no lease of
// it: the next hold declares the queue. So too when the queue had a fresh
// lease, and a hold that found it gone failed to declare it again.
func TestAFailedDeclareIsNotRecorded(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	b.declareErr = errors.New("refused")
	if err := holdWork(t, h, time.Minute); err == nil || b.holds != 0 {
		t.Fatalf("a hold whose declare failed: %v, %d publishes; want the error and none", err, b.holds)
	}
	b.declareErr = nil
	if err := holdWork(t, h, time.Minute); err != nil { // declared at 0: a fresh lease
		t.Fatal(err)
	}
	c.Add(time.Second)
	b.holdErrs, b.declareErr = []error{broker.ErrNoHold}, errors.New("refused")
	if err := holdWork(t, h, time.Minute); !errors.Is(err, broker.ErrNoHold) {
		t.Fatalf("a hold that found its hold gone and failed to declare it: %v; want ErrNoHold", err)
	}
	b.declareErr = nil
	c.Add(time.Second)
	if err := holdWork(t, h, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(b.declared) != 4 {
		t.Errorf("%d declares; want 4 (one failed, the next hold's, one failed after a hold gone, the next hold's): %v", len(b.declared), b.events)
	}
}

// A hold that found its hold gone and declared it again relies on that
// declare, not the one of its plan: it does not declare once more after
// its publish, however old the plan's declare.
func TestAHoldReliesOnTheDeclareItMade(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	if err := holdWork(t, h, time.Minute); err != nil { // declared at 0
		t.Fatal(err)
	}
	c.Add(29 * time.Second) // planned fresh, on the declare of 0 s
	b.holdErrs = []error{broker.ErrNoHold}
	b.duringHold = func(broker.Message, time.Duration) { c.Add(time.Second) }
	if err := holdWork(t, h, time.Minute); err != nil {
		t.Fatal(err)
	}
	want := []string{"declare 1m0s at 0s", "hold 1m0s at 0s", "hold 1m0s at 30s", "declare 1m0s at 30s", "hold 1m0s at 31s"}
	if !slices.Equal(b.events, want) {
		t.Errorf("calls: %v; want %v", b.events, want)
	}
}

// A hold planned on a fresh lease but made later (it waited for a place in
// the hold actor) declares its queue first if the lease is no longer
// fresh: published without, it could go into a queue that expires before
// its wait ends.
func TestAHoldMadeLateDeclaresItsQueueFirst(t *testing.T) {
	synctest.Test(t, testHoldMadeLate)
}

func testHoldMadeLate(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	gate := make(chan struct{})
	b.duringHold = func(_ broker.Message, ttl time.Duration) {
		if ttl == 2*time.Minute {
			<-gate
		}
	}
	a := newHoldActor(h.holder, 1, nil) // one publish at a time
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	ask := func(d time.Duration) error {
		return a.ask(t.Context(), broker.Message{Queue: "h.work", ID: broker.NewJobID(), Body: []byte("{}")}, d, holdDefer)
	}
	noErr(t, ask(time.Minute)) // declared at 0
	c.Add(29 * time.Second)
	asked := make(chan error, 2)
	go func() { asked <- ask(2 * time.Minute) }() // takes the one place, and waits at the gate
	synctest.Wait()
	go func() { asked <- ask(time.Minute) }() // planned at 29 s on the lease of 0 s, waits for the place
	synctest.Wait()
	c.Add(61 * time.Second)
	close(gate)
	noErr(t, <-asked)
	noErr(t, <-asked)
	cancel()
	noErr(t, <-ran)
	want := []string{"declare 1m0s at 0s", "hold 1m0s at 0s", "declare 2m0s at 29s",
		"hold 2m0s at 1m30s", "declare 2m0s at 1m30s", // late itself: declared again after
		"declare 1m0s at 1m30s", "hold 1m0s at 1m30s"}
	if !slices.Equal(b.events, want) {
		t.Errorf("calls: %v; want %v", b.events, want)
	}
}

// The worker's hold actor keeps the record of its hold queues itself, and
// learns what its publishing goroutines found: of three holds asked of it
// one after the other, the first's declare fails, so the second declares
// the queue again, and the third does not.
func TestTheHoldActorKeepsTheRecordOfItsHoldQueues(t *testing.T) {
	c := clock.NewMock()
	h, b := holdsOn(t, c)
	a := newHoldActor(h.holder, 2, nil)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	b.declareErr = errors.New("refused")
	for i := range 3 {
		msg := broker.Message{Queue: "h.work", ID: broker.NewJobID(), Body: []byte("{}")}
		if err := a.ask(t.Context(), msg, time.Minute, holdDefer); (err != nil) != (i == 0) {
			t.Fatalf("hold %d: %v", i, err)
		}
		b.declareErr = nil
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if len(b.declared) != 2 || b.holds != 2 {
		t.Errorf("three holds through the hold actor, the first's declare refused: %d declares, %d publishes; want 2 and 2", len(b.declared), b.holds)
	}
}

// noErr ends the test at err.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// deferringJob defers for a minute, each time it runs.
type deferringJob struct{}

func (deferringJob) Kind() string { return "deferring" }
func (deferringJob) Queue() Queue { return Queue{Name: "work"} }

// A worker's deferrals go through its hold actor's plan and record: two
// jobs that defer for the same wait, one after the other, declare its
// hold queue once.
func TestAWorkersDeferralsDeclareTheirHoldQueueOnce(t *testing.T) {
	synctest.Test(t, testWorkersDeferrals)
}

func testWorkersDeferrals(t *testing.T) {
	c := clock.NewMock()
	_, b := holdsOn(t, c)
	set := QueueSet{Prefix: "h", Queues: []Queue{{Name: "work"}}}
	settled := make(chan Outcome, 2)
	hooks := &Hooks{Deliver: func(ctx context.Context, _ *DeliveryInfo) (context.Context, func(Outcome)) {
		return ctx, func(o Outcome) { settled <- o }
	}}
	w, err := NewWorker(b, set, &WorkerConfig{Clock: c, Hooks: hooks, Logger: slog.New(slog.DiscardHandler)})
	noErr(t, err)
	noErr(t, Handle(w, func(context.Context, deferringJob, JobContext) error { return Defer(time.Minute, "busy") }))
	p, err := NewProducer(t.Context(), b, set, &ProducerConfig{Clock: c})
	noErr(t, err)
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for range 2 {
		_, err := p.Enqueue(t.Context(), deferringJob{})
		noErr(t, err)
		if o := <-settled; o.Result != Deferred {
			t.Fatalf("the job's outcome: %v; want Deferred", o.Result)
		}
		synctest.Wait() // the hold actor has heard of the declare
	}
	stop()
	noErr(t, <-ran)
	if len(b.declared) != 1 || b.holds != 2 {
		t.Errorf("two deferrals of a minute: %v; want one declare and two holds", b.events)
	}
}

// The hold actor's frequent messages, a settlement's request and a
// publish's end, are a pointer each: sending one allocates nothing (a
// field added to either would box it on every publish).
func TestTheHoldActorsFrequentMessagesAllocateNothing(t *testing.T) {
	s, g := &settlement{}, &publishing{}
	var sink holdMsg
	if n := testing.AllocsPerRun(100, func() { sink = settleRequest{s} }); n != 0 {
		t.Errorf("settleRequest: %v allocations a message, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { sink = publishFreed{g} }); n != 0 {
		t.Errorf("publishFreed: %v allocations a message, want 0", n)
	}
	_ = sink
}
