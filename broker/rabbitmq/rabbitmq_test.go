package rabbitmq_test

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/brokertest"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// amqpURL is the broker the tests use: QUEUEY_AMQP_URL, or the local one.
func amqpURL() string {
	if u := os.Getenv("QUEUEY_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// dial connects, or fails the test saying how to get a broker.
func dial(t *testing.T, opts *rabbitmq.Options) *rabbitmq.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, amqpURL(), opts)
	if err != nil {
		t.Fatalf("these tests need RabbitMQ: %v\n"+
			"start a local one with `rabbitmq-server -detached && rabbitmqctl await_startup`, "+
			"or set QUEUEY_AMQP_URL to one that runs elsewhere", err)
	}
	return b
}

// deleteQueues removes what a test made, on a connection of its own.
func deleteQueues(t *testing.T, queues []string) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, _ = ch.QueueDelete(q, false, false, false) // a hold queue may have expired already
		_ = ch.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Config{
		New:     func(t *testing.T) broker.Backend { return dial(t, nil) },
		Cleanup: deleteQueues,
	})
}
