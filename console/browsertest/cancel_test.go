package browsertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// outcomes records each delivery's outcome by job id, through the Deliver
// hook, and tells who waits for one.
type outcomes struct {
	mu      sync.Mutex
	got     map[string][]queuey.Result
	changed chan struct{} // closed, and replaced, at each outcome
}

func newOutcomes() *outcomes {
	return &outcomes{got: map[string][]queuey.Result{}, changed: make(chan struct{})}
}

func (o *outcomes) hooks() *queuey.Hooks {
	return &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		id := d.Job.JobID
		return ctx, func(out queuey.Outcome) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.got[id] = append(o.got[id], out.Result)
			close(o.changed)
			o.changed = make(chan struct{})
		}
	}}
}

// await waits for job id's first outcome and returns all it has had.
func (o *outcomes) await(t *testing.T, id string) []queuey.Result {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		o.mu.Lock()
		got, changed := append([]queuey.Result(nil), o.got[id]...), o.changed
		o.mu.Unlock()
		if len(got) > 0 {
			return got
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("job %s had no outcome", id)
		}
	}
}

// TestCancelAJobByTypingItsID: the id of a job enqueued to run in a
// minute is typed into the Overview's form and the button clicked; the
// page says the job is cancelled, and when its minute is up it ends as
// Cancelled, never run.
func TestCancelAJobByTypingItsID(t *testing.T) {
	s := newSystem(t, func(job) error { return nil })
	ctx := browser(t)
	_, err := s.producer.Enqueue(t.Context(), job{N: 1})
	must(t, err)
	s.await(t) // the worker has read the ledger of cancellations, and follows it
	id, err := s.producer.EnqueueAfter(t.Context(), job{N: 2}, time.Minute)
	must(t, err)

	run(t, ctx, "type the id", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(`#cancel-id`), chromedp.SendKeys(`#cancel-id`, id))
	shot(t, ctx, "cancel-typed")
	run(t, ctx, "click", chromedp.Click(`#cancel button[type=submit]`), chromedp.WaitVisible(`.message`))
	text, err := chromedp.Run(ctx, chromedp.Text(`.message`))
	must(t, err)
	shot(t, ctx, "cancelled")
	if want := "Job " + id + " is cancelled: it will not run."; !strings.Contains(text, want) {
		t.Fatalf("the page says %q, want %q", text, want)
	}

	// A minute, not an hour: the mock clock fires each of the agent's
	// heartbeats (one a second) on the way.
	s.clock.Add(time.Minute + time.Second)
	if got := s.outcomes.await(t, id); len(got) != 1 || got[0] != queuey.Cancelled {
		t.Errorf("the job's outcomes %v, want [cancelled]", got)
	}
	select {
	case j := <-s.ran:
		t.Errorf("the handler ran job %d after the cancellation", j.N)
	default:
	}
}

// TestCancelOnRabbitMQByTypingItsID: on RabbitMQ, with a worker of the
// set running, the id of a job enqueued to run in an hour is typed into
// the Overview's form and the button clicked: the page says the job is
// cancelled, once the worker has confirmed it.
func TestCancelOnRabbitMQByTypingItsID(t *testing.T) {
	r := newRabbitRig(t, paced)
	if _, ok := any(r.backend).(broker.CancelLedger); !ok {
		t.Skip("the RabbitMQ backend keeps no ledger of cancellations (it is not a broker.CancelLedger) yet: the console cannot cancel there")
	}
	work := r.set.BrokerName(paced.Name)
	t.Cleanup(func() {
		rabbittest.DeleteQueues(t, broker.HoldQueueName(work, time.Hour))
	})
	ran := make(chan struct{}, 4)
	_, _, stop := r.worker(paced.Name, func(context.Context) error { ran <- struct{}{}; return nil })
	defer stop()
	_, err := r.producer.Enqueue(t.Context(), pacedJob{0})
	must(t, err)
	select {
	case <-ran: // the worker has read the ledger of cancellations, and follows it
	case <-time.After(20 * time.Second):
		t.Fatal("the first job did not run")
	}
	id, err := r.producer.EnqueueAfter(t.Context(), pacedJob{1}, time.Hour)
	must(t, err)
	ctx := browser(t)
	run(t, ctx, "cancel by typing the id", chromedp.Navigate(r.url+"/"), chromedp.WaitVisible(`#cancel-id`), chromedp.SendKeys(`#cancel-id`, id),
		chromedp.Click(`#cancel button[type=submit]`), chromedp.WaitVisible(`.message`), waitContains(`.message`, "Job "+id+" is cancelled: it will not run."))
	shot(t, ctx, "rabbitmq-cancelled")
}
