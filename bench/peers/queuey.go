package main

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

type peerJob struct {
	Pad string `json:"pad"`
}

func (peerJob) Kind() string        { return "peer" }
func (peerJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// deleteQueues removes queues, each on a channel of its own.
func deleteQueues(url string, names ...string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}

func runQueuey(cfg benchConfig) (float64, error) {
	ctx := context.Background()
	discard := slog.New(slog.DiscardHandler)
	be, err := rabbitmq.Dial(ctx, cfg.amqpURL, &rabbitmq.Options{Logger: discard})
	if err != nil {
		return 0, err
	}
	defer be.Close()
	prefix := unique("queuey")
	queue := broker.QueueName(prefix, "work")
	defer deleteQueues(cfg.amqpURL, queue, broker.DeadQueueName(queue),
		broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix)) // the worker's ledger of cancellations
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: cfg.concurrency}}}
	producer, err := queuey.NewProducer(ctx, be, set, &queuey.ProducerConfig{Logger: discard})
	if err != nil {
		return 0, err
	}
	worker, err := queuey.NewWorker(be, set, &queuey.WorkerConfig{Concurrency: cfg.concurrency, Logger: discard})
	if err != nil {
		return 0, err
	}
	c := newCounter(cfg.n)
	if err := queuey.Handle(worker, func(context.Context, peerJob, queuey.JobContext) error {
		c.hit()
		return nil
	}); err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	start := time.Now()
	if err := enqueueAll(cfg.publishers, cfg.n, func() error {
		_, err := producer.Enqueue(ctx, peerJob{Pad: pad})
		return err
	}); err != nil {
		return 0, err
	}
	if err := c.wait(5 * time.Minute); err != nil {
		return 0, err
	}
	return c.rate(start), nil
}

var amqpDial = amqp.Dial
