package queuey_test

import (
	"testing"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/internal/workertest"
)

// The worker-level suite on the memory backend, in virtual time; package
// broker/rabbitmq runs it on the real broker.
func TestWorkerSuite(t *testing.T) {
	workertest.Run(t, workertest.Config{
		New:    func(t *testing.T) broker.Backend { return memory.New(nil) },
		Bubble: true,
	})
}

// The same on the quorum topology.
func TestWorkerSuiteQuorum(t *testing.T) {
	workertest.Run(t, workertest.Config{
		New:    func(t *testing.T) broker.Backend { return memory.New(nil) },
		Bubble: true,
		Type:   queuey.Quorum,
	})
}
