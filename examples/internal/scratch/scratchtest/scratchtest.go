// Package scratchtest checks, in the examples' tests, that a run on
// RabbitMQ left none of its queues behind.
package scratchtest

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// NeedsBroker is added to a failure: without a broker a test fails, rather
// than skipping, and says how to get one.
const NeedsBroker = "this test needs RabbitMQ: start a local one with " +
	"`rabbitmq-server -detached && rabbitmqctl await_startup`, or set QUEUEY_AMQP_URL to one that runs elsewhere"

// AssertGone checks that none of queues exists: a passive declare of each,
// on a connection of the test's own, must fail with 404 NOT_FOUND.
func AssertGone(t *testing.T, rawURL string, queues []string) {
	t.Helper()
	if len(queues) == 0 {
		t.Fatal("no queues to check")
	}
	conn, err := amqp.Dial(rawURL)
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, NeedsBroker)
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatalf("channel: %v", err)
		}
		_, err = ch.QueueDeclarePassive(q, false, false, false, false, nil)
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
			t.Errorf("queue %s: passive declare = %v, want 404 NOT_FOUND: the queue was not deleted", q, err)
		}
		_ = ch.Close() // after a 404 the broker has closed it already
	}
}
