// Package trace follows queuey jobs in OpenTelemetry, after the messaging
// semantic conventions (semconv v1.43.0): a PRODUCER span per publish, a
// CONSUMER span per delivery, the trace context carried in the message
// headers, and metrics for outcomes, handler durations and lateness.
//
// It plugs into the core's hooks and owns nothing else; the core does not
// import OpenTelemetry. Give the same hooks to producers and workers:
//
//	inst, err := trace.New(nil) // the global providers
//	producer, err := queuey.NewProducer(ctx, backend, set, &queuey.ProducerConfig{Hooks: inst.Hooks()})
//	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Hooks: inst.Hooks()})
//
// # Spans
//
// Every publish, the producer's (Enqueue, EnqueueAfter, Defer) and the
// worker's (a retry, a deferral, a dead letter, the copy that replaces a
// redelivered job under WorkerConfig.PoisonAfter), is a PRODUCER span named
// "send <destination>", a child of the publishing ctx. Its destination is
// the work queue the job is for, also for a wait in a hold queue; a dead
// letter's is "<q>.dead". The span's context and the ctx's baggage go into
// the message headers (W3C traceparent and baggage by default), which both
// backends carry: RabbitMQ keeps them through the hold queue's
// dead-lettering back to the work queue.
//
// Every delivery a worker takes up is a CONSUMER span named
// "process <queue>". Its parent is the span that published the delivery,
// read back from the headers, and it carries a link to that span as well.
// A delivery without a trace context (a Rust producer, an uninstrumented
// one) starts a new trace: a span on the ctx given to Worker.Run never
// becomes the parent of jobs. The handler, and the worker's republishes of
// this delivery, run under the process span and the extracted baggage.
//
// So one job's life is one trace, a chain:
//
//	send q       (enqueue, under the caller's span)
//	process q    run 1: deferred
//	send q       (deferral, child of run 1)
//	process q    run 2: retried
//	send q       (retry, child of run 2)
//	process q    run 3: succeeded
//
// # Why the process span is a child, not only a link
//
// The conventions recommend linking a process span to the message's
// creation context, and allow making it the parent when one message is
// processed at a time, which is always the case here. A queuey job is one
// message at a time from enqueue to its last run, so parenting gives what
// people ask of a job trace: the waterfall of every run in one trace, and
// for a deferred job's second run, a parent chain back through the deferral
// to its first run and to the request that enqueued it. Trace UIs render
// parent-child natively and links, if at all, as a side note. The link is
// added anyway so that tools that follow the conventions' link-based model
// find the creation context where they look for it.
//
// The cost is long traces: a job deferred for a day makes a trace a day
// long, and a tail sampler, or a backend that closes traces after a while,
// may cut it. Every span of a job carries messaging.message.id (the job id,
// stable across runs), so a query by it finds every run whatever happened
// to the trace.
//
// # Attributes and events
//
// Both kinds of span carry messaging.system ("memory" or "rabbitmq"),
// messaging.operation.type and messaging.operation.name ("send" or
// "process"), messaging.destination.name, and for a job (not for a body
// that is not an envelope) messaging.message.id, queuey.job.kind,
// queuey.job.attempt, queuey.job.deferrals, queuey.job.priority, and
// messaging.message.conversation_id when the job has a correlation id.
// Send spans add queuey.publish.op (enqueue, enqueue_after, defer, retry,
// deferral, unhandled, schedule (a tick of a queuey.Schedule, the root of
// its job's trace), dead_letter, redelivery), queuey.delay_ms for a wait (whole
// milliseconds, as asked, before rounding to the granularity) and
// queuey.dead_letter.reason for a dead letter. Process spans add
// queuey.job.redelivered and, when the delivery is settled,
// queuey.outcome: succeeded, retried, deferred, unhandled (held back for
// want of a handler, queuey.WorkerConfig.UnknownKindWait), dead_lettered
// or requeued.
//
// A span is given at its start the attributes the conventions list for
// sampling decisions (messaging.system, the operation's type and name, the
// destination), so that a sampler sees them. The others are set only when
// the sampler chose to record the span, in one call: a send span's right
// after its start, a process span's when its delivery is settled. The
// process span's link is added right after its start, when it records (the
// linked span is also its parent, which the sampler sees). A span that is
// not recorded costs little more than the propagation of its context.
//
// A delivery given back unsettled (a worker stopped or crashed) comes
// back with the same headers, so its next process span is a sibling of the
// interrupted one, under the same send. A dead letter replayed with
// queuey.DeadLetters starts again under the ctx of the replay; its old
// trace is still found by messaging.message.id.
//
// Process span events: "deferred" (queuey.delay_ms, queuey.reason),
// "unhandled" (queuey.delay_ms, queuey.reason),
// "queue_paused" (queuey.paused_until, after queuey.PauseQueue),
// "retry_scheduled" (queuey.delay_ms, queuey.next_attempt), "dead_lettered"
// (queuey.reason), "timed_out", "panicked" (nothing more: the panic value
// and the stack stay in the worker's log), and "settle_failed"
// (queuey.error). A retry, a dead letter and a failed settlement set the
// span's status to Error and error.type to timeout, panic, fatal,
// settle_failed, the error's Go type, or _OTHER; a deferral is not an
// error. A publish that fails ends its send span in Error.
//
// Span timestamps come from the tracer (the wall clock); the worker's
// injected clock is used only for lateness.
//
// # Metrics
//
// The meter is named ScopeName. Queue-level metrics carry
// messaging.destination.name (the work queue's broker name).
//
//	queuey.jobs               counter     {job}  deliveries taken up, by queuey.outcome
//	queuey.handler.duration   histogram   s      handler run time, by queuey.job.kind
//	queuey.job.lateness       histogram   s      how long after it was due a delivery was taken up
//	queuey.jobs.held          up-down     {job}  jobs waiting in hold queues (see below)
//	queuey.jobs.in_flight     up-down     {job}  deliveries taken up, not yet settled
//	queuey.settle.failures    counter     {job}  outcomes the broker could not be told
//
// The four counts are kept per queue by the instrumentation, in atomic
// counters, and observed at each collection (asynchronous instruments): an
// SDK measurement costs a few hundred nanoseconds, an atomic add a few, and
// the counts would take three measurements per job. They carry no
// exemplars; the two histograms do. A queue's held, in-flight and settle
// failure counts are reported from its first job on, and each outcome's
// count from its first occurrence.
//
// Lateness is Started - DueAt of the delivery, clamped at zero, on the
// worker's clock; it is not recorded when the due time is unknown (a job
// back from a hold queue that a Rust producer published). A job is due at
// its enqueue, at the end of its wait, or at its replay, so a deferred job
// that starts the moment its hold ends is 0 late.
//
// The handler duration is recorded when the core reports a positive one,
// so dead letters that never reached a handler are left out; so, under a
// mock clock, is a handler that took no virtual time.
//
// The held count follows a rule simple enough to check: +1 when an
// instrumented process publishes into a hold queue (every op but enqueue and
// dead_letter) and the broker confirms it; such a message carries the header
// HeaderHeld. −1 when an instrumented worker takes up a delivery that
// carries it, and +1 again if that delivery is given back unsettled
// (requeued), since it will be taken up again; the copy that replaces a
// redelivered job keeps the header for the same reason. Summed over every
// instrumented process, it counts jobs held or released but not yet taken
// up. Holds published by uninstrumented processes are not counted; one
// released to an uninstrumented worker is never counted down, and one whose
// worker crashed after taking it up is counted down twice (the broker
// redelivers it). Each process's own series is not a level on its own (a
// producer's only rises, a worker's falls below zero), and a process that
// restarts leaves the sum off by what it had counted: read it as a sum
// over a fleet whose processes are up, or as the flow of its increase.
//
// A handler that a stopping worker abandons (it ignored its cancelled ctx;
// Worker.Run returns queuey.ErrHandlersStillRunning) ends its span and
// leaves in_flight only if it ever returns.
//
// # Queue depths
//
// ObserveDepths adds gauges of what the broker itself holds for each
// queue of a set, read at each collection (package inspect reads them):
//
//	queuey.queue.ready      gauge  {message}  on the work queue, waiting for a consumer
//	queuey.queue.unacked    gauge  {message}  held by consumers, not yet settled
//	queuey.queue.held       gauge  {message}  in the queue's hold queues
//	queuey.queue.dead       gauge  {message}  in its dead-letter queue
//	queuey.queue.suspects   gauge  {message}  in its suspects queue (WorkerConfig.PoisonAfter)
//
// They carry messaging.destination.name, as the job metrics do. Where the
// jobs.held count above is what instrumented processes saw, these are the
// broker's word, whoever published. A count the broker cannot tell is
// not reported: on RabbitMQ without its management API, unacked and held;
// for a quorum queue, held (its waits are in delay levels that every
// quorum queue shares). One collection is one look at the broker for the
// five gauges: nothing on the memory backend; on RabbitMQ one management
// API request, or without it three passive declares a queue.
//
// # Concurrency and lifetime
//
// An Instrumentation's settings are fixed once New returns, and everything
// it does is safe for concurrent use: its hooks are called from every handler
// goroutine of every worker and producer that share it. It starts no
// goroutine and holds nothing to close; shut the providers down as usual
// (the meter provider keeps the in-flight callback until then).
//
// # Cost
//
// BenchmarkInstrumentation measures what the instrumentation costs a
// pipeline on the memory backend, against the same pipeline without it,
// on an SDK tracer provider with a batch span processor; BenchmarkHooks
// measures the hooks alone. Almost all of the cost is the SDK's: starting,
// ending and batching a sampled span, and each histogram and counter
// measurement. The hooks allocate little of their own: the func they
// return (per delivery, and per publish that is recorded or held) and a
// recorded span's attribute list. Span names, span start options and
// metric attribute sets are made once per queue, and a span's other
// attributes are set in one call. Sampling is what makes tracing cheap:
// with a ratio-based sampler most jobs pay only for the propagation of
// their context and their metrics.
package trace
