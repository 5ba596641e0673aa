package main

import (
	"fmt"
	"io"
	stdlog "log"
	"time"

	"github.com/RichardKnop/machinery/v2"
	nullbackend "github.com/RichardKnop/machinery/v2/backends/null"
	amqpbroker "github.com/RichardKnop/machinery/v2/brokers/amqp"
	"github.com/RichardKnop/machinery/v2/config"
	eagerlock "github.com/RichardKnop/machinery/v2/locks/eager"
	mlog "github.com/RichardKnop/machinery/v2/log"
	"github.com/RichardKnop/machinery/v2/tasks"
)

// runMachinery: machinery v2 on the same RabbitMQ, a direct exchange and a
// durable queue of its own, the null result backend (nothing stored), an
// eager lock, a worker with concurrency handlers and prefetch.
func runMachinery(cfg benchConfig) (float64, error) {
	quiet := stdlog.New(io.Discard, "", 0)
	mlog.Set(quiet)
	queue := unique("machinery")
	cnf := &config.Config{
		Broker:        cfg.amqpURL,
		DefaultQueue:  queue,
		ResultBackend: "null",
		AMQP: &config.AMQPConfig{
			Exchange:      queue,
			ExchangeType:  "direct",
			BindingKey:    queue,
			PrefetchCount: cfg.concurrency,
		},
	}
	server := machinery.NewServer(cnf, amqpbroker.New(cnf), nullbackend.New(), eagerlock.New())
	c := newCounter(cfg.n)
	if err := server.RegisterTask("peer", func(string) error {
		c.hit()
		return nil
	}); err != nil {
		return 0, err
	}
	defer deleteMachinery(cfg.amqpURL, queue)
	worker := server.NewWorker("bench", cfg.concurrency)
	errs := make(chan error, 1)
	worker.LaunchAsync(errs)
	defer worker.Quit()
	start := time.Now()
	if err := enqueueAll(cfg.publishers, cfg.n, func() error {
		_, err := server.SendTask(&tasks.Signature{Name: "peer", Args: []tasks.Arg{{Type: "string", Value: pad}}})
		return err
	}); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	select {
	case err := <-errs:
		return 0, fmt.Errorf("worker: %w", err)
	default:
	}
	if err := c.wait(5 * time.Minute); err != nil {
		return 0, err
	}
	return c.rate(start), nil
}

func deleteMachinery(url, queue string) {
	deleteQueues(url, queue)
	conn, err := amqpDial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_ = ch.ExchangeDelete(queue, false, false)
		_ = ch.Close()
	}
}
