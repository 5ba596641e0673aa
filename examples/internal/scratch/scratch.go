// Package scratch gives the examples' runs on RabbitMQ queues of their own,
// on a broker other runs and tests share, and deletes them afterwards.
package scratch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Prefix is name and a short random suffix, so that runs (and tests)
// sharing a broker never share a queue.
func Prefix(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails
	return name + "-" + hex.EncodeToString(b)
}

// DeleteQueues deletes queues whatever they hold. A queue that is gone
// already (a hold queue expires by itself) is not an error to RabbitMQ.
func DeleteQueues(conn *amqp.Connection, queues []string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", q, err)
		}
	}
	return nil
}
