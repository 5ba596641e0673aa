package memory

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// Options configures a Backend. The zero value (or nil) is ready to use.
type Options struct {
	// Clock drives hold-queue expiry. Default: the real clock.
	Clock clock.Clock
	// KeepAcked is how many acked messages Acked remembers, the newest,
	// over all queues: a long-running backend must not keep them all, nor
	// keep more as it has more queues. Default DefaultKeepAcked; negative
	// keeps none. AckedCount counts every ack whatever this is.
	KeepAcked int
}

// DefaultKeepAcked is Options.KeepAcked's default. What is kept stays on
// the heap for the garbage collector to go through at every cycle: with
// 100,000 kept per queue, ten busy queues ran at 76-87 % of the throughput
// they reach with this default (BenchmarkMemoryQueues).
const DefaultKeepAcked = 10_000

// Backend is the in-memory broker. Create it with New.
type Backend struct {
	clock     clock.Clock
	keepAcked int

	mu        sync.Mutex
	closed    bool
	queues    map[string]*queue
	held      holdHeap
	timer     *clock.Timer
	timerAt   time.Time
	timerID   uint64                 // the armed timer, so a stale callback leaves it alone
	seq       uint64                 // orders messages as they land on a queue
	tag       uint64                 // delivery tags
	acked     []ackedMessage         // a ring of the newest keepAcked acks, once full
	ackedNext int                    // where the next ack goes, once the ring is full
	listeners map[string][]*listener // by topic (Listen)
	keys      map[string]heldKey     // uniqueness keys held (keys.go)
	keysSwept int                    // live keys at the last sweep
	ledgers   map[string]*ledger     // ledgers of cancellations, by queue set prefix (cancels.go)
}

var _ broker.Backend = (*Backend)(nil)

// New returns an empty backend.
func New(opts *Options) *Backend {
	b := &Backend{queues: map[string]*queue{}, keepAcked: DefaultKeepAcked}
	if opts != nil {
		b.clock = opts.Clock
		if opts.KeepAcked != 0 {
			b.keepAcked = max(opts.KeepAcked, 0)
		}
	}
	if b.clock == nil {
		b.clock = clock.New()
	}
	return b
}

type queue struct {
	spec      broker.QueueSpec
	top       uint8       // the highest level (topPriority)
	declared  bool        // through Declare (dead queues are made alongside)
	levels    [][]*stored // index = priority level; FIFO within a level
	consumers []*consumer // those dispatched to
	stopped   []*consumer // stopped, not yet ended: their deliveries still settle
	next      int         // round-robin position among consumers
	ackCount  int         // every ack on it, kept or not
}

type stored struct {
	msg         broker.Message
	seq         uint64
	redelivered bool
	expires     int64 // landing + the queue's MessageTTL, Unix ns; 0: never
	// first is the message's first delivery, made with it: one allocation
	// a message where most are delivered once. A message given back gets
	// a delivery of its own each time after, so that an earlier one, still
	// in a consumer's hands, stays settled.
	first     delivery
	firstUsed bool
}

type held struct {
	due  time.Time
	seq  uint64
	hold string // hold queue name
	msg  broker.Message
}

type holdHeap []*held

