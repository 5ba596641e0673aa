package rabbitmq

import (
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acker is the actor that settles the deliveries of one consume channel:
// every ack and requeue of them is a message to it, and it writes them
// to the channel as they come, never holding one back. What comes while
// it writes goes out in its next turn, and there the acks that settle
// every delivery from the oldest unsettled one up go as one
// basic.ack(multiple): the broker takes one frame for many deliveries, for
// less of its CPU than an ack each (ARCHITECTURE.md, "A consume
// channel's acks"). The rest go one by one.
//
// A multiple ack settles every delivery of the channel up to its tag that
// is still unsettled, so it is written only where each tag from the
// oldest unsettled one up is known: acked in that turn, or settled alone
// before (a requeue is always written alone, and before the turn's
// multiple ack). The broker numbers a channel's deliveries 1, 2, 3, … in
// order, whichever of its consumers they go to. A delivery left unsettled
// (a job that runs for an hour) keeps the acks after it apart until it is
// settled; past settledCap of them the acker stops keeping count and
// writes every ack alone for the rest of the channel's life.
//
// An ack returns once the acker has it; a requeue, which is rare, once it
// is written: a delivery given back is in the queue for the next
// consumer. Its goroutine ends when the channel closes; Cancel, and the
// backend's Close, flush it first.
type acker struct {
	ch      *amqp.Channel
	inbox   chan ackMsg
	flushes chan chan struct{}
	closed  <-chan *amqp.Error // the channel's close, told to the acker
	ended   chan struct{}      // closed when its goroutine has returned
	forget  func()             // takes it off its session's list, as it ends

	// The goroutine's own:
	oldest   uint64              // the oldest delivery tag not known to be settled
	settled  map[uint64]struct{} // tags above oldest settled alone
	counting bool                // oldest and settled are kept; false past settledCap
	acks     []uint64            // this turn's
	requeues []ackMsg            // this turn's
}

// ackMsg asks the acker to settle the delivery of tag: an ack, or a
// requeue (basic.nack with requeue), closing written once it is written.
type ackMsg struct {
	tag     uint64
	requeue bool
	written chan struct{}
}

// settledCap is how many deliveries settled alone, past one still
// unsettled, the acker keeps count of before it writes every ack alone.
const settledCap = 1 << 14

// newAcker starts the acker of ch, with room in its inbox for inbox
// messages (the channel's prefetch: no more can be unsettled), on the
// session's list of ackers until it ends.
func (s *session) newAcker(ch *amqp.Channel, inbox int) *acker {
	a := &acker{
		ch:       ch,
		inbox:    make(chan ackMsg, max(inbox, 16)),
		flushes:  make(chan chan struct{}),
		closed:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		ended:    make(chan struct{}),
		oldest:   1,
		settled:  map[uint64]struct{}{},
		counting: true,
	}
	s.acksMu.Lock()
	s.ackers[a] = struct{}{}
	s.acksMu.Unlock()
	a.forget = func() {
		s.acksMu.Lock()
		delete(s.ackers, a)
		s.acksMu.Unlock()
	}
	go a.run()
	return a
}

// flushAcks flushes every acker of the session, for up to socketDrain in
// all: before the connection is closed from this side, so that what was
// acked goes before it.
func (s *session) flushAcks() {
	s.acksMu.Lock()
	ackers := make([]*acker, 0, len(s.ackers))
	for a := range s.ackers {
		ackers = append(ackers, a)
	}
	s.acksMu.Unlock()
	if len(ackers) == 0 { // a publishing connection's
		return
	}
	timeout := time.NewTimer(socketDrain)
	defer timeout.Stop()
	for _, a := range ackers {
		a.flushUntil(timeout.C)
	}
}

// run takes messages until the channel closes: each turn, everything in
// the inbox, then writes it.
func (a *acker) run() {
	defer a.forget()
	defer close(a.ended)
	for {
		select {
		case m := <-a.inbox:
			a.take(m)
			a.takeQueued()
			a.write()
		case done := <-a.flushes:
			a.takeQueued()
			a.write()
			close(done)
		case <-a.closed:
			return
		}
	}
}

// ack asks for the delivery of tag to be acked. It returns once the
// acker has the message, amqp.ErrClosed if the channel is closed (the
// broker has the delivery back). An ack whose channel closes before it is
// written (a hard stop, a lost connection) is lost with the channel, and
// the broker takes the delivery back, as it does every unsettled one.
func (a *acker) ack(tag uint64) error {
	return a.send(ackMsg{tag: tag})
}

// requeue asks for the delivery of tag to be given back, and returns once
// that is written, or amqp.ErrClosed if the channel closed first.
func (a *acker) requeue(tag uint64) error {
	written := make(chan struct{})
	if err := a.send(ackMsg{tag: tag, requeue: true, written: written}); err != nil {
		return err
	}
	select {
	case <-written:
		return nil
	case <-a.ended:
		select {
		case <-written:
			return nil
		default:
			return amqp.ErrClosed
		}
	}
}

// send hands m to the acker, unless its channel is closed.
func (a *acker) send(m ackMsg) error {
	if a.ch.IsClosed() {
		return amqp.ErrClosed
	}
	select {
	case <-a.ended:
		return amqp.ErrClosed
	default:
	}
	select {
	case a.inbox <- m:
		return nil
	case <-a.ended:
		return amqp.ErrClosed
	}
}

// flush returns once what was asked of the acker before it is written (or
// the channel has closed): before the channel is closed from this side.
func (a *acker) flush() { a.flushUntil(nil) }

// flushUntil is flush, giving up when timeout fires.
func (a *acker) flushUntil(timeout <-chan time.Time) {
	done := make(chan struct{})
	select {
	case a.flushes <- done:
		select {
		case <-done:
		case <-a.ended:
		case <-timeout:
		}
	case <-a.ended:
	case <-timeout:
	}
}

func (a *acker) take(m ackMsg) {
	if m.requeue {
		a.requeues = append(a.requeues, m)
	} else {
		a.acks = append(a.acks, m.tag)
	}
}

// takeQueued takes every message waiting in the inbox.
func (a *acker) takeQueued() {
	for {
		select {
		case m := <-a.inbox:
			a.take(m)
		default:
			return
		}
	}
}

// write writes the turn's settles: the requeues, each alone; the acks from
// the oldest unsettled delivery up, as one multiple ack; the other acks,
// each alone. A failed write is the channel's end, which the broker
// answers by taking back every delivery still unsettled, so it is not
// reported: the acker's goroutine ends with the close that follows.
func (a *acker) write() {
	for _, m := range a.requeues {
		_ = a.ch.Nack(m.tag, false, true)
		a.settledAlone(m.tag)
	}
	slices.Sort(a.acks)
	alone := a.acks
	if a.counting {
		var top uint64
		if top, alone = a.fromOldest(a.acks); top != 0 {
			_ = a.ch.Ack(top, true)
		}
	}
	for _, tag := range alone {
		_ = a.ch.Ack(tag, false)
		a.settledAlone(tag)
	}
	for _, m := range a.requeues {
		close(m.written)
	}
	clear(a.requeues)
	a.acks, a.requeues = a.acks[:0], a.requeues[:0]
}

// fromOldest takes, of acks (in order), those that with the deliveries
// settled alone before settle every delivery from the oldest unsettled
// one up: it moves oldest past them and returns the highest of them (0
// if there is none), whose multiple ack settles them all, and the acks
// left, to be written alone.
func (a *acker) fromOldest(acks []uint64) (top uint64, left []uint64) {
	i := 0
	for {
		if i < len(acks) && acks[i] == a.oldest {
			top = acks[i]
			i++
		} else if _, ok := a.settled[a.oldest]; ok {
			delete(a.settled, a.oldest)
		} else {
			return top, acks[i:]
		}
		a.oldest++
	}
}

// settledAlone notes the delivery of tag settled by a frame of its own.
func (a *acker) settledAlone(tag uint64) {
	if !a.counting {
		return
	}
	a.settled[tag] = struct{}{}
	if len(a.settled) > settledCap {
		a.counting, a.settled = false, nil
	}
}
