package browsertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
	"github.com/queuey-go/queuey/inspect"
)

// The queues of the RabbitMQ tests; each test's set has a prefix of its own.
var (
	idle  = queuey.Queue{Name: "idle"}
	busy  = queuey.Queue{Name: "busy", Prefetch: 2}
	paced = queuey.Queue{Name: "paced", Prefetch: 1}
	kid   = queuey.Queue{Name: "kid"}
)

type idleJob struct{}

func (idleJob) Kind() string        { return "idle" }
func (idleJob) Queue() queuey.Queue { return idle }

type busyJob struct{}

func (busyJob) Kind() string        { return "busy" }
func (busyJob) Queue() queuey.Queue { return busy }

type pacedJob struct{ N int }

func (pacedJob) Kind() string        { return "paced" }
func (pacedJob) Queue() queuey.Queue { return paced }

type kidJob struct{}

func (kidJob) Kind() string        { return "kid" }
func (kidJob) Queue() queuey.Queue { return kid }

var quiet = slog.New(slog.DiscardHandler)

// heartbeat is the workers' heartbeat interval in these tests: a worker
// that dies drops off the Workers page three of them later.
const heartbeat = time.Second

// refresh is the console's refresh in these tests.
const refresh = 500 * time.Millisecond

// rabbitRig is a console on RabbitMQ, with its management API, for a
// queue set of a prefix of its own, served to the browser.
type rabbitRig struct {
	t        *testing.T
	set      queuey.QueueSet
	producer *queuey.Producer
	backend  *rabbitmq.Backend // the console's and the producer's
	url      string
}

func newRabbitRig(t *testing.T, queues ...queuey.Queue) *rabbitRig {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	r := &rabbitRig{t: t, set: queuey.QueueSet{Prefix: "bt." + hex.EncodeToString(b), Queues: queues}}
	r.backend = r.dial("console")
	var err error
	r.producer, err = queuey.NewProducer(t.Context(), r.backend, r.set, &queuey.ProducerConfig{Logger: quiet})
	must(t, err)
	c, err := console.New(t.Context(), r.backend, r.set, &console.Options{Refresh: refresh, Logger: quiet, Producer: &queuey.ProducerConfig{Logger: quiet},
		Management: &inspect.Management{URL: "http://127.0.0.1:15672", User: "guest", Password: "guest"}})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Cleanup(r.deleteQueues) // after the backends close (cleanups run last first)
	r.url = serve(t, c)
	return r
}

// dial connects a backend of its own, closed when the test ends.
func (r *rabbitRig) dial(role string) *rabbitmq.Backend {
	r.t.Helper()
	b := rabbittest.Dial(r.t, &rabbitmq.Options{ConnectionName: r.set.Prefix + " " + role, Logger: quiet})
	r.t.Cleanup(func() { _ = b.Close() })
	return b
}

// deleteQueues deletes the set's queues.
func (r *rabbitRig) deleteQueues() {
	var names []string
	for _, q := range r.set.Queues {
		n := r.set.BrokerName(q.Name)
		names = append(names, n, broker.DeadQueueName(n))
	}
	names = append(names, broker.CancelLedgerName(r.set.Prefix), broker.CancelFollowersName(r.set.Prefix))
	rabbittest.DeleteQueues(r.t, names...)
}

