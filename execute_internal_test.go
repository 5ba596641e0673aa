package queuey

import (
	"testing"
	"time"
)

// giveBackTasks empties the pool's buffer and returns, even if the channel
// was closed: a closed channel is not a task.
func TestGiveBackTasksReturnsOnAClosedPool(t *testing.T) {
	pool := make(chan task, 4)
	close(pool)
	done := make(chan struct{})
	go func() {
		defer close(done)
		giveBackTasks(pool)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("giveBackTasks(closed pool) has not returned after 2s: blocked on a nil reports channel")
	}
}
