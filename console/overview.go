package console

import (
	"fmt"
	"strings"

	"github.com/queuey-go/queuey/inspect"
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
	// CanCancel: the backend keeps a ledger of cancellations, and the
	// page offers to cancel a job.
	CanCancel bool
}

// look inspects the broker for the set's queues.
func (c *Console) look(q *request) (inspect.Snapshot, error) {
	snap, err := c.inspector.Inspect(q.r.Context(), inspect.Names(c.set))
	c.requests.Add(uint64(snap.Requests))
	return snap, err
}

func (c *Console) overview(q *request) error {
	snap, err := c.look(q)
	if err != nil {
		return err
	}
	fv := c.roster.view(q.r.Context())
	d := overviewData{Limits: snap.Limits, Requests: snap.Requests, Fleet: fv, CanCancel: c.canCancel()}
	for _, depth := range snap.Depths(c.set) {
		d.Queues = append(d.Queues, row(depth, fv))
	}
	return q.render(200, "overview", "Overview", d)
}

// row is the Overview's row of a queue of the given depth.
func row(depth inspect.Depth, fv fleetView) queueRow {
	r := queueRow{Name: depth.Queue, BrokerName: depth.BrokerName, Type: depth.Type, Ready: depth.Ready, Unacked: depth.Unacked, Consumers: depth.Consumers,
		Missing: depth.Missing, Dead: depth.Dead, Suspects: depth.Suspects, Held: depth.Held}
	if r.Type == "" {
		r.Type = "—"
	}
	qf := fv.Queues[depth.Queue]
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
