package rabbitmq

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/queuey-go/queuey/broker"
)

// lanedConsumer consumes a quorum work queue and its lane as one
// consumer: a consumer on each, and a goroutine that hands out their
// deliveries, the lane's first, while fewer than prefetch of those it
// handed out are unsettled (a credit per delivery, given back at its
// settle). So a job that comes back from a wait runs ahead of the
// backlog, and the reader holds at most prefetch deliveries, as it does
// from a classic queue; the broker may have sent each consumer up to
// prefetch (the lane's, twice that).
type lanedConsumer struct {
	queue      string
	lane, work *consumer
	out        chan broker.Delivery
	credit     chan struct{} // a token per delivery handed out and not settled
	stop       chan struct{} // closed by Cancel
	ended      chan struct{} // closed once err is set
	err        error
	cancelOnce sync.Once
}

// consumeLaned starts a laned consumer of queue.
func (s *session) consumeLaned(ctx context.Context, slot *channelSlot, queue string, prefetch int) (broker.Consumer, error) {
	// The lane's consumer has twice the prefetch: with every credit out on
	// lane deliveries, the broker has sent the next ones already, and
	// they go before a backlog delivery held here at the next settle.
	cs, err := s.consumeAll(ctx, slot, []string{broker.LaneQueueName(queue), queue}, []int{min(2*prefetch, math.MaxUint16), prefetch}, false)
	if err != nil {
		return nil, err
	}
	c := &lanedConsumer{queue: queue, lane: cs[0], work: cs[1],
		out: make(chan broker.Delivery), credit: make(chan struct{}, prefetch),
		stop: make(chan struct{}), ended: make(chan struct{})}
	go c.run()
	return c, nil
}

// run hands out deliveries until both consumers have ended; when one ends
// on its own (a lost channel), the other is cancelled with it. It holds
// at most one delivery of each queue while it waits for a credit, and
// goes on receiving meanwhile, so that a lane delivery that comes while
// a backlog one waits goes first, and a consumer's end is seen while
// every credit is out (after a Stop, say).
func (c *lanedConsumer) run() {
	defer close(c.out)
	defer close(c.ended)
	in := [2]<-chan broker.Delivery{c.lane.Deliveries(), c.work.Deliveries()} // the lane first
	var held [2]broker.Delivery
	for {
		if held[0] == nil && in[0] != nil {
			if d, ok, got := tryRecvOk(in[0]); got && !c.received(&in, &held, 0, d, ok) {
				return // the lane first, whatever select would pick
			}
		}
		credit := c.credit
		if held[0] == nil && held[1] == nil {
			if in[0] == nil && in[1] == nil {
				return
			}
			credit = nil // nothing to hand out
		}
		recv := in
		for i := range held {
			if held[i] != nil {
				recv[i] = nil // one held at a time from each
			}
		}
		select {
		case credit <- struct{}{}:
			if held[0] == nil && in[0] != nil {
				// The credit and a lane delivery may have come at once.
				if d, ok, got := tryRecvOk(in[0]); got && !c.received(&in, &held, 0, d, ok) {
					return
				}
			}
			i := 1
			if held[0] != nil {
				i = 0
			}
			if !c.handOut(held[i]) {
				return
			}
			held[i] = nil
		case d, ok := <-recv[0]:
			if !c.received(&in, &held, 0, d, ok) {
				return
			}
		case d, ok := <-recv[1]:
			if !c.received(&in, &held, 1, d, ok) {
				return
			}
		case <-c.stop:
			return
		}
	}
}

// tryRecvOk receives from ch if something is there: got says whether it
// did, ok whether ch was open.
func tryRecvOk[T any](ch <-chan T) (v T, ok, got bool) {
	select {
	case v, ok = <-ch:
		return v, ok, true
	default:
		return v, false, false
	}
}

// received holds d from in[i], or notes that in[i] has closed; it reports
// false when the laned consumer has ended (endedOne).
func (c *lanedConsumer) received(in *[2]<-chan broker.Delivery, held *[2]broker.Delivery, i int, d broker.Delivery, ok bool) bool {
	if ok {
		held[i] = d
		return true
	}
	in[i] = nil
	return !c.endedOne()
}

// handOut gives d to the reader, with the credit it took; false when the
// consumer was cancelled meanwhile.
func (c *lanedConsumer) handOut(d broker.Delivery) bool {
	select {
	case c.out <- &creditedDelivery{Delivery: d, queue: c.queue, credit: c.credit}:
		return true
	case <-c.stop:
		return false
	}
}

// endedOne is told that one consumer's deliveries have ended. If it ended
// on its own, its error is the laned consumer's, the other is cancelled
// (its deliveries go back to the queue, as a lost channel's do), and
// endedOne reports that the laned consumer has ended too.
func (c *lanedConsumer) endedOne() (failed bool) {
	for _, one := range []*consumer{c.lane, c.work} {
		select {
		case <-one.ended:
			if one.err != nil {
				c.err = one.err
				c.lane.Cancel()
				c.work.Cancel()
				return true
			}
		default:
		}
	}
	return false
}

// Deliveries yields both queues' deliveries, the lane's first.
func (c *lanedConsumer) Deliveries() <-chan broker.Delivery { return c.out }

// Err is the first error of the two consumers, once Deliveries is closed.
func (c *lanedConsumer) Err() error {
	select {
	case <-c.ended:
		return c.err
	default:
		return nil
	}
}

// Stop stops both consumers (see broker.Consumer).
func (c *lanedConsumer) Stop() {
	c.lane.Stop()
	c.work.Stop()
}

// Cancel cancels both consumers (see broker.Consumer).
func (c *lanedConsumer) Cancel() {
	c.cancelOnce.Do(func() {
		close(c.stop)
		c.lane.Cancel()
		c.work.Cancel()
		<-c.ended
	})
}

// creditedDelivery is a delivery of a laned consumer: it gives its credit
// back at its settle, and names the work queue, whichever queue it came
// from.
type creditedDelivery struct {
	broker.Delivery
	queue  string
	credit chan struct{}
	once   sync.Once
}

// Message is the delivery's message, for the work queue.
func (d *creditedDelivery) Message() broker.Message {
	m := d.Delivery.Message()
	m.Queue = d.queue
	return m
}

// Ack acks the delivery and gives its credit back.
func (d *creditedDelivery) Ack(ctx context.Context) error {
	return d.settled(d.Delivery.Ack(ctx))
}

// Requeue requeues the delivery and gives its credit back.
func (d *creditedDelivery) Requeue(ctx context.Context) error {
	return d.settled(d.Delivery.Requeue(ctx))
}

// settled gives the credit back, once, unless the delivery had been
// settled before.
func (d *creditedDelivery) settled(err error) error {
	if !errors.Is(err, broker.ErrAlreadySettled) {
		d.once.Do(func() { <-d.credit })
	}
	return err
}
