package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// A publish AMQP cannot carry is refused before it is written, and the
// connection stays: written, amqp091 would fail mid-frame or the broker
// would close the connection, and the publish would be tried again on the
// next one.
func TestAPublishPastAMQPLimitsIsRefusedAndTheConnectionStays(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(countingHandler{text: "connection lost", n: &lost})})
	defer b.Close()
	q := unique("limits") + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	ok := broker.Message{Queue: q, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	for name, edit := range map[string]func(*broker.Message){
		"correlation id of 300 bytes": func(m *broker.Message) { m.CorrelationID = strings.Repeat("c", 300) },
		"message id of 300 bytes":     func(m *broker.Message) { m.ID = strings.Repeat("i", 300) },
		"a header of 200 KB":          func(m *broker.Message) { m.Headers = map[string]string{"x-big": strings.Repeat("h", 200_000)} },
		"a header name of 300 bytes":  func(m *broker.Message) { m.Headers = map[string]string{strings.Repeat("k", 300): "v"} },
	} {
		bad := ok
		edit(&bad)
		if err := b.Publish(t.Context(), bad); !errors.Is(err, rabbitmq.ErrUnencodable) {
			t.Errorf("%s: Publish error = %v, want ErrUnencodable", name, err)
		}
		if err := b.Publish(t.Context(), ok); err != nil {
			t.Errorf("%s: the next publish: %v", name, err)
		}
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("the connection was lost %d times, want 0", n)
	}
}

// A publish the broker nacks (here a full queue that rejects publishes; a
// quorum queue electing a leader does so too) is published again until
// its ctx ends, and then fails with both ErrNacked and ctx's error; once
// there is room, publishes go through. So is each message of a batch.
func TestANackedPublishIsTriedAgainUntilItsCtxEnds(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	q := unique("nacked") + ".work"
	ch := rawChannel(t)
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q) })
	msg := broker.Message{Queue: q, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	if err := b.Publish(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	// Long enough for the broker's nacks to come back under the load of
	// the tests beside this one.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := b.Publish(ctx, msg); !errors.Is(err, rabbitmq.ErrNacked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("publish into a full queue: %v; want ErrNacked after its ctx ended", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var batchErr error
	b.PublishBatch(ctx, []broker.Message{msg}, func(_ int, err error) { batchErr = err })
	if !errors.Is(batchErr, rabbitmq.ErrNacked) || !errors.Is(batchErr, context.DeadlineExceeded) {
		t.Errorf("batch publish into a full queue: %v; want ErrNacked after its ctx ended", batchErr)
	}
	if _, err := ch.QueuePurge(q, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(t.Context(), msg); err != nil {
		t.Errorf("publish once there is room: %v", err)
	}
}

// A channel error is read for what it says of the publishes it ended: a
// queue a hold's check needed is gone (ErrNoQueue), or its node is down
// (ErrUnavailable), or the exchange a publish went to is gone (a delay
// level: its hold is gone); anything else is a refusal and no more.
func TestAChannelErrorSaysWhatIsGone(t *testing.T) {
	for _, c := range []struct {
		code   int
		reason string
		is     []error
		isNot  []error
	}{
		{404, "NOT_FOUND - no queue 'q' in vhost '/'", []error{broker.ErrNoQueue}, []error{broker.ErrUnavailable, rabbitmq.ErrNoExchange}},
		{404, "NOT_FOUND - queue 'q' in vhost '/' process is stopped by supervisor; home node 'rabbit@b' is down or inaccessible", []error{broker.ErrUnavailable}, []error{broker.ErrNoQueue, rabbitmq.ErrNoExchange}},
		{404, "NOT_FOUND - no exchange 'queuey.wait.21' in vhost '/'", []error{rabbitmq.ErrNoExchange}, []error{broker.ErrNoQueue, broker.ErrUnavailable}},
		{406, "PRECONDITION_FAILED - message size 200000000 is larger than configured max size 134217728", nil, []error{broker.ErrNoQueue, rabbitmq.ErrNoExchange}},
		{403, "ACCESS_REFUSED - access to exchange 'queuey.wait.21' in vhost '/' refused for user 'u'", nil, []error{broker.ErrNoQueue, rabbitmq.ErrNoExchange}},
	} {
		err := rabbitmq.Refusal(&amqp.Error{Code: c.code, Reason: c.reason})
		if !errors.Is(err, rabbitmq.ErrRefused) {
			t.Errorf("%d %s: %v; want ErrRefused", c.code, c.reason, err)
		}
		for _, want := range c.is {
			if !errors.Is(err, want) {
				t.Errorf("%d %s: %v; want it to be %v", c.code, c.reason, err, want)
			}
		}
		for _, not := range c.isNot {
			if errors.Is(err, not) {
				t.Errorf("%d %s: %v; want it not to be %v", c.code, c.reason, err, not)
			}
		}
	}
}
