package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// quietLogger drops asynq's log lines.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// runAsynq: asynq on the local Redis, a queue of its own, a server with
// concurrency handlers; Enqueue returns once Redis has the task.
func runAsynq(cfg benchConfig) (float64, error) {
	redis := asynq.RedisClientOpt{Addr: cfg.redisAddr}
	queue := unique("asynq")
	client := asynq.NewClient(redis)
	defer client.Close()
	inspector := asynq.NewInspector(redis)
	defer inspector.Close()
	defer func() { _ = inspector.DeleteQueue(queue, true) }()

	c := newCounter(cfg.n)
	mux := asynq.NewServeMux()
	mux.HandleFunc("peer", func(context.Context, *asynq.Task) error {
		c.hit()
		return nil
	})
	srv := asynq.NewServer(redis, asynq.Config{
		Concurrency: cfg.concurrency,
		Queues:      map[string]int{queue: 1},
		Logger:      quietLogger{},
		LogLevel:    asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		return 0, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	payload, _ := json.Marshal(map[string]string{"pad": pad})
	start := time.Now()
	if err := enqueueAll(cfg.publishers, cfg.n, func() error {
		_, err := client.Enqueue(asynq.NewTask("peer", payload), asynq.Queue(queue))
		return err
	}); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	if err := c.wait(5 * time.Minute); err != nil {
		return 0, err
	}
	return c.rate(start), nil
}
