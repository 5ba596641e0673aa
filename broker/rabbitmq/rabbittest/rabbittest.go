// Package rabbittest is what tests against a real RabbitMQ share: the
// broker's URL, a dial that says how to get a broker when there is none,
// and the deletion of the queues a test made.
package rabbittest

import (
	"cmp"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// NeedsBroker is added to a failure to reach the broker: without one the
// tests fail, rather than skip, and say how to get one.
const NeedsBroker = "these tests need RabbitMQ: start a local one with " +
	"`rabbitmq-server -detached && rabbitmqctl await_startup`, or set QUEUEY_AMQP_URL to one that runs elsewhere"

// URL is the broker the tests use: QUEUEY_AMQP_URL, or the local one.
func URL() string {
	return cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}

// Dial connects a backend to URL within 10 s, or fails the test.
func Dial(t testing.TB, opts *rabbitmq.Options) *rabbitmq.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, URL(), opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, NeedsBroker)
	}
	return b
}

// DeleteQueues deletes queues, whatever they hold, on a connection of its
// own. A queue already gone (a hold queue expires by itself) is fine; any
// other failure is reported on t.
func DeleteQueues(t testing.TB, queues ...string) {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel() // a failed delete closes its channel
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, err = ch.QueueDelete(q, false, false, false)
		var ae *amqp.Error
		if err != nil && !(errors.As(err, &ae) && ae.Code == amqp.NotFound) {
			t.Errorf("cleanup: delete %s: %v", q, err)
		}
		_ = ch.Close()
	}
}
