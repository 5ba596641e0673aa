package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
)

var (
	mail = queuey.Queue{Name: "mail", Prefetch: 1}
	api  = queuey.Queue{Name: "api", Prefetch: 1}
	set  = queuey.QueueSet{Prefix: "fleet", Queues: []queuey.Queue{mail, api}}
)

type mailJob struct{ N int }

func (mailJob) Kind() string        { return "mail" }
func (mailJob) Queue() queuey.Queue { return mail }

type apiJob struct{ N int }

func (apiJob) Kind() string        { return "api" }
func (apiJob) Queue() queuey.Queue { return api }

// rig is a worker of set with its fleet agent on a memory backend, all on
// one mock clock, inside a synctest bubble: Advance moves virtual time.
type rig struct {
	t        *testing.T
	clock    *clock.Mock
	backend  *memory.Backend
	producer *queuey.Producer
	worker   *queuey.Worker
	agent    *fleet.Agent
	stop     context.CancelFunc // stops the agent, then the worker
	wg       sync.WaitGroup

	mu   sync.Mutex
	runs map[string]int // by job kind
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

// newRig builds the rig; handle is every handler's body (nil: none).
// Start it with start once its handlers are set.
func newRig(t *testing.T, opts *fleet.Options, handle func(ctx context.Context) error) *rig {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(epoch)
	r := &rig{t: t, clock: mock, backend: memory.New(&memory.Options{Clock: mock}), runs: map[string]int{}}
	if opts == nil {
		opts = &fleet.Options{}
	}
	opts.Clock, opts.Logger = mock, quiet
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	var err error
	r.agent, err = fleet.NewAgent(r.backend, set, opts)
	must(t, err)
	r.worker, err = queuey.NewWorker(r.backend, set, &queuey.WorkerConfig{Clock: mock, Hooks: r.agent.Hooks(nil), Concurrency: 1, Logger: quiet})
	must(t, err)
	count := func(kind string) {
		r.mu.Lock()
		r.runs[kind]++
		r.mu.Unlock()
	}
	must(t, queuey.Handle(r.worker, func(ctx context.Context, j mailJob, _ queuey.JobContext) error {
		count("mail")
		if handle != nil {
			return handle(ctx)
		}
		return nil
	}))
	must(t, queuey.Handle(r.worker, func(ctx context.Context, j apiJob, _ queuey.JobContext) error {
		count("api")
		return nil
	}))
	r.producer, err = queuey.NewProducer(t.Context(), r.backend, set, &queuey.ProducerConfig{Clock: mock})
	must(t, err)
	t.Cleanup(func() {
		if r.stop != nil {
			r.stop()
			r.wg.Wait()
		}
		_ = r.backend.Close()
	})
	return r
}

// start runs the worker and the agent.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	agentCtx, stopAgent := context.WithCancel(ctx)
	r.stop = func() { stopAgent(); cancel() }
	r.wg.Go(func() { _ = r.worker.Run(ctx) })
	r.wg.Go(func() {
		if err := r.agent.Run(agentCtx, r.worker); err != nil {
			r.t.Errorf("agent: %v", err)
		}
	})
	synctest.Wait()
}

// advance moves the clock by d, then waits for the bubble to be idle.
func (r *rig) advance(d time.Duration) {
	synctest.Wait()
	r.clock.Add(d)
	synctest.Wait()
}

func (r *rig) ran(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[kind]
}

// listen listens to the set's heartbeats as a console does.
func (r *rig) listen() broker.Listener {
	l, err := r.backend.Listen(r.t.Context(), fleet.HeartbeatTopic(set.Prefix))
	must(r.t, err)
	r.t.Cleanup(l.Close)
	return l
}

// last is the last heartbeat l heard since the last call, or fails.
func (r *rig) last(l broker.Listener) fleet.Heartbeat {
	r.t.Helper()
	synctest.Wait()
	var hb fleet.Heartbeat
	heard := false
	for {
		select {
		case m := <-l.Messages():
			hb, heard = fleet.Heartbeat{}, true
			must(r.t, json.Unmarshal(m, &hb))
			continue
		default:
		}
		break
	}
	if !heard {
		r.t.Fatal("no heartbeat heard")
	}
	return hb
}

// command broadcasts c to the agents, as the console does.
func (r *rig) command(c fleet.Command) {
	r.t.Helper()
	body, err := json.Marshal(c)
	must(r.t, err)
	must(r.t, r.backend.Broadcast(r.t.Context(), fleet.CommandTopic(set.Prefix), body))
	synctest.Wait()
}

