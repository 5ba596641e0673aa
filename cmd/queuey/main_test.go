package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needsBroker is added to a failure to reach the broker: the tests fail,
// rather than skip, and say how to get one.
const needsBroker = "these tests need RabbitMQ: start a local one with " +
	"`rabbitmq-server -detached && rabbitmqctl await_startup`, or set QUEUEY_AMQP_URL to one that runs elsewhere"

func brokerURL() string { return cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), defaultURL) }

var quiet = slog.New(slog.DiscardHandler)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command with args and stdin, and logs what it printed.
func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	r := result{code, stdout.String(), stderr.String()}
	t.Logf("queuey %s\nexit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fixture is one queue of a queue set with a prefix of its own, on the
// broker, and an admin connection in plain amqp091 to look at it. Every
// queue it may have made is deleted when the test ends.
type fixture struct {
	url   string
	set   queuey.QueueSet
	queue string // the work queue's broker name
	admin *amqp.Connection
}

// newFixture makes q's queue set with a unique prefix and declares it;
// holds are the waits a test replays into, whose hold queues go too.
func newFixture(t *testing.T, q queuey.Queue, holds ...time.Duration) *fixture {
	t.Helper()
	f := &fixture{url: brokerURL(), set: queuey.QueueSet{Prefix: "queuey-cli-test-" + randomHex(), Queues: []queuey.Queue{q}}}
	f.queue = broker.QueueName(f.set.Prefix, q.Name)
	admin, err := amqp.Dial(f.url)
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", rabbitmq.Redact(f.url), err, needsBroker)
	}
	f.admin = admin
	t.Cleanup(func() { _ = admin.Close() })
	made := []string{f.queue, broker.DeadQueueName(f.queue), broker.CancelLedgerName(f.set.Prefix), broker.CancelFollowersName(f.set.Prefix)}
	for _, d := range holds {
		made = append(made, broker.HoldQueueName(f.queue, d))
	}
	t.Cleanup(func() { f.deleteQueues(t, made) })

	backend := f.dial(t)
	defer backend.Close()
	if _, err := queuey.NewProducer(t.Context(), backend, f.set, nil); err != nil {
		t.Fatalf("declare the test's queues: %v", err)
	}
	return f
}

func (f *fixture) dial(t *testing.T) *rabbitmq.Backend {
	t.Helper()
	backend, err := rabbitmq.Dial(t.Context(), f.url, &rabbitmq.Options{ConnectionName: "queuey cli test", Logger: quiet})
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, needsBroker)
	}
	return backend
}

// deleteQueues deletes queues whatever they hold; one that is not there
// is no error.
func (f *fixture) deleteQueues(t *testing.T, queues []string) {
	for _, q := range queues {
		ch, err := f.admin.Channel()
		if err != nil {
			t.Errorf("delete %s: channel: %v", q, err)
			return
		}
		_, err = ch.QueueDelete(q, false, false, false)
		var amqpErr *amqp.Error
		if err != nil && !(errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound) {
			t.Errorf("delete %s: %v", q, err)
		}
		_ = ch.Close() // after a 404 the broker has closed it already
	}
}

// depth counts the ready messages of queue; a queue that is not there
// fails the test.
func (f *fixture) depth(t *testing.T, queue string) int {
	t.Helper()
	ch, err := f.admin.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("depth of %s: %v", queue, err)
	}
	return q.Messages
}

// exists reports whether queue is on the broker.
func (f *fixture) exists(t *testing.T, queue string) bool {
	t.Helper()
	ch, err := f.admin.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false
	}
	if err != nil {
		t.Fatalf("passive declare of %s: %v", queue, err)
	}
	return true
}

// take consumes every message of queue (acked) and returns their envelopes.
func (f *fixture) take(t *testing.T, queue string) []broker.Envelope {
	t.Helper()
	ch, err := f.admin.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	var out []broker.Envelope
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		env, err := broker.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatalf("a message on %s is not an envelope: %v", queue, err)
		}
		out = append(out, env)
	}
}

// args are the flags that name the fixture's queue, then more.
func (f *fixture) args(cmd string, more ...string) []string {
	return append([]string{"dead", cmd, "-url", f.url, "-prefix", f.set.Prefix, "-queue", f.set.Queues[0].Name}, more...)
}