func (h holdHeap) Len() int { return len(h) }
func (h holdHeap) Less(i, j int) bool {
	if c := h[i].due.Compare(h[j].due); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h holdHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)   { *h = append(*h, x.(*held)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Name reports "memory".
func (b *Backend) Name() string { return "memory" }

// Declare creates each work queue and its dead-letter queue. Declaring a
// queue again with the same arguments keeps its messages; with different
// arguments it fails with broker.ErrPreconditionFailed, as RabbitMQ does.
func (b *Backend) Declare(ctx context.Context, specs ...broker.QueueSpec) error {
	if err := ended(ctx); err != nil {
		return err
	}
	for _, s := range specs {
		if err := broker.ValidateSpec(s); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	for _, s := range specs {
		if q, ok := b.queues[s.Name]; ok && q.declared && !equivalent(q.spec, s) {
			return fmt.Errorf("%w: queue %q was declared %s, with max priority %d, durable %t, message ttl %v; "+
				"this declaration asks for %s, max priority %d, durable %t, message ttl %v: "+
				"drain and delete the queue, or declare it as it is",
				broker.ErrPreconditionFailed, s.Name, q.spec.Type, q.spec.MaxPriority, q.spec.Durable, q.spec.MessageTTL,
				s.Type, s.MaxPriority, s.Durable, s.MessageTTL)
		}
	}
	for _, s := range specs {
		b.queueLocked(s).declared = true
		dead := broker.DeadQueueName(s.Name)
		if _, ok := b.queues[dead]; !ok && !s.Plain {
			b.queueLocked(broker.QueueSpec{Name: dead, Durable: true, Type: s.Type})
		}
	}
	return nil
}

// equivalent reports whether declaring b over a's queue is the same
// declaration, as RabbitMQ sees it: on a quorum queue the top priority is
// its lane, not one of its arguments.
func equivalent(a, b broker.QueueSpec) bool {
	if a.Type == broker.Quorum && b.Type == broker.Quorum {
		a.MaxPriority, b.MaxPriority = 0, 0
	}
	return a == b
}

func (b *Backend) queueLocked(s broker.QueueSpec) *queue {
	q, ok := b.queues[s.Name]
	if !ok {
		q = &queue{spec: s, top: topPriority(s)}
		q.levels = make([][]*stored, int(q.top)+1)
		b.queues[s.Name] = q
	}
	return q
}

// Publish puts msg on its queue. A queue that does not exist returns the
// message as broker.ErrUnroutable, as a mandatory publish on RabbitMQ would.
func (b *Backend) Publish(ctx context.Context, msg broker.Message) error {
	if err := ended(ctx); err != nil {
		return err
	}
	m := published(msg) // made before the lock, which producers and consumers share
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	b.releaseDueLocked()
	return b.publishLocked(m)
}

// PublishBatch publishes msgs under one hold of the lock (see
// broker.BatchPublisher); they land in order, and are settled in order once
// the lock is released.
func (b *Backend) PublishBatch(ctx context.Context, msgs []broker.Message, settled func(i int, err error)) {
	errs := b.publishAll(ctx, msgs)
	for i, err := range errs {
		settled(i, err)
	}
}

func (b *Backend) publishAll(ctx context.Context, msgs []broker.Message) []error {
	errs := make([]error, len(msgs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := ended(ctx); err != nil {
		return fail(err)
	}
	ms := make([]*stored, len(msgs))
	for i, msg := range msgs {
		ms[i] = published(msg)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fail(broker.ErrClosed)
	}
	b.releaseDueLocked()
	for i, m := range ms {
		errs[i] = b.publishLocked(m)
	}
	return errs
}

// published is msg as a publish stores it, made before the backend's lock
// is taken: the allocation (a message and its first delivery) would
// lengthen every hold of the lock.
func published(msg broker.Message) *stored {
	msg.FromHold = false
	return &stored{msg: msg}
}

// publishLocked lands m on its queue, or says it is unroutable.
func (b *Backend) publishLocked(m *stored) error {
	q, ok := b.queues[m.msg.Queue]
	if !ok {
		return fmt.Errorf("%w: publish to %q", broker.ErrUnroutable, m.msg.Queue)
	}
	b.landLocked(q, m)
	b.dispatchLocked(q)
	return nil
}

// DeclareHold checks that queue is known and ttl a hold's: the memory
// backend's holds need no declaring and never expire.
func (b *Backend) DeclareHold(ctx context.Context, queue string, ttl time.Duration) error {
	if err := ended(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checkHoldLocked(queue, ttl)
}

// Hold keeps msg in the hold queue for ttl, then lands it on msg.Queue.
func (b *Backend) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	if err := ended(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkHoldLocked(msg.Queue, ttl); err != nil {
		return err
	}
	if b.queues[msg.Queue].spec.Type == broker.Quorum {
		ttl = broker.LevelsTTL(ttl) // the delay levels wait whole seconds
	}
	b.releaseDueLocked()
	b.seq++
	heap.Push(&b.held, &held{
		due:  b.clock.Now().Add(ttl),
		seq:  b.seq,
		hold: broker.HoldQueueName(msg.Queue, ttl),
		msg:  msg,
	})
	b.armLocked()
	return nil
}

// checkHoldLocked refuses a hold of ttl for queue that is not a hold's or
// not known, and any after Close.
func (b *Backend) checkHoldLocked(queue string, ttl time.Duration) error {
	if ttl <= 0 || ttl%time.Millisecond != 0 || ttl > broker.MaxHoldMs*time.Millisecond {
		return fmt.Errorf("%w: hold ttl %v is not a whole number of milliseconds in (0, %dms]",
			broker.ErrInvalidDelay, ttl, broker.MaxHoldMs)
	}
	if b.closed {
		return broker.ErrClosed
	}
	if q, ok := b.queues[queue]; !ok || !q.declared {
		return fmt.Errorf("%w: hold for %q, which was not declared through this backend", broker.ErrUnknownQueue, queue)
	}
	return nil
}

// DeadLetter puts dl on the dead-letter queue of dl.Queue with headers for
// the reason, the original queue and the attempts.
func (b *Backend) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	if err := ended(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	dead := broker.DeadQueueName(dl.Queue)
	q, ok := b.queues[dead]
	if !ok {
		return fmt.Errorf("%w: dead letter to %q", broker.ErrUnroutable, dead)
	}
	b.releaseDueLocked()
	msg := dl.Message
	msg.Headers = broker.DeadLetterHeaders(dl)
	msg.FromHold = false
	b.landLocked(q, &stored{msg: msg})
	b.dispatchLocked(q)
	return nil
}

// landLocked puts s on q behind everything of its level.
func (b *Backend) landLocked(q *queue, s *stored) {
	b.seq++
	s.seq = b.seq
	if ttl := q.spec.MessageTTL; ttl > 0 {
		s.expires = b.clock.Now().Add(ttl).UnixNano()
	}
	lvl := q.level(s.msg.Priority)
	q.levels[lvl] = append(q.levels[lvl], s)
}

// expireLocked drops what waited on q longer than its MessageTTL, as
// RabbitMQ's x-message-ttl does (a work queue has no dead-letter exchange,
// so it is gone). Within a level messages are in landing order, a message
// given back keeping its place and its expiry, so the expired ones come
// first. Deliveries in flight do not expire.
func (b *Backend) expireLocked(q *queue) {
	if q.spec.MessageTTL <= 0 {
		return
	}
	now := b.clock.Now().UnixNano()
	for lvl, l := range q.levels {
		n := 0
		for n < len(l) && l[n].expires <= now {
			l[n] = nil
			n++
		}
		q.levels[lvl] = l[n:]
	}
}

// level is where a priority lands: RabbitMQ treats a priority above the
// queue's maximum as the maximum, and ignores it on a queue without one.
func (q *queue) level(p uint8) int { return int(min(p, q.top)) }

// topPriority is the highest priority level of s's queue: its
// MaxPriority; on a quorum queue, 1 if it has a lane (what lands there
// comes first) and 0 if not, as on RabbitMQ.
func topPriority(s broker.QueueSpec) uint8 {
	switch {
	case s.Type != broker.Quorum:
		return s.MaxPriority
	case s.Plain || s.MaxPriority == 0:
		return 0
	}
	return 1
}

// returnLocked puts a message that was delivered but not settled back in
// its original place: before every message of its level that came later.
// A quorum queue (RabbitMQ 3.10) puts it behind every message of its
// level instead.
func (q *queue) returnLocked(s *stored) {
	s.redelivered = true
	lvl := q.level(s.msg.Priority)
	if q.spec.Type == broker.Quorum {
		q.levels[lvl] = append(q.levels[lvl], s)
		return
	}
	at, _ := slices.BinarySearchFunc(q.levels[lvl], s.seq, func(e *stored, seq uint64) int { return cmp.Compare(e.seq, seq) })
	q.levels[lvl] = slices.Insert(q.levels[lvl], at, s)
}

func (q *queue) pending() int {
	n := 0
	for _, l := range q.levels {
		n += len(l)
	}
	return n
}

func (q *queue) popLocked() *stored {
	for lvl := len(q.levels) - 1; lvl >= 0; lvl-- {
		if l := q.levels[lvl]; len(l) > 0 {
			s := l[0]
			l[0] = nil
			q.levels[lvl] = l[1:]
			return s
		}
	}
	return nil
}

// dispatchLocked hands q's messages to its consumers, round-robin, while
// one of them has room under its prefetch; on a queue with a single active
// consumer, to the first of them only.
func (b *Backend) dispatchLocked(q *queue) {
	b.expireLocked(q)
	for len(q.consumers) > 0 && q.pending() > 0 {
		var c *consumer
		active := q.consumers
		if q.spec.SingleActiveConsumer {
			active = q.consumers[:1]
		}
		for i := range active {
			cand := active[(q.next+i)%len(active)]
			if len(cand.unacked) < cand.prefetch {
				c = cand
				q.next = (q.next + i + 1) % len(active)
				break
			}
		}
		if c == nil {
			return
		}
		s := q.popLocked()
		b.tag++
		d := s.newDelivery()
		*d = delivery{c: c, tag: b.tag, s: s}
		c.unacked[d.tag] = d
		c.ch <- d // never blocks: the buffer holds prefetch and unacked < prefetch
	}
}

// releaseDueLocked lands every held message whose time has come.
func (b *Backend) releaseDueLocked() {
	if len(b.held) == 0 {
		return // every publish and settle calls this: no clock read for nothing
	}
	now := b.clock.Now()
	touched := map[*queue]bool{}
	for len(b.held) > 0 && !b.held[0].due.After(now) {
		h := heap.Pop(&b.held).(*held)
		h.msg.FromHold = true
		q := b.queues[h.msg.Queue]
		b.landLocked(q, &stored{msg: h.msg})
		touched[q] = true
	}
	for q := range touched {
		b.dispatchLocked(q)
	}
	if len(touched) > 0 {
		b.armLocked()
	}
}

// armLocked keeps one clock timer set for the earliest held message.
func (b *Backend) armLocked() {
	if len(b.held) == 0 || b.closed {
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil
		}
		return
	}
	due := b.held[0].due
	if b.timer != nil && b.timerAt.Equal(due) {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerAt = due
	b.timerID++
	id := b.timerID
	b.timer = b.clock.AfterFunc(due.Sub(b.clock.Now()), func() { b.onTimer(id) })
}

func (b *Backend) onTimer(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if id == b.timerID {
		b.timer = nil // it has fired
	}
	b.releaseDueLocked()
	b.armLocked()
}

// Consume starts a consumer holding at most prefetch unsettled deliveries.
// ctx bounds only the start; the consumer lives until Cancel or Close.
func (b *Backend) Consume(ctx context.Context, queueName string, prefetch int) (broker.Consumer, error) {
	return b.consume(ctx, queueName, prefetch, false)
}

// ConsumeExclusive implements broker.ExclusiveConsumer: a consumer that is
// alone on its queue, as RabbitMQ's exclusive consumers are.
func (b *Backend) ConsumeExclusive(ctx context.Context, queueName string, prefetch int) (broker.Consumer, error) {
	return b.consume(ctx, queueName, prefetch, true)
}

func (b *Backend) consume(ctx context.Context, queueName string, prefetch int, exclusive bool) (broker.Consumer, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	if prefetch < 1 {
		return nil, fmt.Errorf("memory: consume %q: prefetch %d must be at least 1", queueName, prefetch)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, broker.ErrClosed
	}
	q, ok := b.queues[queueName]
	if !ok {
		return nil, fmt.Errorf("%w: consume %q", broker.ErrNoQueue, queueName)
	}
	for _, o := range q.consumers {
		if exclusive || o.exclusive {
			return nil, fmt.Errorf("%w: consume %q", broker.ErrInUse, queueName)
		}
	}
	// A quorum queue checks that it has no consumer, and no more: on
	// RabbitMQ 3.10 it lets others consume beside an exclusive consumer.
	exclusive = exclusive && q.spec.Type != broker.Quorum
	c := &consumer{b: b, q: q, prefetch: prefetch, ch: make(chan broker.Delivery, prefetch), unacked: map[uint64]*delivery{}, exclusive: exclusive}
	q.consumers = append(q.consumers, c)
	b.releaseDueLocked()
	b.dispatchLocked(q)
	return c, nil
}

// Close ends every consumer and refuses later calls with broker.ErrClosed.
// Held messages are dropped with the backend.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.held = nil // dropped with the backend: a later inspection must not land them
	b.armLocked()
	for _, q := range b.queues {
		for _, c := range append(slices.Clone(q.consumers), q.stopped...) {
			c.endLocked(broker.ErrClosed)
		}
	}
	b.endListenersLocked()
	b.endFollowersLocked()
	return nil
}

type consumer struct {
	b         *Backend
	q         *queue
	prefetch  int
	ch        chan broker.Delivery
	unacked   map[uint64]*delivery
	stopped   bool // out of dispatch; its deliveries still settle
	ended     bool
	err       error
	exclusive bool // alone on q while in dispatch (ConsumeExclusive)
}

func (c *consumer) Deliveries() <-chan broker.Delivery { return c.ch }

func (c *consumer) Err() error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.err
}

// Cancel ends the consumer; its unsettled deliveries return to the queue in
// their original order, marked redelivered.
// Stop takes the consumer out of the queue's dispatch; what it was handed
// stays readable and settleable.
func (c *consumer) Stop() {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if c.ended || c.stopped {
		return
	}
	c.stopped = true
	close(c.ch)
	c.q.consumers = slices.DeleteFunc(c.q.consumers, func(o *consumer) bool { return o == c })
	c.q.stopped = append(c.q.stopped, c)
	c.q.next = 0
	c.b.dispatchLocked(c.q)
}

func (c *consumer) Cancel() {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	c.endLocked(nil)
	c.b.releaseDueLocked()
	c.b.dispatchLocked(c.q)
}

func (c *consumer) endLocked(err error) {
	if c.ended {
		return
	}
	c.ended, c.err = true, err
	if !c.stopped {
		close(c.ch)
	}
	// Deliveries still buffered go back to the queue (or with the backend)
	// below; a reader must not also run them.
	for range c.ch {
	}
	c.q.consumers = slices.DeleteFunc(c.q.consumers, func(o *consumer) bool { return o == c })
	c.q.stopped = slices.DeleteFunc(c.q.stopped, func(o *consumer) bool { return o == c })
	c.q.next = 0
	if c.b.closed {
		return
	}
	back := slices.SortedFunc(maps.Values(c.unacked), func(a, b *delivery) int { return cmp.Compare(a.tag, b.tag) }) // as delivered
	for _, d := range back {
		c.q.returnLocked(d.s)
	}
	clear(c.unacked)
}

type delivery struct {
	c       *consumer
	tag     uint64
	s       *stored
	settled bool
}

// newDelivery is where s's next delivery is kept: its first, or one of
// its own.
func (s *stored) newDelivery() *delivery {
	if s.firstUsed {
		return new(delivery)
	}
	s.firstUsed = true
	return &s.first
}

func (d *delivery) Message() broker.Message { return d.s.msg }
func (d *delivery) Redelivered() bool       { return d.s.redelivered }

// settle checks that d may still be settled and removes it from its consumer.
func (d *delivery) settleLocked() error {
	switch {
	case d.settled:
		return broker.ErrAlreadySettled
	case d.c.b.closed:
		return broker.ErrClosed
	case d.c.ended:
		return broker.ErrStaleDelivery
	}
	d.settled = true
	delete(d.c.unacked, d.tag)
	return nil
}

func (d *delivery) Ack(ctx context.Context) error {
	b := d.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	if err := d.settleLocked(); err != nil {
		return err
	}
	b.recordAckLocked(d.c.q, d.s.msg)
	b.dispatchLocked(d.c.q)
	return nil
}

func (d *delivery) Requeue(ctx context.Context) error {
	b := d.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	if err := d.settleLocked(); err != nil {
		return err
	}
	d.c.q.returnLocked(d.s)
	b.dispatchLocked(d.c.q)
	return nil
}

// ErrDisconnected is the Err of a consumer ended by Disconnect.
var ErrDisconnected = errors.New("memory: consumer disconnected")

// Disconnect ends every consumer of queue as a lost broker channel would:
// their unsettled deliveries go back to the queue, later settles of them
// fail with broker.ErrStaleDelivery, and Err reports ErrDisconnected. It is
// for fault-injection tests.
func (b *Backend) Disconnect(queue string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.queues[queue]
	if !ok {
		return
	}
	for _, c := range append(slices.Clone(q.consumers), q.stopped...) {
		c.endLocked(ErrDisconnected)
	}
}

// Depth counts the messages ready on queue.
func (b *Backend) Depth(ctx context.Context, queue string) (int, error) {
	if err := ended(ctx); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, broker.ErrClosed
	}
	b.releaseDueLocked()
	q, ok := b.queues[queue]
	if !ok {
		return 0, fmt.Errorf("%w: depth of %q", broker.ErrNoQueue, queue)
	}
	b.expireLocked(q)
	return q.pending(), nil
}

// ackedMessage is a message acked on q.
type ackedMessage struct {
	q   *queue
	msg broker.Message
}

// recordAckLocked counts an ack on q and remembers the message for Acked,
// keeping the newest keepAcked of every queue in one ring.
func (b *Backend) recordAckLocked(q *queue, m broker.Message) {
	q.ackCount++
	if b.keepAcked == 0 {
		return
	}
	if len(b.acked) < b.keepAcked {
		b.acked = append(b.acked, ackedMessage{q, m})
		return
	}
	b.acked[b.ackedNext] = ackedMessage{q, m}
	b.ackedNext = (b.ackedNext + 1) % len(b.acked)
}

// ackedLocked lists the remembered acks on q, oldest first.
func (b *Backend) ackedLocked(q *queue) []broker.Message {
	var out []broker.Message
	for _, part := range [][]ackedMessage{b.acked[b.ackedNext:], b.acked[:b.ackedNext]} {
		for _, a := range part {
			if a.q == q {
				out = append(out, a.msg)
			}
		}
	}
	return out
}

// ended is ctx's error once it has ended, else nil. It looks at ctx's Done
// channel first: a ctx made by clock.Mock's WithTimeout or WithDeadline
// (benbjohnson/clock v1.3.5) reads its error without the lock its timer
// writes it under, which is a data race unless the read follows the close
// of Done.
func ended(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}