// worker runs a worker of the set's queue named name, with a fleet agent,
// on a connection of its own, until the test ends. Stop it first with
// the func returned.
func (r *rabbitRig) worker(name string, handle func(context.Context) error) (*queuey.Worker, *fleet.Agent, func()) {
	r.t.Helper()
	b := r.dial("worker")
	agent, err := fleet.NewAgent(b, r.set, &fleet.Options{Queues: []string{name}, Interval: heartbeat, Logger: quiet})
	must(r.t, err)
	w, err := queuey.NewWorker(b, r.set, &queuey.WorkerConfig{Queues: []string{name}, Hooks: agent.Hooks(nil), Logger: quiet})
	must(r.t, err)
	switch name {
	case "busy":
		must(r.t, queuey.Handle(w, func(ctx context.Context, _ busyJob, _ queuey.JobContext) error { return handle(ctx) }))
	case "paced":
		must(r.t, queuey.Handle(w, func(ctx context.Context, _ pacedJob, _ queuey.JobContext) error { return handle(ctx) }))
	default:
		r.t.Fatalf("no handler for %s", name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	wg.Go(func() { _ = agent.Run(ctx, w) })
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	r.t.Cleanup(stop)
	return w, agent, stop
}

// counts is one queue's row of rabbitmqctl list_queues.
type counts struct {
	Ready, Unacked, Consumers int
}

// listQueues is `rabbitmqctl list_queues name messages_ready
// messages_unacknowledged consumers` for the set's queues, by broker name.
func (r *rabbitRig) listQueues() map[string]counts {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers",
		"--formatter", "json", "--quiet").CombinedOutput()
	if err != nil {
		r.t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	// Other programs' queues on the broker may say "" for a count they
	// cannot tell (a queue whose node is down): only the set's are read.
	var rows []map[string]any
	if err := json.Unmarshal(out[strings.IndexByte(string(out), '['):], &rows); err != nil {
		r.t.Fatalf("rabbitmqctl list_queues: %v\n%.2000s", err, out)
	}
	got := map[string]counts{}
	for _, row := range rows {
		name, _ := row["name"].(string)
		if !strings.HasPrefix(name, r.set.Prefix+".") {
			continue
		}
		n := func(k string) int {
			f, ok := row[k].(float64)
			if !ok {
				r.t.Fatalf("rabbitmqctl list_queues: %s of %s is %v", k, name, row[k])
			}
			return int(f)
		}
		got[name] = counts{n("messages_ready"), n("messages_unacknowledged"), n("consumers")}
	}
	return got
}

// overviewRow is a queue's row of the Overview as the browser shows it.
type overviewRow struct {
	Ready, Unacked, Consumers, Dead string
}

// readRow reads the Overview's row of the queue named name.
func readRow(t *testing.T, ctx context.Context, name string) overviewRow {
	t.Helper()
	js := `(() => { const r = document.querySelector('tr[data-queue="` + name + `"]'); if (!r) return "";
		const c = k => r.querySelector('[data-col=' + k + ']').textContent.trim();
		return [c("ready"), c("unacked"), c("consumers"), c("dead")].join(" "); })()`
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("reading the row of %s: %v", name, err)
	}
	f := strings.Fields(s)
	if len(f) != 4 {
		return overviewRow{}
	}
	return overviewRow{f[0], f[1], f[2], f[3]}
}

// wantRowsAsRabbitmqctl waits until the Overview's rows of queues show
// what rabbitmqctl says of them (the management API's figures lag the
// broker's by its statistics interval, 5 s by default), then checks
// them against a last listing, and returns it.
func (r *rabbitRig) wantRowsAsRabbitmqctl(ctx context.Context, queues ...string) map[string]counts {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		listed := r.listQueues()
		var diffs []string
		for _, q := range queues {
			b := r.set.BrokerName(q)
			want := listed[b]
			got := readRow(r.t, ctx, q)
			wantRow := overviewRow{strconv.Itoa(want.Ready), strconv.Itoa(want.Unacked), strconv.Itoa(want.Consumers), strconv.Itoa(listed[broker.DeadQueueName(b)].Ready)}
			if got != wantRow {
				diffs = append(diffs, fmt.Sprintf("%s: the page shows ready, unacked, consumers, dead %v; rabbitmqctl %v", q, got, wantRow))
			}
		}
		if len(diffs) == 0 {
			return listed
		}
		if time.Now().After(deadline) {
			shot(r.t, ctx, "overview-mismatch")
			r.t.Fatalf("the Overview does not match rabbitmqctl list_queues:\n%s", strings.Join(diffs, "\n"))
		}
		<-time.After(time.Second)
	}
}

// waitContains waits until the element sel's text contains want.
func waitContains(sel, want string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](`(() => { const e = document.querySelector(`+quote(sel)+`); return e !== null && e.textContent.includes(`+quote(want)+`); })()`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
}

