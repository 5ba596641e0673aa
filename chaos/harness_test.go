package chaos_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/chaos"
)

// The suite runs only when asked: its faults disturb the shared broker.
// QUEUEY_FAULTS=1 runs the short set (a few minutes, no broker restart);
// QUEUEY_CHAOS=full adds the long ones (broker crash and stop, frozen
// broker, consumer timeout, soak).
func needFaults(t *testing.T) {
	t.Helper()
	if os.Getenv("QUEUEY_FAULTS") != "1" {
		t.Skip("disturbs the shared broker; run with QUEUEY_FAULTS=1 (make faults runs every fault test)")
	}
}

func needFull(t *testing.T) {
	t.Helper()
	needFaults(t)
	if os.Getenv("QUEUEY_CHAOS") != "full" {
		t.Skip("part of the full set: QUEUEY_CHAOS=full (make faults)")
	}
}

var (
	scoresMu sync.Mutex
	scores   []string
	binDir   string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chaosworker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if len(scores) > 0 {
		fmt.Println("\nchaos scores:")
		for _, s := range scores {
			fmt.Println(s)
		}
		if path := os.Getenv("QUEUEY_CHAOS_SCORES"); path != "" {
			_ = os.WriteFile(path, []byte(strings.Join(scores, "\n")+"\n"), 0o644)
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// workerBinary builds cmd/chaosworker once per test binary, with the race
// detector when the tests have it.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		out := filepath.Join(binDir, "chaosworker")
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/queuey-go/queuey/chaos/cmd/chaosworker")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build chaosworker: %v\n%s", err, b)
			return
		}
		workerBin = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

// ---------------------------------------------------------------- broker

// ctl runs rabbitmqctl with a timeout.
func ctl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func mustCtl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := ctl(60*time.Second, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// evalTerm runs rabbitmqctl eval and returns its output, trimmed.
func evalTerm(t *testing.T, expr string) string {
	t.Helper()
	return strings.TrimSpace(mustCtl(t, "eval", expr))
}

// brokerUp reports whether the broker's app answers.
func brokerUp() bool {
	_, err := ctl(15*time.Second, "await_startup", "--timeout", "10")
	return err == nil
}

// ensureBroker brings the broker back whatever state a fault left it in:
// an app stopped with stop_app, a frozen (SIGSTOP) node or a dead one.
func ensureBroker(t *testing.T) {
	t.Helper()
	if pid := beamPIDFile(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT) // harmless when not stopped
	}
	if brokerUp() {
		return
	}
	if _, err := ctl(60*time.Second, "start_app"); err == nil && brokerUp() {
		return
	}
	// No pipes: the detached node must not hold this process's output open.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rabbitmq-server", "-detached")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := cmd.Run(); err != nil {
		t.Errorf("rabbitmq-server -detached: %v", err)
	}
	// await_startup fails at once while the node is not even registered.
	deadline := time.Now().Add(150 * time.Second)
	for {
		_, err := ctl(70*time.Second, "await_startup", "--timeout", "60")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the broker did not come back: %v", err)
			return
		}
		time.Sleep(time.Second)
	}
}

// beamPID is the broker's OS process id.
func beamPID(t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.Trim(evalTerm(t, "os:getpid()."), `"`))
	if err != nil || pid <= 1 {
		t.Fatalf("broker pid: %v", err)
	}
	lastBeamPID = pid
	return pid
}

var lastBeamPID int

func beamPIDFile() int { return lastBeamPID }

// restoreAlarms puts the resource limits back to what they were at the
// start (memory watermark 0.4 and disk 50 MB unless read otherwise).
func restoreAlarms(t *testing.T, mem, disk string) {
	t.Helper()
	if _, err := ctl(60*time.Second, "set_vm_memory_high_watermark", mem); err != nil {
		t.Errorf("restore memory watermark: %v", err)
	}
	if _, err := ctl(60*time.Second, "set_disk_free_limit", disk); err != nil {
		t.Errorf("restore disk limit: %v", err)
	}
}

