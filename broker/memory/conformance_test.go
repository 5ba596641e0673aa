package memory_test

import (
	"testing"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/brokertest"
	"github.com/queuey-go/queuey/broker/memory"
)

// The memory backend on the real clock, inside synctest bubbles: its hold
// timers run in virtual time.
func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Config{
		New:    func(*testing.T) broker.Backend { return memory.New(nil) },
		Bubble: true,
	})
}

// The same on the quorum topology: a lane for the top priority, waits in
// whole seconds.
func TestConformanceQuorum(t *testing.T) {
	brokertest.Run(t, brokertest.Config{
		New:    func(*testing.T) broker.Backend { return memory.New(nil) },
		Bubble: true,
		Type:   broker.Quorum,
	})
}