// listed returns what list -json says.
func (f *fixture) listed(t *testing.T) []jsonDeadLetter {
	t.Helper()
	r := cli(t, "", f.args("list", "-json")...)
	if r.code != exitOK {
		t.Fatalf("list -json: exit %d, want 0", r.code)
	}
	var out []jsonDeadLetter
	for line := range strings.Lines(r.stdout) {
		var d jsonDeadLetter
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("list -json printed %q, not a JSON object: %v", line, err)
		}
		out = append(out, d)
	}
	return out
}

func idsOf(list []jsonDeadLetter) []string {
	var ids []string
	for _, d := range list {
		ids = append(ids, d.ID)
	}
	return ids
}

var sorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })

var jobs = queuey.Queue{Name: "jobs"}

type jobA struct {
	N    int    `json:"n"`
	Note string `json:"note"`
}

func (jobA) Kind() string        { return "a" }
func (jobA) Queue() queuey.Queue { return jobs }

type jobB struct {
	N int `json:"n"`
}

func (jobB) Kind() string        { return "b" }
func (jobB) Queue() queuey.Queue { return jobs }

// failAll enqueues two jobs of kind a and one of kind b, and runs a worker
// whose handlers fail them all fatally, until all three are dead letters.
func (f *fixture) failAll(t *testing.T) (a1, a2, b1 string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	backend := f.dial(t)
	defer backend.Close()

	dead := make(chan struct{}, 3)
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		return ctx, func(o queuey.Outcome) {
			if o.Result == queuey.DeadLettered { // and its dead letter confirmed
				dead <- struct{}{}
			}
		}
	}}
	w, err := queuey.NewWorker(backend, f.set, &queuey.WorkerConfig{Hooks: hooks, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	must(t, queuey.Handle(w, func(ctx context.Context, j jobA, jc queuey.JobContext) error {
		return queuey.Fatalf("a %d: upstream said no", j.N)
	}))
	must(t, queuey.Handle(w, func(ctx context.Context, j jobB, jc queuey.JobContext) error {
		return queuey.Fatalf("b %d: the input is wrong", j.N)
	}))
	p, err := queuey.NewProducer(ctx, backend, f.set, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(j queuey.Job) string {
		id, err := p.Enqueue(ctx, j)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		return id
	}
	a1, b1, a2 = enqueue(jobA{1, "first"}), enqueue(jobB{2}), enqueue(jobA{3, "third"})

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for i := range 3 {
		select {
		case <-dead:
		case <-ctx.Done():
			t.Errorf("only %d of the 3 jobs were dead-lettered", i)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return a1, a2, b1
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeadLetters(t *testing.T) {
	after := 30 * time.Second
	f := newFixture(t, jobs, after)
	a1, a2, b1 := f.failAll(t)
	dead := broker.DeadQueueName(f.queue)

	t.Run("list shows a row per dead letter and the count", func(t *testing.T) {
		r := cli(t, "", f.args("list")...)
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0", r.code)
		}
		lines := slices.Collect(strings.Lines(r.stdout))
		if len(lines) != 5 {
			t.Fatalf("printed %d lines, want a header, 3 rows and the count", len(lines))
		}
		if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"ID", "KIND", "REASON", "ATTEMPTS", "AGE"}) {
			t.Errorf("header: got %q", got)
		}
		for id, want := range map[string]string{a1: "a 1: upstream said no", a2: "a 3: upstream said no", b1: "b 2: the input is wrong"} {
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, id+" ") })
			if i < 0 {
				t.Errorf("no row for %s", id)
				continue
			}
			if !strings.Contains(lines[i], want) {
				t.Errorf("row of %s: got %q, want the reason %q in it", id, lines[i], want)
			}
			if fields := strings.Fields(lines[i]); fields[len(fields)-2] != "1" || !strings.HasSuffix(fields[len(fields)-1], "s") {
				t.Errorf("row of %s: got %q, want 1 attempt and an age in seconds", id, lines[i])
			}
		}
		if got, want := lines[4], "3 dead letters in "+dead+"\n"; got != want {
			t.Errorf("last line: got %q, want %q", got, want)
		}
	})

	t.Run("list -json prints a line per dead letter", func(t *testing.T) {
		list := f.listed(t)
		if diff := gocmp.Diff(idsOf(list), []string{a1, a2, b1}, sorted); diff != "" {
			t.Errorf("ids (-got +want):\n%s", diff)
		}
		for _, d := range list {
			var p struct{ N int }
			if err := json.Unmarshal(d.Payload, &p); err != nil || p.N == 0 || d.Attempts != 1 || d.Reason == "" || d.EnqueuedAt.IsZero() {
				t.Errorf("got %+v, want its payload, reason, attempts and enqueue time", d)
			}
		}
	})

	t.Run("show prints the headers and the payload, indented", func(t *testing.T) {
		r := cli(t, "", f.args("show", "-id", a1)...)
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0", r.code)
		}
		for _, want := range []string{
			"id:          " + a1 + "\n",
			"kind:        a\n",
			"reason:      fatal error: a 1: upstream said no\n",
			"  x-death-reason: fatal error: a 1: upstream said no\n",
			"  x-original-queue: " + f.queue + "\n",
			"payload:\n  {\n    \"n\": 1,\n    \"note\": \"first\"\n  }\n",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q", want)
			}
		}
	})

	t.Run("show of a job id that is not there fails", func(t *testing.T) {
		r := cli(t, "", f.args("show", "-id", "f00dfeed-0000-4000-8000-000000000000")...)
		if r.code != exitError || !strings.Contains(r.stderr, "not found") {
			t.Errorf("exit %d, stderr %q; want 1 and not found", r.code, r.stderr)
		}
	})

	t.Run("replay asks first, and no replays nothing", func(t *testing.T) {
		r := cli(t, "n\n", f.args("replay", "-kind", "a")...)
		if r.code != exitOK {
			t.Errorf("exit %d, want 0", r.code)
		}
		if want := "replay 2 dead letters? [y/N] "; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks the question %q", want)
		}
		if !strings.HasSuffix(r.stderr, "[y/N] nothing was replayed\n") || r.stdout != "" {
			t.Errorf("stderr %q, stdout %q: want stderr to say nothing was replayed, after the question, and stdout nothing", r.stderr, r.stdout)
		}
		if got := len(f.listed(t)); got != 3 {
			t.Errorf("%d dead letters left, want all 3", got)
		}
		if got := f.depth(t, f.queue); got != 0 {
			t.Errorf("%d jobs on the work queue, want none", got)
		}
	})

	t.Run("replay with no answer on stdin fails and replays nothing", func(t *testing.T) {
		r := cli(t, "", f.args("replay", "-all")...)
		if r.code != exitError || !strings.Contains(r.stderr, "-yes") {
			t.Errorf("exit %d, stderr %q; want 1 and a hint at -yes", r.code, r.stderr)
		}
		if got := len(f.listed(t)); got != 3 {
			t.Errorf("%d dead letters left, want all 3", got)
		}
	})

	t.Run("replay -id of a job that is not there replays nothing", func(t *testing.T) {
		r := cli(t, "", f.args("replay", "-id", a1+",f00dfeed-0000-4000-8000-000000000000", "-yes")...)
		if r.code != exitError || !strings.Contains(r.stderr, "f00dfeed-0000-4000-8000-000000000000") {
			t.Errorf("exit %d, stderr %q; want 1 and the missing id", r.code, r.stderr)
		}
		if got := len(f.listed(t)); got != 3 {
			t.Errorf("%d dead letters left, want all 3", got)
		}
	})

	t.Run("replay -kind -yes replays that kind only", func(t *testing.T) {
		r := cli(t, "", f.args("replay", "-kind", "a", "-yes")...)
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0", r.code)
		}
		if want := "replayed 2/2\nreplayed 2 dead letters to " + f.queue + "\n"; r.stderr != want {
			t.Errorf("stderr: got %q, want %q: the progress, then what it did", r.stderr, want)
		}
		if r.stdout != "" {
			t.Errorf("stdout: got %q, want nothing", r.stdout)
		}
		if diff := gocmp.Diff(idsOf(f.listed(t)), []string{b1}); diff != "" {
			t.Errorf("left in the dead letters (-got +want):\n%s", diff)
		}
		var got []string
		for _, env := range f.take(t, f.queue) {
			got = append(got, env.JobID)
			if env.JobType != "a" || env.Attempt != 1 || env.Priority != 0 {
				t.Errorf("replayed %+v, want kind a at attempt 1, priority 0", env)
			}
		}
		if diff := gocmp.Diff(got, []string{a1, a2}, sorted); diff != "" {
			t.Errorf("on the work queue (-got +want):\n%s", diff)
		}
	})

	t.Run("replay -after holds the job", func(t *testing.T) {
		r := cli(t, "y\n", f.args("replay", "-id", b1, "-after", after.String())...)
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0", r.code)
		}
		if got := len(f.listed(t)); got != 0 {
			t.Errorf("%d dead letters left, want none", got)
		}
		if got := f.depth(t, broker.HoldQueueName(f.queue, after)); got != 1 {
			t.Errorf("%d jobs held, want 1", got)
		}
		if got := f.depth(t, f.queue); got != 0 {
			t.Errorf("%d jobs on the work queue, want none yet", got)
		}
	})

	t.Run("list of no dead letters says so", func(t *testing.T) {
		r := cli(t, "", f.args("list")...)
		if want := "no dead letters in " + dead + "\n"; r.code != exitOK || r.stdout != want {
			t.Errorf("exit %d, stdout %q; want 0 and %q", r.code, r.stdout, want)
		}
	})
}

