package queuey

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/queuey-go/queuey/broker"
)

// PoisonAfter (WorkerConfig) finds a job that crashes its worker process.
// RabbitMQ's classic queues keep no delivery count, so the count travels in
// the message: a job the broker hands out again unsettled is published
// again with its count raised (to the back of the queue) and the original
// acked. That counted copy is a suspect: when it comes, its queue actor
// stops taking deliveries, lets what it holds run, and runs the suspect
// alone, so that if it crashes its worker again no bystander is counted
// with it. A job counted PoisonAfter times is dead-lettered as poison.

// headerRedeliveries counts the times a job came back from the broker
// unsettled (its worker crashed or lost its connection while holding it).
const headerRedeliveries = "x-queuey-redeliveries"

// suspect is a counted copy a queue actor holds, to run alone.
type suspect struct {
	d       broker.Delivery
	running bool
}

// isSuspect reports a delivery that is the counted copy of a job that came
// back unsettled: it was in flight when a worker crashed, maybe as the
// cause, maybe as a bystander.
func isSuspect(d broker.Delivery) bool {
	return !d.Redelivered() && d.Message().Headers[headerRedeliveries] != ""
}

// isolate takes the suspect d: the consumer stops, the deliveries it had
// already sent run first, then d alone (nextTask), then consuming resumes.
func (l *queueLoop) isolate(d broker.Delivery) {
	l.suspect = &suspect{d: d}
	l.stopConsumer()
}

// countRedelivery settles a delivery the broker hands out again. A job
// redelivered PoisonAfter times is dead-lettered as poison: it most likely
// kills its worker. Otherwise the job is published again with the count
// raised, and the original acked; the copy is what runs.
func (w *Worker) countRedelivery(log jobLog, msg broker.Message, env broker.Envelope, jc JobContext) settlement {
	n, _ := strconv.Atoi(msg.Headers[headerRedeliveries])
	n++
	if n >= w.poisonAfter {
		log.Error("job came back unsettled too often; dead-lettering it as poison", "redeliveries", n)
		return deadLetterOf(log, original(env), CausePoison,
			fmt.Sprintf("poison: delivered %d times without being settled; it may crash its worker", n), nil, jc)
	}
	again := original(env)
	// The copy is due when the original was: a stamp is kept, and without
	// one the copy's enqueued_at is the original's. Back from a hold whose
	// publisher did not stamp it (a Rust producer), it was due at some
	// time unknown, no later than now; the copy is due now, not at its
	// enqueue a wait ago.
	again.DueAt = msg.DueAt
	if again.DueAt.IsZero() && msg.FromHold {
		again.DueAt = w.clock.Now()
	}
	again.Headers = maps.Clone(msg.Headers)
	if again.Headers == nil {
		again.Headers = map[string]string{}
	}
	again.Headers[headerRedeliveries] = strconv.Itoa(n)
	log.Warn("job came back unsettled; counted and published again", "redeliveries", n, "poison_after", w.poisonAfter)
	return settlement{action: actCopy, msg: again, op: OpRedelivery, log: log, out: Outcome{Result: Requeued}}
}

// setAside publishes d again, unchanged, to the back of its queue, and
// acks it: a suspect that runs alone later, or a delivery given back.
// Should the publish fail, the delivery is requeued instead (and counted
// once more, if it comes back). It returns the failure to settle, counted
// and logged already.
func (w *Worker) setAside(ctx context.Context, q *queueConfig, d broker.Delivery) error {
	msg := d.Message()
	log := jobLog{l: w.log, id: msg.ID, queue: q.broker}
	again := msg
	again.Queue = q.broker
	again.Headers = maps.Clone(msg.Headers)
	done := w.publishHook(ctx, OpRedelivery, &again, 0, "")
	err := w.backend.Publish(ctx, again)
	done(err)
	if err != nil {
		w.settleFailed(log, slog.LevelError, "set aside", err)
		requeue(d, log)
		return err
	}
	if err := d.Ack(context.Background()); err != nil {
		w.settleFailed(log, slog.LevelError, "ack", err)
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
