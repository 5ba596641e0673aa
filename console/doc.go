// Package console is the operator's console of a queuey queue set: an
// http.Handler, to mount under any path, with pages for the queues'
// depths, what waits in their hold queues, their dead letters (shown,
// replayed and deleted), the fleet's workers and schedules, and actions
// to pause and resume a queue across the fleet and to cancel a job by its
// id.
//
// New builds a Console; it serves pages at once. Run listens to the
// workers' heartbeats (package fleet) through the broker, for the Workers
// and Schedules pages and the Overview's throughput, and must be running
// for them; it returns when its ctx ends. A Console is safe for
// concurrent use; the caller closes the backend.
//
// Every page renders without JavaScript; a small script refreshes its
// live part every few seconds. Every request passes Options.Authorize;
// every request that changes something carries a CSRF token, and none is
// accepted while Options.ReadOnly is set.
package console
