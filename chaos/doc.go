// Package chaos is queuey's fault-injection suite against a real, local
// RabbitMQ: it breaks things on purpose (the broker killed, stopped,
// frozen; connections closed or half-open; worker processes SIGKILLed,
// SIGTERMed or crashed by their own job; queues deleted; resource alarms;
// a low consumer_timeout; malformed, oversized and forged messages) and
// scores every run. RELIABILITY.md at the repository root has the results.
//
// # How a run is made
//
// Workers are separate processes (cmd/chaosworker, built once per test
// binary, with -race when the tests have it), so a kill is a real kill.
// Each worker appends a record per event to a ledger file, one JSON line
// per write(2) with O_APPEND, which survives a SIGKILL: "start" (job,
// attempt, redelivered, time) when a handler starts, "done" (its error)
// when it returns, "settled" (what the broker was told, from
// Hooks.Deliver) after the ack or republish, and "exit" (goroutine counts)
// after a graceful stop. The test process is the producer: it records every
// job it attempted, whether Enqueue returned nil, and when the job may run
// at the earliest. A job is known by its sequence number, carried in its
// payload, so that a job whose Enqueue failed can still be recognised if it
// runs. Each fault the test injects is recorded as a time window.
//
// # The score
//
// One line per fault, in a fixed format:
//
//		fault=<name> attempted=N confirmed=N ok=N lost=N dup_explained=N dup_unexplained=N early=N leaks=N pass=true
//
//	  - attempted: jobs the producers tried to enqueue.
//	  - confirmed: jobs whose Enqueue (or EnqueueAfter) returned nil: the
//	    broker confirmed them.
//	  - ok: jobs that ran to success (a handler returned nil), or, for a job
//	    meant to end there (a poison job, one that always fails), that are in
//	    the dead letters with a reason.
//	  - lost: confirmed jobs that are not ok. Must be 0.
//	  - dup_explained / dup_unexplained: extra runs of the same job and
//	    attempt. A rerun is explained when the run before it was in flight
//	    (started, not yet settled) during a fault window, widened by 500 ms
//	    for an ack on its way; otherwise it is unexplained and must be 0.
//	    Duplicates are the at-least-once contract at work, within the window
//	    the contract allows.
//	  - early: a first run that started before its due time (the Enqueue call
//	    plus the delay asked for), or a retry that started less than the
//	    backoff after the failure that scheduled it. Must be 0.
//	  - leaks: goroutines a worker kept after Run returned and its backend was
//	    closed; goroutines of the test process over its baseline once its
//	    backends are closed; connections and channels of the run still open
//	    on the broker; queues of the run that could not be deleted; channels
//	    per connection above the library's bound after a reconnect. Must be 0.
//	  - pass: lost = dup_unexplained = early = leaks = 0, no job ran that
//	    nobody enqueued, and every check of the test's own held (bounds such
//	    as "at most the prefetch duplicated per kill", "Enqueue returned
//	    within its deadline", "no 'unknown delivery tag' in the broker log").
//
// A second line, "figures <name>: ...", gives the measurements behind the
// verdict: reconnect and detection times, duplicates per fault, lateness,
// drain time, and so on.
//
// # Running it
//
// Every test is named TestFault* and skips unless QUEUEY_FAULTS=1, because
// the faults disturb the shared broker. That is the short set (a few
// minutes, no broker restart):
//
//	QUEUEY_FAULTS=1 go test -race -count=1 -run '^TestFault' ./chaos/
//
// QUEUEY_CHAOS=full adds the long ones (broker kill -9 and stop_app, a
// frozen broker, consumer_timeout, the 3-minute soak); make faults runs
// them all, with the fault tests of broker/rabbitmq. QUEUEY_CHAOS_SCORES=file writes the score lines to file;
// QUEUEY_CHAOS_KEEP=dir keeps each run's ledgers and worker logs there.
// The tests put the broker back as they found it (start_app, a restart
// after kill -9, SIGCONT, the alarms' previous limits, consumer_timeout)
// even when they fail, and delete every queue and user they made.
package chaos
