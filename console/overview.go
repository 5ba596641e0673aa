package console

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// queueRow is one queue of the Overview.
type queueRow struct {
	Name, BrokerName, Type                          string
	Ready, Unacked, Consumers, Held, Dead, Suspects int // -1: the broker cannot tell
	Paused                                          []pauseView
	Rate                                            string // jobs/s now, or "—"
	Done                                            string // settled by the workers heard, or "—"
	P50, P99                                        string
	Points                                          string // the chart's polyline
	Missing                                         bool   // the broker has no such queue
}

// overviewData is the Overview page.
type overviewData struct {
	Queues   []queueRow
	Limits   []string
	Requests int
	Fleet    fleetView
}

// look inspects the broker for the set's queues.
func (c *Console) look(q *request) (Snapshot, error) {
	var names []string
	for _, qu := range c.set.Queues {
		b := c.set.BrokerName(qu.Name)
		names = append(names, b, broker.DeadQueueName(b), broker.SuspectQueueName(b))
	}
	snap, err := c.inspector.Inspect(q.r.Context(), names)
	c.requests.Add(uint64(snap.Requests))
	return snap, err
}

func (c *Console) overview(q *request) error {
	snap, err := c.look(q)
	if err != nil {
		return err
	}
	fv := c.roster.view(q.r.Context())
	d := overviewData{Limits: snap.Limits, Requests: snap.Requests, Fleet: fv}
	for _, qu := range c.set.Queues {
		d.Queues = append(d.Queues, c.row(qu.Name, snap, fv))
	}
	return q.render(200, "overview", "Overview", d)
}

// row is the Overview's row of the queue named name.
func (c *Console) row(name string, snap Snapshot, fv fleetView) queueRow {
	b := c.set.BrokerName(name)
	f, ok := snap.Queues[b]
	r := queueRow{Name: name, BrokerName: b, Type: f.Type, Ready: f.Ready, Unacked: f.Unacked, Consumers: f.Consumers, Missing: !ok,
		Dead: readyOf(snap, broker.DeadQueueName(b)), Suspects: readyOf(snap, broker.SuspectQueueName(b)), Held: unknown}
	if !ok {
		r.Ready, r.Unacked, r.Consumers = unknown, unknown, unknown
	}
	if r.Type == "" {
		r.Type = "—"
	}
	if snap.Complete && r.Type != "quorum" {
		r.Held = 0
		for _, h := range holdsOf(b, snap) {
			r.Held += h.Count
		}
	}
	qf := fv.Queues[name]
	r.Paused, r.Rate, r.P50, r.P99, r.Done = qf.Paused, "—", "—", "—", "—"
	if fv.Listening {
		r.Done = fmt.Sprint(qf.Done)
	}
	if len(qf.Rates) > 0 {
		r.Rate = fmt.Sprintf("%.1f", qf.Rates[len(qf.Rates)-1])
		r.Points = points(qf.Rates)
	}
	if qf.Reported {
		r.P50, r.P99 = showDuration(qf.P50), showDuration(qf.P99)
	}
	return r
}

// readyOf is the ready count of the queue, or 0 for one the broker does
// not have (a dead-letter queue nothing was dead-lettered to is
// declared, a suspects queue only once needed) when the look was
// complete, else unknown.
func readyOf(snap Snapshot, name string) int {
	if f, ok := snap.Queues[name]; ok {
		return f.Ready
	}
	if snap.Complete || strings.HasSuffix(name, broker.DeadSuffix) {
		return 0
	}
	return unknown
}

// points draws rates as an SVG polyline 120 wide and 24 high.
func points(rates []float64) string {
	top := 1.0
	for _, v := range rates {
		top = max(top, v)
	}
	var b strings.Builder
	step := 120.0 / float64(max(1, len(rates)-1))
	for i, v := range rates {
		fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)*step, 24-22*v/top)
	}
	return strings.TrimSpace(b.String())
}

// holdView is one hold queue of a work queue.
type holdView struct {
	Name      string
	Delay     time.Duration
	Count     int
	OldestDue time.Time
}

// holdsOf lists the hold queues of the work queue b that the snapshot
// has, shortest delay first.
func holdsOf(b string, snap Snapshot) []holdView {
	var out []holdView
	for n, f := range snap.Queues {
		if q, ttl, ok := broker.ParseHoldQueueName(n); ok && q == b {
			out = append(out, holdView{Name: n, Delay: ttl, Count: f.Ready + max(0, f.Unacked), OldestDue: f.OldestDue})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Delay < out[j].Delay })
	return out
}
