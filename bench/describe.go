package main

import (
	"fmt"
	"strconv"
	"strings"
)

// scenarioDoc is what BENCHMARKS.md says of a scenario above its table:
// a title, and what it measures and against what, in a few sentences
// with this run's parameters.
type scenarioDoc struct {
	title    string
	describe func(config) string
}

// scenarioDocs are the scenarios' docs, by number.
var scenarioDocs = map[int]scenarioDoc{
	1: {"RabbitMQ end to end", func(c config) string {
		return fmt.Sprintf("%d goroutines call `Producer.Enqueue` (each waits for its confirm) for %d jobs of 256 bytes "+
			"while a worker (prefetch %d, as many handlers, a trivial handler) consumes them; jobs/s is first publish "+
			"to last handle, latency publish to handle; CPU per job is the broker's (every beam.smp, from /proc) and "+
			"this process's over the same span. Baseline: plain amqp091-go on the same broker, one goroutine "+
			"publishing persistent, mandatory messages through a window of %d confirms and one consumer with the "+
			"same prefetch and manual acks, on a queue declared with the library's arguments. The raw publisher "+
			"outruns its consumer and builds a backlog, hence its higher latencies.",
			c.publishers, c.n, c.prefetch, c.window)
	}},
	2: {"Producer alone", func(c config) string {
		return fmt.Sprintf("Confirmed publishes/s with no consumer: `Enqueue` from %d goroutines, one `EnqueueBatch` "+
			"of all %d jobs from one caller, and one `Enqueue` at a time (%d publishes). Baseline: one goroutine of "+
			"plain amqp091-go keeping %d publishes in flight (the raw window), or one.",
			c.callers, c.n, c.serialN, c.window)
	}},
	3: {"Paced", func(c config) string {
		return fmt.Sprintf("%d jobs/s for %v on a schedule (a late tick is sent at once, never skipped); queuey "+
			"hands each job to a pool of %d `Enqueue` callers. Baseline: plain amqp091-go publishing from the "+
			"pacing goroutine through its confirm window. Latency is stamped when the pacer emits the job.",
			c.pacedRate, c.pacedFor, c.publishers)
	}},
	4: {"Deferral", func(c config) string {
		return fmt.Sprintf("A %d-job backlog (priority 0, 5 ms a job) waits on the queue; then %d goroutines call "+
			"`Producer.Defer(job, 1 s)` %d times. Lateness is the handler's start less the due time stamped on the "+
			"held message (publish + the rounded hold); \"ahead\" means every deferred job ran at priority 10 while "+
			"backlog jobs still waited. Baseline: the broker's own TTL expiry of the same burst, published by plain "+
			"amqp091-go into a 1 s hold queue declared as queuey's.",
			c.backlog, c.publishers, c.deferred)
	}},
	5: {"Memory backend end to end", func(c config) string {
		return fmt.Sprintf("The memory backend, queue prefetch %d, worker concurrency 1, 2 and 8, %d enqueuing "+
			"goroutines, %d jobs; allocations per job from runtime.MemStats over the run. Baseline: the same job "+
			"structs sent on a channel (buffer %d) to as many goroutines running a trivial handler.",
			c.memPrefetch, c.memProducers, c.memN, c.memPrefetch)
	}},
	6: {"Time travel", func(c config) string {
		return fmt.Sprintf("%d jobs on the memory backend and a `clock.Mock`: each is deferred 5 days, defers twice, "+
			"fails (retry in 5 days), defers again, fails again and succeeds on attempt 3 at day 30, six runs a job. "+
			"The wall time includes the first `Defer` calls. No baseline.", c.travelJobs)
	}},
	7: {"Scale", func(c config) string {
		return fmt.Sprintf("Memory backend, concurrency 8, %d jobs spread over 1, 10 and 100 queues (a queue actor "+
			"each), against one queue; then with 10k and 100k jobs held (deferred an hour on a mock clock that does "+
			"not move), against none held: the cost of a `Defer`, the live heap per held job, and the time to land "+
			"all of them when the clock moves (the mock's 1 ms sleep included).", c.memN)
	}},
	8: {"Settling", func(c config) string {
		return fmt.Sprintf("%d jobs wait on the queue, then one worker (prefetch %s, a run set each) settles their first runs: jobs "+
			"that succeed, defer once or fail once and retry (each wait %v): what the hold actor's publishes cost. "+
			"Baseline: the jobs that succeed; and plain amqp091-go doing the same work (consume, publish into a hold "+
			"queue, confirm, an ack each) against consume and ack, the broker's ceiling. The CPU rows: the broker's and this "+
			"process's CPU time per job while the jobs settle. Every run is timed from its first delivery.", c.settleN, joinInts(c.settlePrefetch), settleWait)
	}},
	10: {"Scale on RabbitMQ", func(c config) string {
		return fmt.Sprintf("One worker (concurrency %d, prefetch %d a queue) of 1 queue, then of %d, on RabbitMQ, in the same run. "+
			"NewProducer declares the queues and their dead-letter queues; then, from Run (which declares them again, "+
			"and consumes each on a channel of its own, the channels spread over as many consume connections as the "+
			"broker's channel_max requires), one job enqueued on every queue, until each has run; then what the "+
			"process holds per queue (live heap after a GC, goroutines) and the broker's resident memory per queue "+
			"(beam.smp, from /proc); then %d jobs spread over the queues in one `EnqueueBatch` (256 confirms in flight) "+
			"while the worker runs them, first publish to last run, against the one queue, and the batch's own rate: "+
			"the broker confirms a persistent message once its queue has written it, a queue at a time. No goal.",
			c.prefetch, c.prefetch, c.scaleQueues, c.n)
	}},
	9: {"Quorum queues", func(c config) string {
		return fmt.Sprintf("Scenario 1's queuey run (%d jobs) on quorum queues on a three-node cluster (`-cluster`; "+
			"`make cluster` starts one on this host) against classic queues on the one broker, in turn each round: "+
			"what replication costs. No goal.", c.n)
	}},
}

// joinInts is ns as "10 and 32".
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