func report(hb fleet.Heartbeat, queue string) fleet.QueueReport {
	for _, q := range hb.Queues {
		if q.Name == queue {
			return q
		}
	}
	return fleet.QueueReport{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A heartbeat says who the worker is and, per queue, what it has in
// flight and has done, and how late its jobs started over the interval.
func TestAHeartbeatSaysWhatTheWorkerRunsAndHowLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mock *clock.Mock
		r := newRig(t, &fleet.Options{Version: "v1.2.3", Interval: 10 * time.Second}, func(context.Context) error {
			<-mock.After(2 * time.Second) // each job takes 2 s: the next starts 2 s later than the last
			return nil
		})
		mock = r.clock
		l := r.listen()
		r.start()
		hb := r.last(l) // sent at once
		host, _ := os.Hostname()
		if hb.ID != r.agent.ID() || hb.Host != host || hb.PID != os.Getpid() || hb.Version != "v1.2.3" ||
			!hb.Started.Equal(epoch) || !hb.Sent.Equal(epoch) || hb.Interval() != 10*time.Second || hb.Concurrency != 1 {
			t.Errorf("heartbeat: %+v", hb)
		}
		if len(hb.Queues) != 2 || hb.Queues[0].Name != "mail" || hb.Queues[1].Name != "api" {
			t.Fatalf("queues reported: %+v, want mail and api", hb.Queues)
		}
		for i := range 3 {
			_, err := r.producer.Enqueue(t.Context(), mailJob{i})
			must(t, err)
		}
		r.advance(time.Second) // the first runs, the others wait
		r.advance(9 * time.Second)
		hb = r.last(l)
		m := report(hb, "mail")
		// Started 0, 2 and 4 s after they were due; the fourth seconds'
		// job still runs (in flight) when the heartbeat goes.
		if m.Done != 3 || m.InFlight != 0 || !m.Late || m.P50Ms != 2000 || m.P99Ms != 4000 {
			t.Errorf("mail after three jobs of 2 s: %+v; want 3 done, late p50 2 s, p99 4 s", m)
		}
		if a := report(hb, "api"); a.Done != 0 || a.Late {
			t.Errorf("api, which ran nothing: %+v", a)
		}
		_, err := r.producer.Enqueue(t.Context(), mailJob{9})
		must(t, err)
		r.advance(10 * time.Second)
		hb = r.last(l)
		if m := report(hb, "mail"); m.Done != 4 || m.P50Ms != 0 || m.P99Ms != 0 || !hb.Sent.Equal(epoch.Add(20*time.Second)) {
			t.Errorf("mail after one more job on time: %+v (sent %v); want 4 done, lateness of this interval only: 0", m, hb.Sent)
		}
		r.advance(10 * time.Second)
		if m := report(r.last(l), "mail"); m.Late {
			t.Errorf("an interval without jobs reports lateness: %+v", m)
		}
	})
}

// A job that runs when the heartbeat goes is in flight.
func TestAHeartbeatCountsTheJobsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		r := newRig(t, nil, func(context.Context) error { <-release; return nil })
		l := r.listen()
		r.start()
		_, err := r.producer.Enqueue(t.Context(), mailJob{})
		must(t, err)
		r.advance(time.Second)
		if m := report(r.last(l), "mail"); m.InFlight != 1 || m.Done != 0 {
			t.Errorf("mail with its job running: %+v; want 1 in flight, none done", m)
		}
		close(release)
		r.advance(time.Second)
		if m := report(r.last(l), "mail"); m.InFlight != 0 || m.Done != 1 {
			t.Errorf("mail once its job is done: %+v; want none in flight, 1 done", m)
		}
	})
}

// A pause command stops the worker taking jobs of the queue (they stay
// ready on the broker) and its heartbeat says the console paused it
// until when; a resume command starts it again. The queue beside it runs
// on; a command for a queue the worker does not consume, or one that does
// not decode, changes nothing.
func TestACommandPausesAndResumesAQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		l := r.listen()
		r.start()
		until := epoch.Add(time.Hour)
		r.command(fleet.Command{Op: fleet.OpPause, Queue: "mail", Until: until})
		if got := r.worker.Paused(); !got["mail"].Equal(until) || len(got) != 1 {
			t.Fatalf("paused after the command: %v, want mail until %v", got, until)
		}
		// The agent reports at once.
		if m := report(r.last(l), "mail"); !m.PausedUntil.Equal(until) || m.PausedBy != "console" {
			t.Errorf("mail's report: %+v, want paused until %v by console", m, until)
		}
		for i := range 3 {
			_, err := r.producer.Enqueue(t.Context(), mailJob{i})
			must(t, err)
		}
		_, err := r.producer.Enqueue(t.Context(), apiJob{})
		must(t, err)
		r.advance(10 * time.Second)
		if n := r.ran("mail"); n != 0 {
			t.Errorf("%d mail jobs ran while mail was paused", n)
		}
		if n := r.ran("api"); n != 1 {
			t.Errorf("%d api jobs ran, want 1: a pause of mail leaves api running", n)
		}
		if n := r.backend.Pending(set.BrokerName("mail")); n != 3 {
			t.Errorf("%d mail jobs ready on the broker while paused, want 3", n)
		}
		must(t, r.backend.Broadcast(t.Context(), fleet.CommandTopic(set.Prefix), []byte("{not json")))
		r.command(fleet.Command{Op: fleet.OpResume, Queue: "elsewhere"})
		r.advance(time.Second)
		if _, ok := r.worker.Paused()["mail"]; !ok {
			t.Fatal("a command for another queue, or one that does not decode, resumed mail")
		}

		r.command(fleet.Command{Op: fleet.OpResume, Queue: "mail"})
		r.advance(time.Second)
		if n := r.ran("mail"); n != 3 {
			t.Errorf("%d mail jobs ran after the resume, want 3", n)
		}
		if m := report(r.last(l), "mail"); !m.PausedUntil.IsZero() || m.PausedBy != "" {
			t.Errorf("mail's report after the resume: %+v, want not paused", m)
		}
	})
}

