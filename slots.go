package queuey

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// handlerSlots caps the handlers running at once across a worker's queues
// (WorkerConfig.Concurrency). Each queue actor runs a pool of
// min(prefetch, concurrency) handler goroutines; when the pools together
// are no larger than the cap, as with the default concurrency (the sum of
// the prefetches), the cap holds by itself, and newHandlerSlots returns
// nil: taking and returning a slot per job would only make the handlers of
// different cores contend for one lock.
type handlerSlots struct{ sem *semaphore.Weighted }

func newHandlerSlots(concurrency int, queues []*queueConfig) *handlerSlots {
	pools := 0
	for _, q := range queues {
		pools += min(q.prefetch, concurrency)
	}
	if pools <= concurrency {
		return nil
	}
	return &handlerSlots{sem: semaphore.NewWeighted(int64(concurrency))}
}

// acquire waits for a slot, or fails with ctx's error; without a cap to
// enforce, it fails only when ctx is done.
func (s *handlerSlots) acquire(ctx context.Context) error {
	if s == nil {
		return ctx.Err()
	}
	return s.sem.Acquire(ctx, 1)
}

// release returns a slot acquire took.
func (s *handlerSlots) release() {
	if s != nil {
		s.sem.Release(1)
	}
}
