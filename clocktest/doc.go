// Package clocktest runs queuey in virtual time: a mock clock
// (github.com/benbjohnson/clock), the memory backend, a producer, a worker
// and a log of every handler run, inside a testing/synctest bubble.
//
// The bubble is what makes the harness exact. Advance(d) moves the mock
// clock forward one timer at a time, and after each timer the bubble runs
// until every goroutine of the system is blocked again, so a job released
// at 30 s has run, and scheduled whatever it schedules, before the clock
// moves on. No test waits on wall time: 30 simulated days of deferrals and
// retries take milliseconds.
//
//	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
//		queuey.Handle(h.Worker, callAPI)
//		id, _ := h.Producer.Defer(t.Context(), CallAPI{}, 30*time.Second)
//		h.Advance(29 * time.Second) // held: nothing ran
//		h.Advance(time.Second)      // ran once, at priority 10
//		runs := h.Log.Of(id)
//	})
//
// The run log sees runs; an Outcomes (give its Hooks to
// Options.Worker.Hooks) sees what each delivery came to, so a test can
// say that a job deferred, then was cancelled without running again:
//
//	var seen clocktest.Outcomes
//	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
//	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
//		...
//		got := seen.Of(id) // [deferred cancelled]
//	})
//
// # Handlers that call HTTP APIs
//
// "Blocked" means blocked where the bubble can see it: on a channel, a
// timer, a mutex of the bubble. A goroutine waiting on a real network
// connection, a file or a syscall is not, and the harness would wait for
// it forever. An httptest.NewServer is such a connection, and so is every
// connection an http.Client keeps alive after a call. Serve the API with
// Harness.NewHTTPServer instead: the same URL and Client as an
// httptest.Server, on in-memory connections inside the bubble, closed when
// the test ends.
//
//	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
//		api := h.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//			w.Header().Set("Retry-After", "86400")
//			w.WriteHeader(http.StatusTooManyRequests)
//		}))
//		queuey.Handle(h.Worker, charger{client: api.Client(), url: api.URL}.handle)
//		h.Producer.Enqueue(t.Context(), Charge{})
//		h.Advance(24 * time.Hour) // ran at 0 and at 24 h, deferred a day each time
//	})
//
// Should a goroutine of the bubble block on real I/O anyway, Run's
// watchdog notices that the harness has waited Options.Watchdog (5 s) of
// real time for idleness and ends the test process with a message that
// names the likely cause, what to do, and the stacks of the goroutines
// blocked outside the bubble's sight, rather than let the test hang until
// go test's -timeout.
//
// # Seeds
//
// Every random choice of the worker (the jitter of retry and republish
// backoffs, and of restarts) comes from a source the harness seeds
// (Options.Seed, WorkerConfig.Rand). A test that fails logs its seed:
//
//	clocktest: seed 8815310398717351923; rerun with QUEUEY_SEED=8815310398717351923
//
// and QUEUEY_SEED=8815310398717351923 go test -run TestThat replays the
// same choices. A test that asserts times that depend on jitter sets
// Options.Seed. A seed fixes every run time when one job runs at a time:
// Concurrency 1 (the harness's default) and one queue; with more, each
// source still gives the same sequence, but which job gets which draw
// follows the order in which the scheduler runs them. Job ids are random
// whatever the seed.
//
// A Harness belongs to the test goroutine that made it and is not safe for
// concurrent use, except its RunLog. Run stops the worker and closes the
// backend when the test function returns.
package clocktest