type queueRow struct {
	Name      string
	Messages  int
	Ready     int
	Unacked   int
	Consumers int
	Arguments map[string]any
}

// listQueues reads the queues whose names start with prefix.
func listQueues(t *testing.T, prefix string) map[string]queueRow {
	t.Helper()
	out := mustCtl(t, "list_queues", "name", "messages", "messages_ready", "messages_unacknowledged", "consumers", "arguments", "--formatter", "json", "--quiet")
	var rows []struct {
		Name      string  `json:"name"`
		Messages  int     `json:"messages"`
		Ready     int     `json:"messages_ready"`
		Unacked   int     `json:"messages_unacknowledged"`
		Consumers int     `json:"consumers"`
		Arguments [][]any `json:"arguments"`
	}
	if i := strings.Index(out, "["); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list_queues: %v\n%s", err, out)
	}
	got := map[string]queueRow{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Name, prefix) {
			continue
		}
		q := queueRow{Name: r.Name, Messages: r.Messages, Ready: r.Ready, Unacked: r.Unacked, Consumers: r.Consumers, Arguments: map[string]any{}}
		for _, a := range r.Arguments {
			if len(a) == 3 {
				q.Arguments[fmt.Sprint(a[0])] = a[2]
			}
		}
		got[r.Name] = q
	}
	return got
}

// deletePrefixed deletes every queue whose name starts with prefix and
// returns how many are left (a leak if any).
func deletePrefixed(t *testing.T, prefix string) int {
	t.Helper()
	conn, err := amqp.Dial(rabbittest.URL())
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return -1
	}
	defer conn.Close()
	for range 3 {
		qs := listQueues(t, prefix)
		if len(qs) == 0 {
			return 0
		}
		for name := range qs {
			ch, err := conn.Channel()
			if err != nil {
				t.Errorf("cleanup: %v", err)
				return -1
			}
			_, _ = ch.QueueDelete(name, false, false, false) // a hold queue may have expired meanwhile
			_ = ch.Close()
		}
	}
	return len(listQueues(t, prefix))
}

type connRow struct {
	PID      string
	Name     string
	Channels int
}

// listConns reads the broker's connections whose connection_name starts
// with prefix. The JSON listing has the client properties; the pid that
// close_connection takes is in the plain one, joined by the peer name.
func listConns(t *testing.T, prefix string) []connRow {
	t.Helper()
	out := mustCtl(t, "list_connections", "name", "channels", "client_properties", "--formatter", "json", "--quiet")
	var rows []map[string]any
	if i := strings.Index(out, "["); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list_connections: %v\n%s", err, out)
	}
	var got []connRow
	for _, r := range rows {
		name := connectionName(r["client_properties"])
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		ch, _ := r["channels"].(float64)
		got = append(got, connRow{PID: fmt.Sprint(r["name"]), Name: name, Channels: int(ch)})
	}
	if len(got) == 0 {
		return nil
	}
	pids := map[string]string{}
	for _, line := range strings.Split(mustCtl(t, "list_connections", "pid", "name", "--quiet", "--no-table-headers"), "\n") {
		if f := strings.SplitN(line, "\t", 2); len(f) == 2 {
			pids[strings.TrimSpace(f[1])] = strings.TrimSpace(f[0])
		}
	}
	for i := range got {
		got[i].PID = pids[got[i].PID]
	}
	return got
}

// connectionName digs connection_name out of client_properties, which the
// JSON formatter writes as [name, type, value] triples.
func connectionName(props any) string {
	list, _ := props.([]any)
	for _, p := range list {
		triple, _ := p.([]any)
		if len(triple) == 3 && triple[0] == "connection_name" {
			return fmt.Sprint(triple[2])
		}
	}
	return ""
}

