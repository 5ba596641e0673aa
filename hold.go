package queuey

import (
	"context"
	"fmt"
	"log/slog"
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

// holder rounds a wait to its hold queue and publishes into it. The
// producer calls it directly; a worker's queue actors go through its hold
// actor, which owns the hold-queue declarations.
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
	stampDue(&msg, h.clock.Now().Add(ttl))
	if err := h.backend.Hold(ctx, msg, ttl); err != nil {
		return err
	}
	h.log.Debug("job held", "kind", kind.String(), "job_id", msg.ID, "queue", msg.Queue,
		"hold_queue", broker.HoldQueueName(msg.Queue, ttl), "delay", d)
	return nil
}

// holdRequest asks the hold actor to hold msg for delay.
type holdRequest struct {
	msg   broker.Message
	delay time.Duration
	kind  holdKind
	reply actor.Reply[struct{}]
}

// newHoldActor is the worker's hold actor: every retry and deferral of its
// queue actors is a message to it, answered once the held publish is
// confirmed. A failed publish is an answer, not a crash.
func newHoldActor(h holder, capacity int) *actor.Actor[holdRequest] {
	return actor.New("hold", capacity, func(ctx context.Context, req holdRequest) error {
		req.reply.Send(struct{}{}, h.hold(ctx, req.msg, req.delay, req.kind))
		return nil
	})
}

// askHold sends a hold request and waits for its confirmation.
func askHold(ctx context.Context, a *actor.Actor[holdRequest], msg broker.Message, d time.Duration, kind holdKind) error {
	_, err := actor.Ask(ctx, a, func(r actor.Reply[struct{}]) holdRequest {
		return holdRequest{msg: msg, delay: d, kind: kind, reply: r}
	})
	if err != nil {
		return fmt.Errorf("hold for %s: %w", kind, err)
	}
	return nil
}