// TestOverviewCountsMatchRabbitmqctl: a queue with ready messages and
// dead letters and no consumer, and one a worker consumes with two jobs
// held unacked: the Overview's counts are rabbitmqctl's.
func TestOverviewCountsMatchRabbitmqctl(t *testing.T) {
	r := newRabbitRig(t, idle, busy)
	ctx := browser(t)
	release := make(chan struct{})
	_, _, stop := r.worker("busy", func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	defer stop()
	defer close(release) // before the worker stops
	for range 4 {
		_, err := r.producer.Enqueue(t.Context(), idleJob{})
		must(t, err)
	}
	for range 5 {
		_, err := r.producer.Enqueue(t.Context(), busyJob{})
		must(t, err)
	}
	for i := range 2 {
		must(t, r.backend.DeadLetter(t.Context(), broker.DeadLetter{Reason: "fatal error: no", Message: broker.Message{
			Queue: r.set.BrokerName("idle"), ID: fmt.Sprintf("dead-%d", i), Type: "idle", Body: []byte(`{}`)}}))
	}
	run(t, ctx, "the Overview", chromedp.Navigate(r.url+"/"), chromedp.WaitVisible(`tr[data-queue=busy]`))
	listed := r.wantRowsAsRabbitmqctl(ctx, "idle", "busy")
	want := map[string]counts{r.set.BrokerName("idle"): {4, 0, 0}, r.set.BrokerName("busy"): {3, 2, 1}}
	for q, c := range want {
		if listed[q] != c {
			t.Errorf("rabbitmqctl says %s has %+v; the test set up %+v", q, listed[q], c)
		}
	}
	shot(t, ctx, "overview-rabbitmq")
}

// TestPausingFromTheOverviewStopsAWorker: a worker takes the queue's jobs;
// paused from the Overview, it takes none of those enqueued meanwhile
// (they stay ready, the page says so and who paused it); resumed from
// the page, it takes them.
func TestPausingFromTheOverviewStopsAWorker(t *testing.T) {
	r := newRabbitRig(t, paced)
	ctx := browser(t)
	var ran atomic.Int32
	w, _, stop := r.worker("paced", func(context.Context) error { ran.Add(1); return nil })
	defer stop()
	enqueue := func(n int) {
		for i := range n {
			_, err := r.producer.Enqueue(t.Context(), pacedJob{i})
			must(t, err)
		}
	}
	waitRan := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for ran.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d jobs ran, want %d", ran.Load(), n)
			}
			<-time.After(20 * time.Millisecond)
		}
	}
	enqueue(3)
	waitRan(3)
	row := `tr[data-queue=paced]`
	run(t, ctx, "the worker is heard", chromedp.Navigate(r.url+"/"), waitText(row+` [data-col=consumers]`, "1"),
		waitText(row+` [data-col=done]`, "3"))
	run(t, ctx, "pause from the page", chromedp.Click(row+` form[action$="/pause"] button`), chromedp.WaitVisible(`.message`),
		waitContains(`.message`, "Asked 1 workers to pause paced until"))
	deadline := time.Now().Add(10 * time.Second)
	for w.Paused()["paced"].IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not pause")
		}
		<-time.After(20 * time.Millisecond)
	}
	enqueue(5)
	run(t, ctx, "the page says paused, by the console", chromedp.Navigate(r.url+"/"), waitContains(row+` [data-col=paused]`, "(console,"),
		waitText(row+` [data-col=consumers]`, "0"), waitText(row+` [data-col=ready]`, "5"))
	if n := ran.Load(); n != 3 {
		t.Errorf("%d jobs ran; a paused queue's jobs must wait (3 ran before)", n)
	}
	if c := r.listQueues()[r.set.BrokerName("paced")]; c != (counts{Ready: 5}) {
		t.Errorf("rabbitmqctl says the paused queue has %+v, want the 5 ready and no consumer", c)
	}
	shot(t, ctx, "paused")
	run(t, ctx, "resume from the page", chromedp.Navigate(r.url+"/"), chromedp.WaitVisible(row),
		chromedp.Click(row+` form[action$="/resume"] button`), chromedp.WaitVisible(`.message`), waitContains(`.message`, "Asked 1 workers to resume paced"))
	waitRan(8)
	run(t, ctx, "the page says resumed", chromedp.Navigate(r.url+"/"), waitText(row+` [data-col=paused]`, "no"),
		waitText(row+` [data-col=ready]`, "0"), waitText(row+` [data-col=consumers]`, "1"))
}

// childEnv makes the test binary a worker of the set its value names (a
// prefix), for TestAKilledWorkerLeavesTheWorkersPage.
const childEnv = "QUEUEY_BROWSERTEST_WORKER"

// childWorker is the test binary run as a worker with its fleet agent;
// it prints its agent's ID and runs until it is killed.
func childWorker(prefix string) int {
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{kid}}
	ctx := context.Background()
	b, err := rabbitmq.Dial(ctx, rabbittest.URL(), &rabbitmq.Options{ConnectionName: prefix + " child", Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	agent, err := fleet.NewAgent(b, set, &fleet.Options{Interval: heartbeat, Version: "child", Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w, err := queuey.NewWorker(b, set, &queuey.WorkerConfig{Hooks: agent.Hooks(nil), Logger: quiet})
	if err == nil {
		err = queuey.Handle(w, func(context.Context, kidJob, queuey.JobContext) error { return nil })
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(agent.ID())
	go func() { _ = agent.Run(ctx, w) }()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestAKilledWorkerLeavesTheWorkersPage: a worker in a process of its own
// shows on the Workers page; killed (SIGKILL: no goodbye), it leaves the
// page within the time the page states (three heartbeat intervals) and
// a refresh, and not before two intervals.
func TestAKilledWorkerLeavesTheWorkersPage(t *testing.T) {
	r := newRabbitRig(t, kid)
	ctx := browser(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+r.set.Prefix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	id, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child worker said nothing: %v", err)
	}
	id = strings.TrimSpace(id)
	row := `tr[data-worker="` + id + `"]`
	run(t, ctx, "the child worker on the Workers page", chromedp.Navigate(r.url+"/workers"), chromedp.WaitVisible(row),
		waitContains(`#live`, "every 1s; one not heard for 3s drops off this page"))
	shot(t, ctx, "workers-rabbitmq")
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()
	run(t, ctx, "the killed worker leaves the page", waitGone(row))
	gone := time.Since(killed)
	limit := fleet.DropAfter*heartbeat + refresh + time.Second // the stated time, a refresh, and slack for the poll and the broker
	if gone > limit || gone < (fleet.DropAfter-1)*heartbeat {
		t.Errorf("the killed worker left the page %v after the kill; want between %v and %v", gone, (fleet.DropAfter-1)*heartbeat, limit)
	}
	t.Logf("the killed worker left the Workers page %v after the kill (stated: %v after its last heartbeat)", gone.Round(time.Millisecond), fleet.DropAfter*heartbeat)
	shot(t, ctx, "workers-after-kill")
}