func TestReplayReportsProgressEveryHundred(t *testing.T) {
	f := newFixture(t, jobs)
	backend := f.dial(t)
	defer backend.Close()
	const n = 250
	for i := range n {
		env := broker.NewEnvelope("a", f.queue, json.RawMessage(`{"n":`+strconv.Itoa(i)+`}`), time.Now())
		msg, err := env.Message()
		must(t, err)
		must(t, backend.DeadLetter(t.Context(), broker.DeadLetter{Message: msg, Reason: fmt.Sprintf("failed %d", i)}))
	}
	// Something that is not an envelope: listed, never replayed.
	must(t, backend.DeadLetter(t.Context(), broker.DeadLetter{Message: broker.Message{Queue: f.queue, Body: []byte("not json")}, Reason: "malformed"}))

	r := cli(t, "", f.args("list")...)
	if want := fmt.Sprintf("%d dead letters in %s\n", n+1, broker.DeadQueueName(f.queue)); r.code != exitOK || !strings.HasSuffix(r.stdout, want) {
		t.Errorf("list: exit %d, want 0 and the count %q", r.code, want)
	}
	if !slices.ContainsFunc(slices.Collect(strings.Lines(r.stdout)), func(l string) bool {
		return slices.Equal(strings.Fields(l), []string{"-", "(malformed)", "malformed", "0", "-"})
	}) {
		t.Errorf("list shows no row for the malformed dead letter")
	}

	r = cli(t, "yes\n", f.args("replay", "-all")...)
	if r.code != exitOK {
		t.Fatalf("replay: exit %d, want 0", r.code)
	}
	want := fmt.Sprintf("malformed dead letters in %s, not envelopes, which no replay takes and which stay there: 1\n"+
		"%d dead letters of the %d in %s match -all.\nreplay %d dead letters? [y/N] replayed 100/%d\nreplayed 200/%d\nreplayed %d/%d\n"+
		"replayed %d dead letters to %s\n",
		broker.DeadQueueName(f.queue), n, n+1, broker.DeadQueueName(f.queue), n, n, n, n, n, n, f.queue)
	if r.stderr != want {
		t.Errorf("stderr: got %q, want %q", r.stderr, want)
	}
	if got := f.depth(t, f.queue); got != n {
		t.Errorf("%d jobs on the work queue, want %d", got, n)
	}
	if list := f.listed(t); len(list) != 1 || !list[0].Malformed || list[0].Body != "not json" {
		t.Errorf("left in the dead letters: %+v, want only the malformed one", list)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	base := []string{"-url", "amqp://nobody:secret@127.0.0.1:1/", "-queue", "q"} // never dialled
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "usage: queuey dead"},
		{"an unknown command", []string{"alive"}, `unknown command "alive"`},
		{"dead without a subcommand", []string{"dead"}, "usage: queuey dead"},
		{"an unknown subcommand", []string{"dead", "purge"}, `unknown command "purge"`},
		{"an unknown flag", []string{"dead", "list", "-colour"}, "flag provided but not defined: -colour"},
		{"list without -queue", []string{"dead", "list"}, "-queue is required"},
		{"a stray argument", append([]string{"dead", "list"}, append(base, "extra")...), `unexpected argument "extra"`},
		{"a max priority too high", append([]string{"dead", "list", "-max-priority", "256"}, base...), "-max-priority 256 is outside -1..255"},
		{"a max priority too low", append([]string{"dead", "list", "-max-priority", "-2"}, base...), "-max-priority -2 is outside -1..255"},
		{"a reserved queue name", []string{"dead", "list", "-prefix", "amq", "-queue", "x"}, `"amq." prefix is reserved`},
		{"a dead-letter queue for -queue", []string{"dead", "list", "-queue", "work.dead"}, `names a dead-letter queue; name its work queue: -queue work`},
		{"a hold queue for -queue", []string{"dead", "list", "-queue", "work.deferred.5000"}, `names a hold queue; name its work queue: -queue work`},
		{"show without -id", append([]string{"dead", "show"}, base...), "-id is required"},
		{"replay without a selector", append([]string{"dead", "replay"}, base...), "exactly one of -id, -kind and -all"},
		{"replay with two selectors", append([]string{"dead", "replay", "-kind", "a", "-all"}, base...), "exactly one of -id, -kind and -all"},
		{"replay of an empty id list", append([]string{"dead", "replay", "-id", ", ,"}, base...), "names no job id"},
		{"replay after a negative wait", append([]string{"dead", "replay", "-all", "-after", "-1s"}, base...), "-after -1s is negative"},
		{"a wait that is not a duration", append([]string{"dead", "replay", "-all", "-after", "soon"}, base...), `invalid value "soon" for flag -after`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, "", tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want 2", r.code)
			}
			if !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "usage: queuey") {
				t.Errorf("stderr: got %q, want %q and the usage", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout: got %q, want nothing", r.stdout)
			}
		})
	}
}

