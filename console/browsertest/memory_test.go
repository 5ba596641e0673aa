package browsertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/chromedp/chromedp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
)

var jobs = queuey.Queue{Name: "jobs"}

type job struct {
	N int `json:"n"`
}

func (job) Kind() string        { return "work" }
func (job) Queue() queuey.Queue { return jobs }

// system is a worker, its fleet agent and a console on a memory backend,
// all on one mock clock.
type system struct {
	clock    *clock.Mock
	producer *queuey.Producer
	ran      chan job            // each run of the handler
	outcomes *clocktest.Outcomes // each delivery's, by job id
	url      string
}

// newSystem starts the system; handle is the handler's body.
func newSystem(t *testing.T, handle func(job) error) *system {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	backend := memory.New(&memory.Options{Clock: mock})
	set := queuey.QueueSet{Prefix: "browser", Queues: []queuey.Queue{jobs}}
	s := &system{clock: mock, ran: make(chan job, 16), outcomes: new(clocktest.Outcomes)}
	agent, err := fleet.NewAgent(backend, set, &fleet.Options{Clock: mock, Interval: time.Second})
	must(t, err)
	w, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Clock: mock, Hooks: agent.Hooks(s.outcomes.Hooks()), Concurrency: 1})
	must(t, err)
	must(t, queuey.Handle(w, func(ctx context.Context, j job, _ queuey.JobContext) error {
		err := handle(j)
		s.ran <- j
		return err
	}))
	s.producer, err = queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: mock})
	must(t, err)
	c, err := console.New(t.Context(), backend, set, &console.Options{Clock: mock, Refresh: 100 * time.Millisecond})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, fn := range []func(context.Context) error{w.Run, c.Run, func(ctx context.Context) error { return agent.Run(ctx, w) }} {
		wg.Go(func() { _ = fn(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait(); _ = backend.Close() })
	s.url = serve(t, c)
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// await waits for the handler's next run.
func (s *system) await(t *testing.T) job {
	t.Helper()
	select {
	case j := <-s.ran:
		return j
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not run")
	}
	return job{}
}

// TestDeferredJobWaitsThenRuns: a job deferred 30 s shows in Waits; once
// the clock has moved 30 s, the count drops, and the Overview shows its
// run.
func TestDeferredJobWaitsThenRuns(t *testing.T) {
	s := newSystem(t, func(job) error { return nil })
	ctx := browser(t)
	_, err := s.producer.Defer(t.Context(), job{N: 1}, 30*time.Second)
	must(t, err)
	hold := `[data-hold="browser.jobs.deferred.30000"] [data-col=count]`
	run(t, ctx, "the deferred job in Waits", chromedp.Navigate(s.url+"/waits"), waitText(hold, "1"))
	shot(t, ctx, "waits")
	s.clock.Add(29 * time.Second)
	run(t, ctx, "still waiting at 29 s", waitText(hold, "1"))
	s.clock.Add(time.Second)
	s.await(t)
	run(t, ctx, "the count drops", waitGone(hold))
	s.clock.Add(time.Second) // the agent's next heartbeat
	run(t, ctx, "the run in the Overview", chromedp.Navigate(s.url+"/"), waitText(`[data-queue=jobs] [data-col=done]`, "1"))
	shot(t, ctx, "overview")
}

// TestDeadLetterReplayedByClicking: a job that failed fatally is replayed
// from its page, after the confirmation, and runs.
func TestDeadLetterReplayedByClicking(t *testing.T) {
	var mu sync.Mutex
	failed := false
	s := newSystem(t, func(job) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed {
			failed = true
			return queuey.Fatalf("first run fails")
		}
		return nil
	})
	ctx := browser(t)
	id, err := s.producer.Enqueue(t.Context(), job{N: 7})
	must(t, err)
	s.await(t)
	row := `tr[data-id="` + id + `"]`
	run(t, ctx, "the dead letter listed", chromedp.Navigate(s.url+"/dead/jobs"), chromedp.WaitVisible(row))
	shot(t, ctx, "dead-letters")
	// The box is ticked in one step of the page's own JavaScript: the live
	// refresh (every 100 ms here) may replace the list between a lookup of
	// the node and a click on it, but not within one script; once a box is
	// ticked the page holds its refresh.
	tick := `(() => { const b = document.querySelector(` + quote(row+` input[type=checkbox]`) + `); b.click(); return b.checked; })()`
	run(t, ctx, "replay by clicking",
		void(chromedp.Evaluate[bool](tick)), chromedp.Click(`#letters button[type=submit]`),
		chromedp.WaitVisible(`#confirm`), waitText(`#confirm-count`, "1"))
	shot(t, ctx, "confirm")
	run(t, ctx, "confirm", chromedp.Click(`#confirm`), chromedp.WaitVisible(`.message`))
	if j := s.await(t); j.N != 7 {
		t.Errorf("ran job %d after the replay, want 7", j.N)
	}
	run(t, ctx, "the list is empty", chromedp.Navigate(s.url+"/dead/jobs"), chromedp.WaitVisible(`.empty`))
}

// TestEveryPageIsReadableAtAPhonesWidth: at 390 px (a phone held
// upright) no page is wider than the screen: wide tables scroll inside
// their own box, the page itself does not.
func TestEveryPageIsReadableAtAPhonesWidth(t *testing.T) {
	s := newSystem(t, func(job) error { return queuey.Fatalf("fails, to leave a dead letter") })
	ctx := browser(t)
	_, err := s.producer.Enqueue(t.Context(), job{N: 1})
	must(t, err)
	s.await(t)
	run(t, ctx, "a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, page := range []string{"overview", "waits", "dead/jobs", "schedules", "workers"} {
		path := "/" + page
		if page == "overview" {
			path = "/"
		}
		run(t, ctx, page+" at a phone's width", chromedp.Navigate(s.url+path), chromedp.WaitVisible(`main`))
		wider, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		must(t, err)
		shot(t, ctx, "phone-"+strings.ReplaceAll(page, "/", "-"))
		if wider {
			t.Errorf("%s is wider than a phone's screen (390 px): the page scrolls sideways", page)
		}
	}
}