// closeConnection closes, from the broker's side, the backend's
// connections: the one named exactly name (publishing) and its consumers'
// (name + " (consume)"), waiting for them to exist; it returns the window
// the fault took.
func closeConnection(t *testing.T, name string) chaos.Window {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pids []string // the consumers' first: that cut is the one a worker feels
		for _, c := range listConns(t, name) {
			switch {
			case c.PID == "":
			case c.Name == name+" (consume)":
				pids = append([]string{c.PID}, pids...)
			case c.Name == name:
				pids = append(pids, c.PID)
			}
		}
		if len(pids) > 0 {
			from := time.Now()
			for _, pid := range pids {
				mustCtl(t, "close_connection", pid, "chaos: close_connection fault")
			}
			return chaos.Window{Name: "close_connection", From: from, To: time.Now()}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s", name)
		}
		time.Sleep(100 * time.Millisecond) // the reconnect is under way
	}
}

// brokerLog finds the broker's log file and the size it has now.
func brokerLog(t *testing.T) (string, int64) {
	t.Helper()
	path := ""
	out, err := ctl(30*time.Second, "status")
	if err == nil {
		for _, l := range strings.Split(out, "\n") {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
			if strings.HasSuffix(l, ".log") && !strings.Contains(l, "_upgrade") && strings.HasPrefix(l, "/") {
				path = l
				break
			}
		}
	}
	if path == "" {
		matches, _ := filepath.Glob("/var/log/rabbitmq/rabbit@*.log")
		for _, m := range matches {
			if !strings.Contains(m, "_upgrade") {
				path = m
			}
		}
	}
	if path == "" {
		return "", 0
	}
	fi, err := os.Stat(path)
	if err != nil {
		return path, 0
	}
	return path, fi.Size()
}

// logSince counts the lines of the broker log written after offset that
// contain needle.
func logSince(path string, offset int64, needle string) (int, []string) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, nil
	}
	n := 0
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			n++
			if len(lines) < 3 {
				lines = append(lines, sc.Text())
			}
		}
	}
	return n, lines
}

// brokerLogTime is the time of the first broker log line after offset
// that contains needle.
func brokerLogTime(path string, offset int64, needle string) (time.Time, bool) {
	_, lines := logSince(path, offset, needle)
	if len(lines) == 0 || len(lines[0]) < 32 {
		return time.Time{}, false
	}
	at, err := time.Parse("2006-01-02 15:04:05.999999-07:00", lines[0][:32])
	return at, err == nil
}

// ---------------------------------------------------------------- rig

// rig is one fault run: its queues, its producer side, its worker
// processes, its attempts and fault windows.
type rig struct {
	t      *testing.T
	fault  string
	prefix string
	queue  string
	dir    string

	backend  *rabbitmq.Backend
	producer *queuey.Producer
	prodLogs *syncBuffer

	mu       sync.Mutex
	seq      int
	attempts []chaos.Attempt
	faults   []chaos.Window
	workers  []*proc
	backends []*rabbitmq.Backend
	raws     []*amqp.Connection
	closers  []func() // closed after the backends, before goroutines are counted

	baseGoroutines int
	logPath        string
	logOffset      int64
	scored         bool
}

type rigOptions struct {
	prefetch int
	url      string // the producer's broker URL (a proxy), default rabbittest.URL()
	opts     rabbitmq.Options
}