// A handler's PauseQueue is reported as the handler's, not the console's.
func TestAPauseOfAHandlerIsReportedAsTheHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mock *clock.Mock
		r := newRig(t, nil, func(context.Context) error { return queuey.PauseQueue(time.Minute, "429") })
		mock = r.clock
		l := r.listen()
		r.start()
		_, err := r.producer.Enqueue(t.Context(), mailJob{})
		must(t, err)
		r.advance(time.Second)
		if m := report(r.last(l), "mail"); m.PausedBy != "handler" || !m.PausedUntil.After(mock.Now()) {
			t.Errorf("mail's report after a PauseQueue: %+v, want paused by handler", m)
		}
	})
}

// A worker whose heartbeats stop (its agent ends, as when its process is
// killed) stays on the console's Workers page through three of its
// intervals, and is gone just after.
func TestAWorkerThatStopsDropsOffAfterThreeIntervals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &fleet.Options{Interval: 2 * time.Second}, nil)
		c, err := console.New(t.Context(), r.backend, set, &console.Options{Clock: r.clock, Logger: quiet})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait() // the console listens
		r.start()
		workers := func() string {
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest("GET", "/workers?live=1", nil))
			return rec.Body.String()
		}
		row := `data-worker="` + r.agent.ID() + `"`
		r.advance(3 * time.Second) // heartbeats at 0 and 2 s
		if !strings.Contains(workers(), row) {
			t.Fatalf("the worker is not on the Workers page:\n%s", workers())
		}
		if !strings.Contains(workers(), "every 2s; one not heard for 6s drops off") {
			t.Errorf("the page does not state the drop-off time of a worker of 2 s intervals:\n%s", workers())
		}
		r.stop() // the last heartbeat was at 2 s; the worker stops too
		r.wg.Wait()
		r.stop = nil
		r.advance(5 * time.Second) // 8 s: three intervals after the last heartbeat
		if !strings.Contains(workers(), row) {
			t.Error("the worker left before three intervals had passed")
		}
		r.advance(time.Millisecond)
		if page := workers(); strings.Contains(page, row) || !strings.Contains(page, "No worker is heard") {
			t.Errorf("the worker is still on the page three intervals after its last heartbeat:\n%s", page)
		}
	})
}

// flaky is a memory backend whose listeners a test can end, as a lost
// connection ends a RabbitMQ one.
type flaky struct {
	*memory.Backend
	mu        sync.Mutex
	listeners []*flakyListener
	listens   int
}

type flakyListener struct {
	broker.Listener
	out  chan []byte
	err  error
	once sync.Once
	cut  chan struct{}
}

func (f *flaky) Listen(ctx context.Context, topic string) (broker.Listener, error) {
	l, err := f.Backend.Listen(ctx, topic)
	if err != nil {
		return nil, err
	}
	fl := &flakyListener{Listener: l, out: make(chan []byte), cut: make(chan struct{})}
	go func() {
		defer close(fl.out)
		for {
			select {
			case m, ok := <-l.Messages():
				if !ok {
					fl.err = l.Err()
					return
				}
				select {
				case fl.out <- m:
				case <-fl.cut:
					return
				}
			case <-fl.cut:
				return
			}
		}
	}()
	f.mu.Lock()
	f.listeners = append(f.listeners, fl)
	f.listens++
	f.mu.Unlock()
	return fl, nil
}

func (l *flakyListener) Messages() <-chan []byte { return l.out }
func (l *flakyListener) Err() error              { return l.err }
func (l *flakyListener) Close()                  { l.end(nil); l.Listener.Close() }
func (l *flakyListener) end(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.cut)
	})
}

