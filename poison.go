package queuey

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// PoisonAfter (WorkerConfig) finds a job that crashes its worker process.
// When a worker dies, every delivery it held comes back redelivered: the
// one that crashed it, if any, and its bystanders, running or not; the
// broker cannot say which. So a redelivered job is not counted: it is
// moved, uncounted, to the queue's suspects queue
// (broker.SuspectQueueName), and the worker that moved it runs the
// suspects one at a time, alone: it stops taking deliveries, lets what it
// holds run, then takes one suspect (prefetch 1) and runs it at once. A
// suspect is held only while it runs alone, so a suspect redelivered was
// running when its worker died: that is counted. RabbitMQ's classic
// queues keep no delivery count, so the count travels in the message; a
// job counted PoisonAfter times is dead-lettered as poison.

// headerRedeliveries counts the times a job was running alone when its
// worker died.
const headerRedeliveries = "x-queuey-redeliveries"

// suspectWait bounds the wait for a suspect the suspects queue said it had:
// another worker may have taken it meanwhile.
const suspectWait = time.Second

// runSuspect takes one job from the suspects queue of t's queue, if there
// is one, and runs it alone: held only while it runs. It reports whether
// it found one (then the queue actor looks for the next).
func (r *jobRunner) runSuspect(t task) suspectRan {
	ran := suspectRan{run: t.run}
	queue := broker.SuspectQueueName(t.q.broker)
	if n, err := r.backend.Depth(t.ctx, queue); err != nil || n == 0 {
		if err != nil {
			r.log.Warn("could not look for jobs to run alone; looking again when the queue is consumed again", "queue", queue, "error", err)
		}
		return ran
	}
	c, err := r.backend.Consume(t.ctx, queue, 1)
	if err != nil {
		r.log.Warn("could not take a job to run alone", "queue", queue, "error", err)
		return ran
	}
	lease := &consumerLease{c: c, retired: true}
	keep := false // a settle of its delivery is to be tried again: the queue actor ends it
	defer func() {
		if !keep {
			c.Cancel()
		}
	}()
	timer := r.clock.Timer(suspectWait)
	defer timer.Stop()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			return ran
		}
		c.Stop()
		t.d, t.alone = d, true
		var s settlement
		r.process(t, &s)
		if ran.retry = r.settler.settle(&s); ran.retry != nil {
			ran.retry.lease, keep = lease, true // the queue actor keeps it, and the consumer open
		}
		ran.found = true
	case <-timer.C: // taken by another worker
	case <-t.ctx.Done():
	}
	return ran
}

// countRedelivery settles a delivery the broker hands out again. From the
// work queue it is a suspect: moved, with a count of 0, to the suspects
// queue. From the suspects queue (alone) it was running alone when its
// worker died: its count is raised, and at PoisonAfter it is dead-
// lettered as poison (it most likely kills its worker); below, moved back
// to the suspects queue.
func (r *jobRunner) countRedelivery(f *jobFacts, q *queueConfig, msg broker.Message, alone bool) settlement {
	log := f.log
	// Only the suspects queue's count is read: a job on the work queue
	// has none (every republish there makes its headers afresh), so one
	// there is forged, or an old worker's.
	n := 0
	if alone {
		n, _ = strconv.Atoi(msg.Headers[headerRedeliveries])
		n++
	}
	if n >= r.poisonAfter {
		log.Error("job crashed its worker too often; dead-lettering it as poison", "redeliveries", n)
		return deadLetterOf(f, original(f.env), CausePoison,
			fmt.Sprintf("poison: its worker died %d times while it ran alone; it may crash its worker", n), nil)
	}
	again := original(f.env)
	again.Queue = broker.SuspectQueueName(q.broker)
	// The copy is due when the original was: a stamp is kept, and without
	// one the copy's enqueued_at is the original's. Back from a hold whose
	// publisher did not stamp it (a Rust producer), it was due at some
	// time unknown, no later than now; the copy is due now, not at its
	// enqueue a wait ago.
	again.DueAt = msg.DueAt
	if again.DueAt.IsZero() && msg.FromHold {
		again.DueAt = r.clock.Now()
	}
	again.Headers = maps.Clone(msg.Headers)
	if again.Headers == nil {
		again.Headers = map[string]string{}
	}
	again.Headers[headerRedeliveries] = strconv.Itoa(n)
	if alone {
		log.Warn("job was running alone when its worker died; counted, to run alone again", "redeliveries", n, "poison_after", r.poisonAfter)
	} else {
		log.Warn("job came back from a crash; to run alone", "redeliveries", n, "poison_after", r.poisonAfter)
	}
	return settlement{action: actCopy, msg: again, op: OpRedelivery, log: log, suspected: true, out: Outcome{Result: Requeued}}
}

// setAside publishes d again, unchanged, to the back of its queue, and
// acks it: a suspect that runs alone later, or a delivery given back.
// Should the publish fail, the delivery is requeued instead (and counted
// once more, if it comes back). It returns the failure to settle, counted
// and logged already.
func (r *jobRunner) setAside(ctx context.Context, q *queueConfig, d broker.Delivery) error {
	msg := d.Message()
	log := jobLog{l: r.log, id: msg.ID, queue: q.broker}
	again := msg
	again.Queue = q.broker
	again.Headers = maps.Clone(msg.Headers)
	done := r.hookCalls.publish(ctx, &again, publishIntent{op: OpRedelivery})
	err := r.backend.Publish(ctx, again)
	done(err)
	if err != nil {
		r.settler.settleFailed(log, slog.LevelError, "set aside", err)
		requeue(d, log)
		return err
	}
	if err := d.Ack(context.Background()); err != nil {
		r.settler.settleFailed(log, slog.LevelError, "ack", err)
		return err
	}
	return nil
}

// givenBack remembers the ids of the deliveries a worker requeued itself
// because it could not publish their outcome, so that, with PoisonAfter on,
// their redelivery is not counted as a crash. It holds the newest
// givenBackCap; a redelivery to another worker is counted there, once. The
// handler goroutines share it; it is no queue's state.
type givenBack struct {
	mu    sync.Mutex
	ids   map[string]struct{}
	order []string // oldest first, for eviction
}

const givenBackCap = 10_000

func (g *givenBack) add(id string) {
	if id == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = map[string]struct{}{}
	}
	if _, ok := g.ids[id]; ok {
		return
	}
	if len(g.order) == givenBackCap {
		delete(g.ids, g.order[0])
		g.order = g.order[1:]
	}
	g.ids[id] = struct{}{}
	g.order = append(g.order, id)
}

// take reports whether id was given back, and forgets it.
func (g *givenBack) take(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.ids[id]; !ok {
		return false
	}
	delete(g.ids, id)
	g.order = slices.DeleteFunc(g.order, func(o string) bool { return o == id })
	return true
}
