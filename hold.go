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

// holder makes holds: it rounds a wait to its hold (plan) and makes the
// declares and the publish that hold needs (carry). The record of the hold
// queues declared is its keeper's: a worker's hold actor keeps its own,
// and a producer its own (producerHolds).
type holder struct {
	backend broker.Backend
	set     *queueSet
	log     *slog.Logger
	clock   clock.Clock
}

// plan rounds a wait of d for queue to its hold and decides, from leases,
// whether its hold queue is declared first.
func (h holder) plan(leases *holdLeases, queue string, d time.Duration, kind holdKind) holdPlan {
	step := h.set.retryGranularity
	if kind == holdDefer {
		step = h.set.deferGranularity
	}
	ttl, err := broker.HoldTTL(d, step)
	if err != nil {
		return holdPlan{err: err}
	}
	spec, inSet := broker.QueueSpec{Name: queue}, false
	if c := h.set.byBroker[queue]; c != nil && c.broker == queue {
		spec, inSet = c.spec(), true
	}
	p := leases.plan(spec, ttl, h.clock.Now())
	p.inSet, p.kind, p.delay = inSet, kind, d
	return p
}

// carry makes p's hold of msg: the declare p asks for, or that the time
// since the plan asks for (a hold that waited for a place in the hold
// actor, or in a slow publish hook, past ttl/2 from the declare its plan
// relied on), then the publish. A hold queue or a work queue found gone is
// declared again and the publish made again. A publish held up on its way
// (a reconnect, an alarm, a congested network) past ttl/2 from the
// declare it relied on is followed by a declare of its hold queue, whose
// expiry is then 2×ttl past a time the job was already in it; a publish
// that took 1.5×ttl on its way could still find its queue expired. It
// returns what it learned of the hold queue's lease, for the record's
// keeper.
func (h holder) carry(ctx context.Context, msg broker.Message, p holdPlan) (leaseNews, error) {
	if p.err != nil {
		return leaseNews{}, p.err
	}
	now := h.clock.Now()
	stampDue(&msg, now.Add(p.due()))
	var news leaseNews
	if p.declare || p.staleAt(now) {
		if err := h.declareHold(ctx, &p, &news); err != nil {
			return news, err
		}
	}
	if err := h.publishHold(ctx, msg, &p, &news); err != nil {
		return news, err
	}
	if p.staleAt(h.clock.Now()) {
		if err := h.declareHold(ctx, &p, &news); err != nil {
			// The job is in a queue that may expire before its wait
			// ends: not known to be safe, so an error (holding it again
			// risks a duplicate, never a loss).
			return news, fmt.Errorf("hold queue %q: declaring it again after a late publish: %w", p.hold.String(), err)
		}
	}
	if h.log.Enabled(ctx, slog.LevelDebug) { // naming the hold queue costs a little, a hold each
		h.log.Debug("job held", "kind", p.kind.String(), "job_id", msg.ID, "queue", msg.Queue,
			"hold_queue", h.holdQueue(msg.Queue, p.ttl), "delay", p.delay)
	}
	return news, nil
}

// publishHold publishes msg into p's hold. A work queue found gone is
// declared again, as the set declares it, and so is a hold found gone;
// the publish is made again after each.
func (h holder) publishHold(ctx context.Context, msg broker.Message, p *holdPlan, news *leaseNews) error {
	err := h.backend.Hold(ctx, msg, p.ttl)
	if errors.Is(err, broker.ErrNoQueue) && p.inSet {
		h.log.Warn("a job is held for a work queue that is gone; declaring it again", "queue", msg.Queue, "error", err)
		if derr := h.backend.Declare(ctx, p.spec); derr != nil {
			return fmt.Errorf("work queue %q is gone, and declaring it again failed: %w", msg.Queue, derr)
		}
		err = h.backend.Hold(ctx, msg, p.ttl)
	}
	if errors.Is(err, broker.ErrNoHold) {
		// It expired while the publish waited (an alarm, a reconnect), or
		// was deleted, or lost with a broker restart: nothing was held.
		h.log.Info("a job's hold queue is gone; declaring it again", "queue", msg.Queue, "hold_queue", h.holdQueue(msg.Queue, p.ttl))
		if derr := h.declareHold(ctx, p, news); derr != nil {
			return fmt.Errorf("%w; declaring it again failed: %w", err, derr)
		}
		err = h.backend.Hold(ctx, msg, p.ttl)
	}
	return err
}

