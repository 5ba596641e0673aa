package console

import (
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/inspect"
)

// waitsQueue is one work queue on the Waits page.
type waitsQueue struct {
	Name, BrokerName, Type string
	Holds                  []inspect.Hold
	Lane                   int // a quorum queue's top-priority lane: ready there; -1 unknown
}

// levelView is one delay level of the quorum topology.
type levelView struct {
	Name  string
	Wait  time.Duration
	Count int
}

// waitsData is the Waits page.
type waitsData struct {
	Known    bool // the look found the hold queues (a complete snapshot)
	Queues   []waitsQueue
	Quorum   bool
	Levels   []levelView
	Orphans  int
	Limits   []string
	Requests int
}

func (c *Console) waits(q *request) error {
	snap, err := c.look(q)
	if err != nil {
		return err
	}
	d := waitsData{Known: snap.Complete, Limits: snap.Limits, Requests: snap.Requests, Orphans: inspect.Unknown}
	for _, qu := range c.set.Queues {
		b := c.set.BrokerName(qu.Name)
		f := snap.Queues[b]
		w := waitsQueue{Name: qu.Name, BrokerName: b, Type: f.Type, Lane: inspect.Unknown}
		if snap.Complete {
			w.Holds = snap.Holds(b)
		}
		if f.Type == "quorum" {
			d.Quorum = true
			if l, ok := snap.Queues[broker.LaneQueueName(b)]; ok {
				w.Lane = l.Ready
			}
		}
		d.Queues = append(d.Queues, w)
	}
	if d.Quorum && snap.Complete {
		d.Levels, d.Orphans = levels(snap)
	}
	return q.render(200, "waits", "Waits", d)
}

// levels are the quorum topology's delay levels, and its orphans.
func levels(snap inspect.Snapshot) ([]levelView, int) {
	var out []levelView
	for n := range broker.DelayLevels {
		name := broker.DelayLevelName(n)
		f := snap.Queues[name]
		out = append(out, levelView{Name: name, Wait: time.Duration(1<<n) * time.Second, Count: f.Ready + max(0, f.Unacked)})
	}
	return out, snap.Queues[broker.DelayOrphans].Ready
}