// cutAll ends every listener with a lost connection.
func (f *flaky) cutAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.listeners {
		l.end(errors.New("connection lost"))
	}
	f.listeners = nil
}

// An agent whose command listener ends (a lost connection) listens again
// after a backoff, and carries out the commands sent after that; its
// heartbeats go on meanwhile. A closed backend ends its Run.
func TestAnAgentListensAgainWhenItsListenerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		mock.Set(epoch)
		f := &flaky{Backend: memory.New(&memory.Options{Clock: mock})}
		defer f.Close()
		agent, err := fleet.NewAgent(f, set, &fleet.Options{Clock: mock, Interval: time.Second, Logger: quiet})
		must(t, err)
		w := &fakeWorker{paused: map[string]time.Time{}}
		hbs, err := f.Backend.Listen(t.Context(), fleet.HeartbeatTopic(set.Prefix))
		must(t, err)
		defer hbs.Close()
		ran := make(chan error, 1)
		go func() { ran <- agent.Run(context.Background(), w) }()
		synctest.Wait()
		f.cutAll()
		synctest.Wait()
		pause := func() {
			body, _ := json.Marshal(fleet.Command{Op: fleet.OpPause, Queue: "mail", Until: epoch.Add(time.Hour)})
			must(t, f.Broadcast(t.Context(), fleet.CommandTopic(set.Prefix), body))
			synctest.Wait()
		}
		pause()
		if w.pauses() != 0 {
			t.Fatal("a command reached an agent whose listener had ended")
		}
		mock.Add(time.Second) // the backoff: 1 s
		synctest.Wait()
		pause()
		if w.pauses() != 1 {
			t.Errorf("%d pauses after the agent listened again, want 1", w.pauses())
		}
		if f.listens != 2 {
			t.Errorf("%d listens, want 2", f.listens)
		}
		heard := 0
		for len(hbs.Messages()) > 0 {
			<-hbs.Messages()
			heard++
		}
		if heard < 2 {
			t.Errorf("%d heartbeats through the cut, want them to go on", heard)
		}
		f.Close()
		synctest.Wait()
		select {
		case err := <-ran:
			if !errors.Is(err, broker.ErrClosed) {
				t.Errorf("Run after the backend closed: %v, want ErrClosed", err)
			}
		default:
			t.Error("Run goes on after the backend closed")
		}
	})
}

// fakeWorker is a fleet.Worker that counts pauses.
type fakeWorker struct {
	mu     sync.Mutex
	paused map[string]time.Time
	n      int
}

func (w *fakeWorker) Concurrency() int    { return 1 }
func (w *fakeWorker) InFlight(string) int { return 0 }
func (w *fakeWorker) Pause(_ context.Context, name string, until time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused[name] = until
	w.n++
	return nil
}
func (w *fakeWorker) Resume(_ context.Context, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.paused, name)
	return nil
}
func (w *fakeWorker) Paused() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range w.paused {
		out[k] = v
	}
	return out
}

// Schedules reports no schedule: the fake leads none.
func (w *fakeWorker) Schedules() []queuey.ScheduleStatus { return nil }
func (w *fakeWorker) pauses() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// A console whose heartbeat listener ends (a lost connection) says on the
// Workers page that it does not hear the workers, keeps those it heard,
// and listens again after a backoff.
func TestTheConsoleListensAgainWhenItsListenerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		mock.Set(epoch)
		f := &flaky{Backend: memory.New(&memory.Options{Clock: mock})}
		defer f.Close()
		c, err := console.New(t.Context(), f, set, &console.Options{Clock: mock, Logger: quiet})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait() // the console listens before the agent's first heartbeat goes
		agent, err := fleet.NewAgent(f.Backend, set, &fleet.Options{Clock: mock, Interval: 5 * time.Second, Logger: quiet})
		must(t, err)
		go func() { _ = agent.Run(ctx, &fakeWorker{paused: map[string]time.Time{}}) }()
		synctest.Wait()
		workers := func() string {
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest("GET", "/workers?live=1", nil))
			return rec.Body.String()
		}
		row := `data-worker="` + agent.ID() + `"`
		if !strings.Contains(workers(), row) {
			t.Fatalf("the worker is not on the page:\n%s", workers())
		}
		f.cutAll()
		synctest.Wait()
		if page := workers(); !strings.Contains(page, row) || !strings.Contains(page, "the console does not hear them now") {
			t.Errorf("while the console does not listen, the page should keep the worker and say so:\n%s", page)
		}
		mock.Add(5 * time.Second) // the backoff (1 s), then the agent's next heartbeat
		synctest.Wait()
		if page := workers(); !strings.Contains(page, row) || strings.Contains(page, "does not hear") {
			t.Errorf("after listening again:\n%s", page)
		}
		if f.listens != 2 {
			t.Errorf("%d listens, want 2", f.listens)
		}
	})
}
