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
// A Harness belongs to the test goroutine that made it and is not safe for
// concurrent use, except its RunLog. Run stops the worker and closes the
// backend when the test function returns.
package clocktest
