package clocktest

import (
	"context"
	"slices"
	"sync"

	"github.com/queuey-go/queuey"
)

// Outcomes records what each delivery came to, by job id, as the Deliver
// hook is told: give Hooks to WorkerConfig.Hooks. A test then says of a
// job what a run log cannot, which sees runs only: it was deferred, then
// cancelled without running again. Its zero value is ready for use; it is
// safe for concurrent use, on a real clock as on the mock one.
type Outcomes struct {
	mu      sync.Mutex
	got     map[string][]queuey.Result
	changed chan struct{} // closed, and replaced, at each outcome
}

// Hooks records every outcome into o.
func (o *Outcomes) Hooks() *queuey.Hooks {
	return &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		id := d.Job.JobID
		return ctx, func(out queuey.Outcome) { o.add(id, out.Result) }
	}}
}

func (o *Outcomes) add(id string, r queuey.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.got == nil {
		o.got = map[string][]queuey.Result{}
	}
	o.got[id] = append(o.got[id], r)
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// Of lists the outcomes of job jobID so far, in order.
func (o *Outcomes) Of(jobID string) []queuey.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got[jobID])
}

// Await waits until job jobID has had n outcomes, or ctx ends (its
// error), and returns those it has had.
func (o *Outcomes) Await(ctx context.Context, jobID string, n int) ([]queuey.Result, error) {
	for {
		o.mu.Lock()
		got := slices.Clone(o.got[jobID])
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}