func newRig(t *testing.T, fault string, o rigOptions) *rig {
	t.Helper()
	r := &rig{t: t, fault: fault, prefix: unique(fault), dir: t.TempDir(), baseGoroutines: runtime.NumGoroutine()}
	if keep := os.Getenv("QUEUEY_CHAOS_KEEP"); keep != "" { // ledgers and logs, for a post-mortem
		dir, err := os.MkdirTemp(keep, fault+"-")
		if err != nil {
			t.Fatal(err)
		}
		r.dir = dir
		t.Logf("ledgers and logs kept in %s", dir)
	}
	r.queue = r.prefix + "." + chaos.WorkQueue
	r.logPath, r.logOffset = brokerLog(t)
	t.Cleanup(r.cleanup)
	r.prodLogs = &syncBuffer{}
	o.opts.ConnectionName = r.prefix + ".producer"
	o.opts.Logger = slog.New(slog.NewJSONHandler(r.prodLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.opts.ReconnectMin = cmp.Or(o.opts.ReconnectMin, 50*time.Millisecond)
	o.opts.ReconnectMax = cmp.Or(o.opts.ReconnectMax, time.Second)
	r.backend = r.dial(cmp.Or(o.url, rabbittest.URL()), &o.opts)
	var err error
	r.producer, err = queuey.NewProducer(t.Context(), r.backend, chaos.QueueSet(r.prefix, cmp.Or(o.prefetch, 4)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) dial(url string, opts *rabbitmq.Options) *rabbitmq.Backend {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 20*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, url, opts)
	if err != nil {
		r.t.Fatalf("these tests need RabbitMQ on 127.0.0.1:5672: %v", err)
	}
	r.mu.Lock()
	r.backends = append(r.backends, b)
	r.mu.Unlock()
	return b
}

// newProducer is another producer with a connection of its own.
func (r *rig) newProducer(name string) *queuey.Producer {
	r.t.Helper()
	b := r.dial(rabbittest.URL(), &rabbitmq.Options{
		ConnectionName: r.prefix + "." + name, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second,
		Logger: slog.New(slog.NewJSONHandler(r.prodLogs, nil)),
	})
	p, err := queuey.NewProducer(r.t.Context(), b, chaos.QueueSet(r.prefix, 4), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// enqueue makes the next job from tmpl and enqueues it with p (nil: the
// rig's producer), after delay when positive, with a deadline.
func (r *rig) enqueue(p *queuey.Producer, tmpl chaos.Job, delay, deadline time.Duration) chaos.Attempt {
	if p == nil {
		p = r.producer
	}
	r.mu.Lock()
	r.seq++
	j := tmpl
	j.Seq = r.seq
	r.mu.Unlock()
	now := time.Now()
	j.NotBefore = now.Add(delay).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var id string
	var err error
	if delay > 0 {
		id, err = p.EnqueueAfter(ctx, j, delay)
	} else {
		id, err = p.Enqueue(ctx, j)
	}
	a := chaos.Attempt{ID: id, Seq: j.Seq, Confirmed: err == nil, NotBefore: time.Unix(0, j.NotBefore), ExpectDead: j.Crash || j.Fail, Delayed: delay > 0}
	if err != nil {
		a.Err = err.Error()
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
	return a
}

// withdraw takes the confirmed job seq out of queue (basic.get and ack)
// and out of the run's attempts: the test removed it, the library did not
// lose it.
func (r *rig) withdraw(seq int, queue string) {
	r.t.Helper()
	conn, err := amqp.Dial(rabbittest.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		r.t.Fatalf("withdraw from %s: %v %v", queue, ok, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.attempts {
		if a.Seq == seq {
			if a.ID != d.MessageId {
				r.t.Fatalf("withdrew %s, want job %d (%s)", d.MessageId, seq, a.ID)
			}
			r.attempts = slices.Delete(r.attempts, i, i+1)
			return
		}
	}
}

func (r *rig) addFault(w chaos.Window) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, w)
}

// confirmedSeqs is the set of confirmed jobs.
func (r *rig) confirmed() map[int]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[int]bool{}
	for _, a := range r.attempts {
		if a.Confirmed {
			m[a.Seq] = true
		}
	}
	return m
}

// records reads every worker's ledger.
func (r *rig) records() []chaos.Record {
	r.t.Helper()
	paths, _ := filepath.Glob(filepath.Join(r.dir, "ledger-*.jsonl"))
	recs, err := chaos.ReadLedgers(paths...)
	if err != nil {
		r.t.Fatal(err)
	}
	return recs
}

// succeeded is the set of jobs that ran to success, by seq.
func (r *rig) succeeded() map[int]bool {
	m := map[int]bool{}
	for _, rec := range r.records() {
		if rec.Ev == chaos.EvDone && rec.Err == "" {
			m[rec.Seq] = true
		}
	}
	return m
}

// started counts start records.
func (r *rig) started() int {
	n := 0
	for _, rec := range r.records() {
		if rec.Ev == chaos.EvStart {
			n++
		}
	}
	return n
}

// waitStarted waits for n start records in all.
func (r *rig) waitStarted(n int, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for r.started() < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("only %d job starts, waiting for %d", r.started(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drain waits until every confirmed job (and every job in want) ran to
// success, up to within; it returns how long that took.
func (r *rig) drain(within time.Duration, extra ...int) time.Duration {
	r.t.Helper()
	start := time.Now()
	want := r.confirmed()
	for _, s := range extra {
		want[s] = true
	}
	r.mu.Lock()
	for _, a := range r.attempts {
		if a.ExpectDead {
			delete(want, a.Seq)
		}
	}
	r.mu.Unlock()
	for {
		ok := r.succeeded()
		missing := 0
		for s := range want {
			if !ok[s] {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			r.t.Errorf("drain: %d confirmed jobs still not run after %v", missing, within)
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deadLetters reads the work queue's dead letters (without taking them):
// job id (or message id) → reason.
func (r *rig) deadLetters() map[string]string {
	r.t.Helper()
	return readDead(r.t, broker.DeadQueueName(r.queue))
}

func readDead(t *testing.T, queue string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range getAll(t, queue) {
		out[d.MessageId] = fmt.Sprint(d.Headers[broker.HeaderDeathReason])
	}
	return out
}

// getAll basic.gets every message of queue on a channel of its own and
// gives them back (the channel closes unacked).
func getAll(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(rabbittest.URL())
	if err != nil {
		t.Fatalf("read %s: %v", queue, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// finish scores the run: it stops the workers gracefully, reads the
// ledgers, counts leaks, lets adjust add the test's own figures and
// checks, prints the score line and fails the test unless the run passes.
func (r *rig) finish(adjust func(*chaos.Score), dead map[string]string) *chaos.Score {
	r.t.Helper()
	r.stopWorkers()
	r.mu.Lock()
	in := chaos.Input{Attempts: slices.Clone(r.attempts), Faults: slices.Clone(r.faults), Dead: dead}
	r.mu.Unlock()
	in.Records = r.records()
	score := chaos.Compute(r.fault, in)
	r.settle(score, in.Records)
	if adjust != nil {
		adjust(score)
	}
	report(r.t, score)
	return score
}

// closeOut is finish for a score the test computed itself.
func (r *rig) closeOut(score *chaos.Score) {
	r.t.Helper()
	r.stopWorkers()
	r.settle(score, r.records())
	report(r.t, score)
}

// settle counts the leaks into score: worker goroutines after a graceful
// stop, this process's goroutines once its backends are closed, the run's
// connections and channels still open, the run's queues left after
// deleting them.
func (r *rig) settle(score *chaos.Score, records []chaos.Record) {
	r.t.Helper()
	for _, rec := range records {
		if rec.Ev == chaos.EvExit {
			if d := rec.Goroutines - rec.BaseGoroutines; d > 0 {
				score.Leaks += d
				score.Fail("worker %d kept %d goroutines after Close", rec.PID, d)
			}
			if rec.RunErr != "" {
				score.Fail("worker %d: Run returned %s", rec.PID, rec.RunErr)
			}
		}
	}
	for _, w := range r.allWorkers() {
		if race := w.logContains("WARNING: DATA RACE"); race > 0 {
			score.Fail("worker %d: data race", w.pid)
		}
		if p := w.logContains("panic:"); p > 0 {
			score.Fail("worker %d panicked", w.pid)
		}
	}
	for _, b := range r.takeBackends() {
		_ = b.Close()
	}
	r.runClosers()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > r.baseGoroutines && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if d := runtime.NumGoroutine() - r.baseGoroutines; d > 0 {
		score.Leaks += d
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		r.t.Logf("goroutines over the baseline of %d:\n%s", r.baseGoroutines, buf[:n])
		score.Fail("%d goroutines left in the test process", d)
	}
	conns := listConns(r.t, r.prefix)
	for range 50 {
		if len(conns) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
		conns = listConns(r.t, r.prefix)
	}
	if len(conns) > 0 {
		chans := 0
		for _, c := range conns {
			chans += c.Channels
		}
		score.Leaks += len(conns) + chans
		score.Fail("%d connections (%d channels) of the run still open", len(conns), chans)
	}
	if left := deletePrefixed(r.t, r.prefix); left != 0 {
		score.Leaks += max(left, 1)
		score.Fail("%d queues of the run could not be deleted", left)
	}
	r.scored = true
}

// report prints and keeps the score lines, and fails the test when the
// run does not pass.
func report(t *testing.T, score *chaos.Score) {
	t.Helper()
	keepScore(score)
	if !score.Pass() {
		for _, f := range score.Failures {
			t.Errorf("%s: %s", score.Fault, f)
		}
		t.Errorf("%s did not pass: %s (examples: %s)", score.Fault, score.Line(), strings.Join(score.Examples, " "))
	}
}

// keepScore prints the score's lines and keeps them for the summary at
// the end, without judging them (a classic cluster run is reported only).
func keepScore(s *chaos.Score) {
	line, figures := s.Line(), s.FigureLine()
	scoresMu.Lock()
	scores = append(scores, line, "  "+figures)
	scoresMu.Unlock()
	fmt.Println(line)
	fmt.Println("  " + figures)
}

// takeBackends hands over the backends to close, closing the raw
// connections on the way.
func (r *rig) takeBackends() []*rabbitmq.Backend {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.raws {
		_ = c.Close()
	}
	r.raws = nil
	b := r.backends
	r.backends = nil
	return b
}

func (r *rig) allWorkers() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.workers)
}

// stopWorkers stops every worker still running with SIGTERM.
func (r *rig) stopWorkers() {
	for _, w := range r.allWorkers() {
		if !w.exited() {
			w.term()
		}
	}
	for _, w := range r.allWorkers() {
		if err := w.wait(40 * time.Second); err != nil {
			r.t.Errorf("worker %d: %v", w.pid, err)
		}
	}
}

// onSettle registers f to run once the backends are closed.
func (r *rig) onSettle(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closers = append(r.closers, f)
}

func (r *rig) runClosers() {
	r.mu.Lock()
	fs := r.closers
	r.closers = nil
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func (r *rig) cleanup() {
	for _, w := range r.allWorkers() {
		if r.t.Failed() && !w.exited() {
			_ = w.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, into its log
			select {
			case <-w.done:
			case <-time.After(5 * time.Second):
			}
		}
		w.kill()
		_ = w.wait(10 * time.Second)
	}
	for _, b := range r.takeBackends() {
		_ = b.Close()
	}
	r.runClosers()
	if !r.scored {
		deletePrefixed(r.t, r.prefix)
	}
	if r.t.Failed() {
		for _, w := range r.allWorkers() {
			r.t.Logf("worker %d log (tail):\n%s", w.pid, w.logTail(4000))
		}
		r.t.Logf("producer log (tail):\n%s", tail(r.prodLogs.String(), 3000))
	}
}

// ---------------------------------------------------------------- workers

type workerOptions struct {
	prefetch        int
	concurrency     int
	poisonAfter     int
	shutdownTimeout time.Duration
	heartbeat       time.Duration
	url             string
	name            string        // connection-name suffix, default w<N>
	scheduleEvery   time.Duration // when set, a candidate leader of the "chaos" schedule
	clockSkew       time.Duration // how far ahead its clock reads
}

// proc is one chaosworker process.
type proc struct {
	cmd     *exec.Cmd
	pid     int
	name    string // connection name
	logPath string
	started time.Time

	done     chan struct{}
	exitedAt time.Time
	state    *os.ProcessState
	waitErr  error
}

// startWorker starts a chaosworker process for the rig's queues.
func (r *rig) startWorker(o workerOptions) *proc {
	r.t.Helper()
	bin := workerBinary(r.t)
	r.mu.Lock()
	n := len(r.workers) + 1
	r.mu.Unlock()
	name := r.prefix + "." + cmp.Or(o.name, fmt.Sprintf("w%d", n))
	args := []string{
		"-prefix", r.prefix,
		"-ledger", filepath.Join(r.dir, fmt.Sprintf("ledger-%03d.jsonl", n)),
		"-prefetch", strconv.Itoa(cmp.Or(o.prefetch, 4)),
		"-concurrency", strconv.Itoa(o.concurrency),
		"-poison-after", strconv.Itoa(o.poisonAfter),
		"-shutdown-timeout", cmp.Or(o.shutdownTimeout, 10*time.Second).String(),
		"-conn-name", name,
		"-heartbeat", o.heartbeat.String(),
		"-schedule-every", o.scheduleEvery.String(),
		"-clock-skew", o.clockSkew.String(),
	}
	p := &proc{name: name, logPath: filepath.Join(r.dir, fmt.Sprintf("worker-%03d.log", n)), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "QUEUEY_AMQP_URL="+cmp.Or(o.url, rabbittest.URL()))
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		r.t.Fatal(err)
	}
	p.pid, p.started = p.cmd.Process.Pid, time.Now()
	go func() {
		p.waitErr = p.cmd.Wait()
		p.exitedAt = time.Now()
		p.state = p.cmd.ProcessState
		logf.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.workers = append(r.workers, p)
	r.mu.Unlock()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and returns when it was sent.
func (p *proc) kill() time.Time {
	at := time.Now()
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	return at
}

func (p *proc) term() time.Time {
	at := time.Now()
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	return at
}

// wait waits for the process to end; an exit other than by a signal the
// test sent, a crash the test asked for, or a graceful stop is an error.
func (p *proc) wait(within time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(within):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("did not exit within %v; killed", within)
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() || ws.ExitStatus() == 0 || ws.ExitStatus() == 1 {
			return nil
		}
		return fmt.Errorf("exit status %d:\n%s", ws.ExitStatus(), p.logTail(2000))
	}
	return nil
}

func (p *proc) exitCode() int {
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && !ws.Signaled() {
		return ws.ExitStatus()
	}
	return -1
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) logTail(n int) string { return tail(p.log(), n) }

func (p *proc) logContains(s string) int { return strings.Count(p.log(), s) }

// logTimes returns the times of the JSON log lines whose msg is msg.
func logTimes(text, msg string) []time.Time {
	var out []time.Time
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			out = append(out, l.Time)
		}
	}
	return out
}

// firstAfter is the first of ts at or after t.
func firstAfter(ts []time.Time, t time.Time) (time.Time, bool) {
	for _, x := range ts {
		if !x.Before(t) {
			return x, true
		}
	}
	return time.Time{}, false
}

// waitLog waits for a log line msg at or after since in text().
func waitLog(t *testing.T, text func() string, msg string, since time.Time, within time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if at, ok := firstAfter(logTimes(text(), msg), since); ok {
			return at, true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- misc

func unique(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "chaos." + name + "." + hex.EncodeToString(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// percentile of durations, p in [0,1].
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s)-1)*p+0.5))]
}

var errTimeout = errors.New("timed out")

// within polls cond every 50 ms for up to d.
func within(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
