package fleet

import (
	"math"
	"slices"
	"time"
)

// heartbeat is the worker as it is now.
func (s *agentState) heartbeat() Heartbeat {
	a := s.a
	h := Heartbeat{ID: a.id, Host: a.host, PID: pid(), Version: a.opts.Version, Started: a.started, Sent: a.opts.Clock.Now(),
		IntervalMs: a.opts.Interval.Milliseconds(), Concurrency: s.w.Concurrency()}
	paused := s.w.Paused()
	for _, q := range a.opts.Queues {
		r := QueueReport{Name: q, InFlight: s.w.InFlight(q), Done: a.done[q].Load()}
		if until, ok := paused[q]; ok {
			r.PausedUntil, r.PausedBy = until, "handler"
			if ours, ok := s.ours[q]; ok && ours.Equal(until) {
				r.PausedBy = "console"
			}
		}
		if l := s.late[q]; len(l) > 0 {
			slices.Sort(l)
			r.Late, r.P50Ms, r.P99Ms = true, quantile(l, 0.50).Milliseconds(), quantile(l, 0.99).Milliseconds()
		}
		h.Queues = append(h.Queues, r)
	}
	clear(s.late)
	h.Schedules = scheduleReports(a.opts.Schedules, s.w.Schedules(), h.Sent)
	return h
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[max(0, int(math.Ceil(q*float64(len(sorted))))-1)]
}