func TestHelpExits0(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"dead", "-h"}, {"dead", "replay", "-h"}} {
		r := cli(t, "", args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "usage: queuey dead") {
			t.Errorf("queuey %s: exit %d, stdout %q; want 0 and the usage", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}

func TestConnectionErrorsExit1WithoutThePassword(t *testing.T) {
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	password := "not-the-password-" + randomHex()
	u.User = url.UserPassword(cmp.Or(u.User.Username(), "guest"), password)
	wrong := u.String()
	u.Host = "127.0.0.1:1" // nobody listens there
	nobody := u.String()

	// A refused login takes the broker seconds to answer: one command
	// tries it; every command tries a broker that is not there.
	everyCommand := [][]string{{"list"}, {"show", "-id", "x"}, {"replay", "-all", "-yes"}}
	for _, tc := range []struct {
		name, url, want string
		commands        [][]string
	}{
		{"a wrong password", wrong, "refused the user name or password", everyCommand[2:]},
		{"no broker", nobody, "cannot reach", everyCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range tc.commands {
				args := append([]string{"dead", cmd[0], "-url", tc.url, "-queue", "q"}, cmd[1:]...)
				r := cli(t, "", args...)
				if r.code != exitError || !strings.Contains(r.stderr, tc.want) {
					t.Errorf("%s: exit %d, stderr %q; want 1 and %q\n%s", cmd[0], r.code, r.stderr, tc.want, needsBroker)
				}
				if strings.Contains(r.stdout+r.stderr, password) {
					t.Errorf("%s: the output shows the password", cmd[0])
				}
			}
		})
	}

	t.Run("from QUEUEY_AMQP_URL", func(t *testing.T) {
		t.Setenv("QUEUEY_AMQP_URL", wrong)
		r := cli(t, "", "dead", "list", "-queue", "q")
		if r.code != exitError || strings.Contains(r.stderr, password) || !strings.Contains(r.stderr, "xxxxx") {
			t.Errorf("exit %d, stderr %q; want 1 and the redacted URL", r.code, r.stderr)
		}
	})
}

func TestAQueueThatIsNotThereIsNotCreated(t *testing.T) {
	f := newFixture(t, jobs)
	f.set.Prefix += "-typo"
	f.queue = broker.QueueName(f.set.Prefix, jobs.Name)
	t.Cleanup(func() { f.deleteQueues(t, []string{f.queue, broker.DeadQueueName(f.queue)}) })

	for _, args := range [][]string{f.args("list"), f.args("show", "-id", "x"), f.args("replay", "-all", "-yes")} {
		r := cli(t, "", args...)
		if r.code != exitError || !strings.Contains(r.stderr, "there is no queue "+strconv.Quote(f.queue)) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and no such queue", args[1], r.code, r.stderr)
		}
	}
	for _, q := range []string{f.queue, broker.DeadQueueName(f.queue)} {
		if f.exists(t, q) {
			t.Errorf("%s was created", q)
		}
	}
}

