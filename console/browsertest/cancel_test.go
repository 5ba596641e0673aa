package browsertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

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
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if got, err := s.outcomes.Await(ctx, id, 1); err != nil || len(got) != 1 || got[0] != queuey.Cancelled {
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
