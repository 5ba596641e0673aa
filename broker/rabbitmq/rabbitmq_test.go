package rabbitmq_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/brokertest"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

func TestMain(m *testing.M) {
	if prefix := os.Getenv(childEnv); prefix != "" {
		os.Exit(runChild(prefix)) // a worker process to kill (keys_test.go)
	}
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Config{
		New:     func(t *testing.T) broker.Backend { return rabbittest.Dial(t, nil) },
		Cleanup: func(t *testing.T, queues []string) { rabbittest.DeleteQueues(t, queues...) },
	})
}

// The same on the quorum topology, on the one broker: work queues, their
// dead-letter queues and lanes as quorum queues, waits in the delay levels.
func TestConformanceQuorum(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Config{
		New:     func(t *testing.T) broker.Backend { return rabbittest.Dial(t, nil) },
		Cleanup: func(t *testing.T, queues []string) { rabbittest.DeleteQueues(t, queues...) },
		Type:    broker.Quorum,
	})
}