// written is what the command wrote to one stream, between writes to the
// other.
type written struct{ stream, text string }

// transcript records the writes to stdout and stderr in the order they
// were made, as a terminal shows them.
type transcript struct {
	mu     sync.Mutex
	writes []written
}

// stream is a writer that records into tr as name.
func (tr *transcript) stream(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if n := len(tr.writes); n > 0 && tr.writes[n-1].stream == name {
			tr.writes[n-1].text += string(p)
		} else {
			tr.writes = append(tr.writes, written{name, string(p)})
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// streams runs the command with args and stdin, and returns what it
// wrote, stream by stream, in order.
func streams(t *testing.T, stdin string, args ...string) []written {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var tr transcript
	code := run(ctx, args, strings.NewReader(stdin), tr.stream("stdout"), tr.stream("stderr"))
	t.Logf("queuey %s\nexit %d\n%q", strings.Join(args, " "), code, tr.writes)
	if code != exitOK {
		t.Fatalf("queuey %s: exit %d, want 0", strings.Join(args, " "), code)
	}
	return tr.writes
}

// What a user may pipe or keep (a list, its JSON, a dead letter, the
// usage asked for with -h) goes to stdout, and only that; the rest (a
// replay's question, its progress and what it did, notices, errors) goes
// to stderr, in the order it happens.
func TestEachLineGoesToItsStream(t *testing.T) {
	f := newFixture(t, jobs)
	a1, _, _ := f.failAll(t)
	dead := broker.DeadQueueName(f.queue)
	only := func(stream string) func(t *testing.T, got []written) {
		return func(t *testing.T, got []written) {
			if len(got) != 1 || got[0].stream != stream || got[0].text == "" {
				t.Errorf("got %q, want output on %s only", got, stream)
			}
		}
	}
	onStderr := func(text string) func(t *testing.T, got []written) {
		return func(t *testing.T, got []written) {
			if diff := gocmp.Diff(got, []written{{"stderr", text}}, gocmp.AllowUnexported(written{})); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  func(t *testing.T, got []written)
	}{
		{"list", "", f.args("list"), only("stdout")},
		{"list -json", "", f.args("list", "-json"), only("stdout")},
		{"show", "", f.args("show", "-id", a1), only("stdout")},
		{"-h", "", f.args("replay", "-h"), only("stdout")},
		{"replay answered no", "n\n", f.args("replay", "-kind", "b"), onStderr(
			"1 dead letter of the 3 in " + dead + " match kind \"b\".\nreplay 1 dead letter? [y/N] nothing was replayed\n")},
		{"replay of nothing", "", f.args("replay", "-kind", "c", "-yes"), onStderr(
			"no dead letters in " + dead + " match kind \"c\": nothing to replay\n")},
		{"replay", "y\n", f.args("replay", "-kind", "a"), onStderr(
			"2 dead letters of the 3 in " + dead + " match kind \"a\".\nreplay 2 dead letters? [y/N] replayed 2/2\n" +
				"replayed 2 dead letters to " + f.queue + "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.want(t, streams(t, tc.stdin, tc.args...)) })
	}
}
