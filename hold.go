package queuey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/actor"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// holdKind says why a job waits; it picks the rounding step.
type holdKind int

const (
	holdRetry holdKind = iota // a retry's backoff: RetryGranularity
	holdDelay                 // EnqueueAfter: RetryGranularity
	holdDefer                 // a deferral: DeferGranularity
)

func (k holdKind) String() string {
	switch k {
	case holdRetry:
		return "retry"
	case holdDelay:
		return "enqueue after"
	default:
		return "defer"
	}
}

// holder rounds a wait to its hold queue and publishes into it. The
// producer calls it directly; a worker's queue actors go through its hold
// actor, which makes their publishes.
type holder struct {
	backend broker.Backend
	set     *queueSet
	log     *slog.Logger
	clock   clock.Clock
}

func (h holder) hold(ctx context.Context, msg broker.Message, d time.Duration, kind holdKind) error {
	step := h.set.retryGranularity
	if kind == holdDefer {
		step = h.set.deferGranularity
	}
	ttl, err := broker.HoldTTL(d, step)
	if err != nil {
		return err
	}
	due := ttl
	if h.quorum(msg.Queue) {
		due = broker.LevelsTTL(ttl) // what the delay levels wait
	}
	stampDue(&msg, h.clock.Now().Add(due))
	if err := h.backend.Hold(ctx, msg, ttl); err != nil {
		return err
	}
	if h.log.Enabled(ctx, slog.LevelDebug) { // naming the hold queue costs a little, a hold each
		h.log.Debug("job held", "kind", kind.String(), "job_id", msg.ID, "queue", msg.Queue,
			"hold_queue", h.holdQueue(msg.Queue, ttl), "delay", d)
	}
	return nil
}

// holdQueue names where a wait of ttl for queue is: its hold queue, or on
// a quorum queue the delay levels, with the whole seconds they wait.
func (h holder) holdQueue(queue string, ttl time.Duration) string {
	if h.quorum(queue) {
		return broker.DelayPrefix + "* (" + broker.LevelsTTL(ttl).String() + ")"
	}
	return broker.HoldQueueName(queue, ttl)
}

// holdActor is the worker's hold actor: every publish a settlement needs
// (a retry's or a deferral's hold, a dead letter, a copy) is a message to
// it from the queue actor that owns the delivery. It keeps many publishes
// in flight, as many as the deliveries that wait for one, and answers
// each once the broker has confirmed it, never one request at a time; a
// failed publish is an answer, not a crash. The hold queues themselves are
// declared by the backend as it publishes into them (see
// broker.Backend.Hold), so that a producer's waits and a worker's share
// one record of them.
//
// Its publishes are made by publishing goroutines that it starts as they
// are needed, up to its limit, and that live as long as its Run: a
// goroutine started for each publish would grow a new stack to the depth
// of a publish every time (6 % of the worker's CPU in bench scenario 8).
// Each has a channel of its own, with room for one request, which the
// actor sends on only while the goroutine is idle: the actor never waits.
type holdActor struct {
	holder
	inbox     *actor.Actor[holdMsg]
	limit     int                       // publishes in flight at most
	run       int                       // Runs so far; the actor's
	started   []chan holdRequest        // this Run's publishing goroutines, by channel; the actor's
	idle      []chan holdRequest        // those free for a publish; the actor's
	waiting   []holdRequest             // requests beyond limit, oldest first; the actor's
	publishes sync.WaitGroup            // the publishing goroutines; Run waits for them
	publish   func(s *settlement) error // a settlement's publish and ack (settler.publishAndAck)
}

// holdMsg is a message to the hold actor: a holdRequest, or a
// publishFinished from one of its publishes' goroutines.
type holdMsg interface{ holdMsg() }

// publishFinished: a publish the hold actor started in its run is over
// and answered; the publishing goroutine of channel by is free.
type publishFinished struct {
	run int
	by  chan holdRequest
}

func (holdRequest) holdMsg()     {}
func (publishFinished) holdMsg() {}

// errHoldStopped answers the requests still waiting for a place when the
// hold actor stops: none is published; a settlement's is given back to
// the broker by its queue actor, which is stopping too.
var errHoldStopped = errors.New("the worker's hold actor stopped before making the publish")

// holdRequest asks the hold actor for one publish: a settlement's, whose
// answer goes to its queue actor's inbox, or a hold of msg for delay
// (ask), answered on reply. ctx is the asker's: it bounds the publish,
// which outlives the message.
type holdRequest struct {
	ctx    context.Context
	settle *settlement
	answer *mailbox.Mailbox[queueMsg] // for settle
	msg    broker.Message
	delay  time.Duration
	kind   holdKind
	reply  actor.Reply[struct{}]
}

// newHoldActor returns a hold actor with up to inFlight publishes at once
// (below 1 means 1), made (and their deliveries acked) by publish for
// settlements; a request beyond them waits its turn in the actor.
func newHoldActor(h holder, inFlight int, publish func(*settlement) error) *holdActor {
	a := &holdActor{holder: h, limit: max(inFlight, 1), publish: publish}
	// Room for every request and for every publish's end: a publish's
	// goroutine that reports its end never waits long for the actor.
	a.inbox = actor.New("hold", 2*a.limit, a.receive)
	return a
}

// Run handles requests until ctx ends, then answers those still waiting
// for a place with errHoldStopped and waits for the publishes in flight to
// be answered.
func (a *holdActor) Run(ctx context.Context) error {
	a.run++
	defer a.publishes.Wait()
	defer a.endPublishing()
	defer a.refuseWaiting()
	return a.inbox.Run(ctx)
}