// declareHold declares p's hold, and notes in news (and in p) the lease
// it took, or that there is none.
func (h holder) declareHold(ctx context.Context, p *holdPlan, news *leaseNews) error {
	at := h.clock.Now()
	if err := h.backend.DeclareHold(ctx, p.spec.Name, p.ttl); err != nil {
		if !p.levels() {
			*news = leaseNews{hold: p.hold, forget: true}
		}
		return err
	}
	if !p.levels() {
		*news = leaseNews{hold: p.hold, at: at}
		p.since = at
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

// producerHolds is a producer's holder and its record of the hold queues
// it declared, kept under its lock: a producer is called from any
// goroutine and runs no actor.
type producerHolds struct {
	holder
	mu     sync.Mutex
	leases holdLeases
}

// hold holds msg for d, a wait of kind's.
func (h *producerHolds) hold(ctx context.Context, msg broker.Message, d time.Duration, kind holdKind) error {
	h.mu.Lock()
	p := h.plan(&h.leases, msg.Queue, d, kind)
	h.mu.Unlock()
	news, err := h.carry(ctx, msg, p)
	if news != (leaseNews{}) { // most holds learn nothing
		h.mu.Lock()
		h.leases.learn(news)
		h.mu.Unlock()
	}
	return err
}

// holdActor is the worker's hold actor: every publish a settlement needs
// (a retry's or a deferral's hold, a dead letter, a copy) is a message to
// it from the queue actor that owns the delivery. It keeps many publishes
// in flight, as many as the deliveries that wait for one, and answers
// each once the broker has confirmed it, never one request at a time; a
// failed publish is an answer, not a crash.
//
// It owns the worker's holds: it rounds each wait to its hold and keeps
// the record of the hold queues declared (holdleases.go), deciding as it
// hands a hold out whether its hold queue is declared first; the
// publishing goroutine makes the declare, the work-queue check and the
// publish (holder.carry) and reports what it learned of the lease back to
// the actor with the end of its publish. The backend is the transport.
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
	leases    holdLeases                                     // the hold queues declared; the actor's
	limit     int                                            // publishes in flight at most
	run       int                                            // Runs so far; the actor's
	started   []*publishing                                  // this Run's publishing goroutines; the actor's
	idle      []*publishing                                  // those free for a publish; the actor's
	waiting   []holdRequest                                  // requests beyond limit, oldest first; the actor's
	publishes sync.WaitGroup                                 // the publishing goroutines; Run waits for them
	publish   func(*settlement, holdPlan) (leaseNews, error) // a settlement's publish and ack (settler.publishAndAck)
}

// publishing is one of the hold actor's publishing goroutines: the
// channel it takes its publishes on, and the Run that started it.
type publishing struct {
	work chan holdRequest
	run  int
}

// holdMsg is a message to the hold actor: a settleRequest or a
// holdRequest, or, from one of its publishing goroutines, a leaseLearned
// and a publishFreed. The frequent ones, a settlement's request and a
// publish's end, are a pointer each, which takes no allocation to send.
type holdMsg interface{ holdMsg() }

// settleRequest asks for the publish of a settlement (and its ack), whose
// answer goes to its queue actor's inbox (settlement.inbox).
type settleRequest struct{ s *settlement }

// publishFreed: a publish the hold actor handed to g is over and
// answered; g is free for the next.
type publishFreed struct{ g *publishing }

// leaseLearned is what a hold learned of its hold queue's lease (a
// declare made or failed), before its goroutine is free.
type leaseLearned struct{ news leaseNews }

func (settleRequest) holdMsg() {}
func (holdRequest) holdMsg()   {}
func (publishFreed) holdMsg()  {}
func (leaseLearned) holdMsg()  {}

// errHoldStopped answers the requests still waiting for a place when the
// hold actor stops: none is published; a settlement's is given back to
// the broker by its queue actor, which is stopping too.
var errHoldStopped = errors.New("the worker's hold actor stopped before making the publish")

// holdRequest is one publish the hold actor hands to a publishing
// goroutine: a settlement's (from a settleRequest), or a hold of msg for
// delay (ask, whose message it is), answered on reply; ctx is the
// asker's and bounds the publish, which outlives the message. A request
// beyond the actor's limit waits as one.
type holdRequest struct {
	ctx    context.Context
	settle *settlement
	msg    broker.Message
	delay  time.Duration
	kind   holdKind
	reply  actor.Reply[struct{}]
	plan   holdPlan // the hold's, as the actor decided it
}

// newHoldActor returns a hold actor with up to inFlight publishes at once
// (below 1 means 1), made (and their deliveries acked) by publish for
// settlements; a request beyond them waits its turn in the actor.
func newHoldActor(h holder, inFlight int, publish func(*settlement, holdPlan) (leaseNews, error)) *holdActor {
	a := &holdActor{holder: h, leases: newHoldLeases(), limit: max(inFlight, 1), publish: publish}
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
	for _, g := range a.started {
		close(g.work)
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

// receive plans a request's hold, if it has one, and starts its publish
// if there is a place for it, or keeps it for the next place, and goes on
// to the next message without waiting for the confirm; a publish's end
// frees its place and tells what it learned of a lease.
func (a *holdActor) receive(ctx context.Context, m holdMsg) error {
	switch m := m.(type) {
	case settleRequest:
		a.requested(ctx, holdRequest{settle: m.s})
	case holdRequest:
		a.requested(ctx, m)
	case leaseLearned:
		a.leases.learn(m.news)
	case publishFreed:
		if m.g.run != a.run {
			return nil // it ended with the Run before
		}
		a.idle = append(a.idle, m.g)
		if len(a.waiting) > 0 {
			next := a.waiting[0]
			a.waiting[0] = holdRequest{}
			a.waiting = a.waiting[1:]
			a.start(ctx, next)
		}
	}
	return nil
}

// requested plans req's hold and starts its publish, or keeps it for the
// next place.
func (a *holdActor) requested(ctx context.Context, req holdRequest) {
	a.planHold(&req)
	if !a.start(ctx, req) {
		a.waiting = append(a.waiting, req)
	}
}

// start hands req to a publishing goroutine that is free, starting one
// if none is and there are fewer than limit; false if there is no place.
func (a *holdActor) start(ctx context.Context, req holdRequest) bool {
	if n := len(a.idle); n > 0 {
		g := a.idle[n-1]
		a.idle = a.idle[:n-1]
		g.work <- req // idle: its room is free
		return true
	}
	if len(a.started) == a.limit {
		return false
	}
	g := &publishing{work: make(chan holdRequest, 1), run: a.run}
	a.started = append(a.started, g)
	a.publishes.Go(func() { a.publishAll(ctx, g) })
	g.work <- req
	return true
}

// publishAll is g's goroutine: it makes the publishes handed to it, one
// at a time, until its channel is closed. After each it tells the actor
// what its hold learned of a lease, if anything, and that g is free
// (unless the actor's Run has ended: then no place is waited for), then
// answers the asker, whose next hold is so planned on a record that knows
// this one's.
func (a *holdActor) publishAll(ctx context.Context, g *publishing) {
	for req := range g.work {
		var news leaseNews
		var err error
		if req.settle != nil {
			news, err = a.publish(req.settle, req.plan)
		} else {
			news, err = a.carry(req.ctx, req.msg, req.plan)
		}
		if news != (leaseNews{}) { // most holds learn nothing
			_ = a.inbox.Send(ctx, leaseLearned{news})
		}
		_ = a.inbox.Send(ctx, publishFreed{g})
		a.answer(req, err)
	}
}

// planHold decides req's hold, if it asks for one, from the actor's
// record of the hold queues.
func (a *holdActor) planHold(req *holdRequest) {
	switch {
	case req.settle == nil:
		req.plan = a.plan(&a.leases, req.msg.Queue, req.delay, req.kind)
	case req.settle.action == actHold:
		s := req.settle
		req.plan = a.plan(&a.leases, s.msg.Queue, s.delay, s.kind)
	}
}

// answer tells the asker how req's publish went.
func (a *holdActor) answer(req holdRequest, err error) {
	if req.settle == nil {
		req.reply.Send(struct{}{}, err)
		return
	}
	_ = req.settle.inbox.Put(context.Background(), publishDone{run: req.settle.run, s: req.settle, err: err}) // it has room
}

// tell asks for s's publish, answered on its queue actor's inbox; it does
// not wait for the publish, only, when the mailbox is full, for room in
// it. Neither wait ends with s's ctx: a job cut short by a stop is still
// published again (publishCopy), and the publish itself says what a
// cancelled ctx does to it.
func (a *holdActor) tell(s *settlement) error {
	if err := a.inbox.Send(context.Background(), holdMsg(settleRequest{s})); err != nil {
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
