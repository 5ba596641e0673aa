package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// A 29.2 s backoff waits in the 30 s hold queue of its work queue; a delay
// beyond what a hold queue can wait is refused rather than shortened.
func ExampleHoldTTL() {
	queue := broker.QueueName("myapp", "emails")

	ttl, err := broker.HoldTTL(29200*time.Millisecond, broker.DefaultGranularity)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ttl, broker.HoldQueueName(queue, ttl))
	fmt.Println(broker.HoldQueueArgs(queue, ttl))

	_, err = broker.HoldTTL(30*24*time.Hour, broker.DefaultGranularity)
	fmt.Println(errors.Is(err, broker.ErrDelayTooLong))
	fmt.Println(err)
	// Output:
	// 30s myapp.emails.deferred.30000
	// map[x-dead-letter-exchange: x-dead-letter-routing-key:myapp.emails x-expires:60000 x-message-ttl:30000]
	// true
	// delay of 720h0m0s is longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early
}

// A deferral costs no attempt and comes back at the queue's top priority for
// one round; the retry after it goes out at priority 0 and keeps the count.
func ExampleEnvelope_Deferred() {
	e := broker.Envelope{
		JobID:        "0f8fad5b-d9cb-469f-a165-70867728950e",
		JobType:      "send_email",
		Queue:        "myapp.emails",
		Attempt:      1,
		EnqueuedAtMs: 1700000000000,
		Payload:      json.RawMessage(`{"to":"ada@example.com"}`),
	}
	show := func(step string, e broker.Envelope) {
		fmt.Printf("%-9s attempt=%d deferrals=%d priority=%d\n", step, e.Attempt, e.Deferrals, e.Priority)
	}

	show("new", e)
	deferred := e.Deferred(10) // the queue's max priority
	show("deferred", deferred)
	retry := deferred.NextAttempt()
	show("retry", retry)

	body, err := deferred.Encode()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(body))
	// Output:
	// new       attempt=1 deferrals=0 priority=0
	// deferred  attempt=1 deferrals=1 priority=10
	// retry     attempt=2 deferrals=1 priority=0
	// {"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"send_email","queue":"myapp.emails","attempt":1,"enqueued_at_ms":1700000000000,"deferrals":1,"priority":10,"payload":{"to":"ada@example.com"}}
}