// endPublishing lets this Run's publishing goroutines end once they have
// made the publish they hold, if any.
func (a *holdActor) endPublishing() {
	for _, c := range a.started {
		close(c)
	}
	a.started, a.idle = nil, nil
}

// refuseWaiting answers every request still waiting for a place.
func (a *holdActor) refuseWaiting() {
	for _, req := range a.waiting {
		a.answer(req, errHoldStopped)
	}
	a.waiting = nil
}

// Stop refuses later requests; those queued are still handled.
func (a *holdActor) Stop() { a.inbox.Stop() }

// receive starts a request's publish if there is a place for it, or
// keeps it for the next place, and goes on to the next message without
// waiting for the confirm; a publish's end frees its place.
func (a *holdActor) receive(ctx context.Context, m holdMsg) error {
	switch m := m.(type) {
	case holdRequest:
		if !a.start(ctx, m) {
			a.waiting = append(a.waiting, m)
		}
	case publishFinished:
		if m.run != a.run {
			return nil // its goroutine ended with the Run before
		}
		a.idle = append(a.idle, m.by)
		if len(a.waiting) > 0 {
			next := a.waiting[0]
			a.waiting[0] = holdRequest{}
			a.waiting = a.waiting[1:]
			a.start(ctx, next)
		}
	}
	return nil
}

// start hands req to a publishing goroutine that is free, starting one
// if none is and there are fewer than limit; false if there is no place.
func (a *holdActor) start(ctx context.Context, req holdRequest) bool {
	if n := len(a.idle); n > 0 {
		c := a.idle[n-1]
		a.idle = a.idle[:n-1]
		c <- req // idle: its room is free
		return true
	}
	if len(a.started) == a.limit {
		return false
	}
	c := make(chan holdRequest, 1)
	a.started = append(a.started, c)
	run := a.run
	a.publishes.Go(func() { a.publishAll(ctx, run, c) })
	c <- req
	return true
}

// publishAll makes the publishes handed to it on work, one at a time, until
// work is closed: it answers each asker, then tells the actor that its
// place is free (unless the actor's Run has ended: then no place is
// waited for).
func (a *holdActor) publishAll(ctx context.Context, run int, work chan holdRequest) {
	for req := range work {
		if req.settle != nil {
			a.answer(req, a.publish(req.settle))
		} else {
			a.answer(req, a.hold(req.ctx, req.msg, req.delay, req.kind))
		}
		_ = a.inbox.Send(ctx, publishFinished{run: run, by: work})
	}
}

// answer tells the asker how req's publish went.
func (a *holdActor) answer(req holdRequest, err error) {
	if req.settle == nil {
		req.reply.Send(struct{}{}, err)
		return
	}
	_ = req.answer.Put(context.Background(), publishDone{run: req.settle.run, s: req.settle, err: err}) // it has room
}

// tell asks for s's publish, answered on answer; it does not wait for the
// publish, only, when the mailbox is full, for room in it. Neither wait
// ends with s's ctx: a job cut short by a stop is still published again
// (publishCopy), and the publish itself says what a cancelled ctx does to
// it.
func (a *holdActor) tell(s *settlement, answer *mailbox.Mailbox[queueMsg]) error {
	ctx := context.WithoutCancel(s.ctx)
	if err := a.inbox.Send(ctx, holdMsg(holdRequest{ctx: ctx, settle: s, answer: answer})); err != nil {
		return fmt.Errorf("publish for its %s: %w", s.opName(), err)
	}
	return nil
}

// ask sends a hold request and waits for its confirmation.
func (a *holdActor) ask(ctx context.Context, msg broker.Message, d time.Duration, kind holdKind) error {
	_, err := actor.Ask(ctx, a.inbox, func(r actor.Reply[struct{}]) holdMsg {
		return holdRequest{ctx: ctx, msg: msg, delay: d, kind: kind, reply: r}
	})
	if err != nil {
		return fmt.Errorf("hold for %s: %w", kind, err)
	}
	return nil
}

// laneLanding is how much longer than its wait a pause on a quorum queue
// lasts: the last delay level hands the job to the lane some time after
// it is due (0.1 to 0.25 s on a loaded three-node cluster, RELIABILITY.md),
// and a backlog taken up before the job lands would run first.
const laneLanding = 500 * time.Millisecond

// holdLanding is how much longer than its wait a pause on a classic queue
// lasts: the broker hands an expired message to its work queue some time
// after its TTL ends (a few milliseconds on an idle broker, tens under
// load), and the pause, timed from the hold's confirm, ends only a round
// trip or two after the TTL's start; a backlog taken up before the job
// lands would take the prefetch slots and run first.
const holdLanding = 100 * time.Millisecond

// pauseFor is how long a PauseQueue of d pauses queue (a broker name):
// until its job is back. That is its hold's wait and holdLanding more; on
// a quorum queue, the delay levels' whole seconds and laneLanding more.
func (s *queueSet) pauseFor(queue string, d time.Duration) time.Duration {
	ttl, _ := broker.HoldTTL(d, s.deferGranularity)
	if q := s.byBroker[queue]; q != nil && q.qtype == broker.Quorum {
		return broker.LevelsTTL(ttl) + laneLanding
	}
	return ttl + holdLanding
}

// quorum reports whether queue (a broker name) is a quorum queue of the
// set.
func (h holder) quorum(queue string) bool {
	q := h.set.byBroker[queue]
	return q != nil && q.qtype == broker.Quorum
}
