package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/chaos"
)

// Fault: a node of the local three-node cluster (scripts/cluster.sh) is
// killed with kill -9 while a steady stream of jobs runs, then started
// again. The worker and the producer live in the test process, each on its
// own rabbitmq.DialCluster backend over the three nodes.
//
//   - quorum: the node leading the work queue is killed, and with it the
//     leaders of its lane and of the delay level its deferrals leave from
//     (the backends dial that level's node first, and a new quorum queue is
//     led from the declaring connection's node). Nothing confirmed is lost,
//     no deferred run is early, every duplicate falls in the kill window;
//     deferrals due while the node was down come back within 30 s, those
//     released after the restart still run ahead of the backlog (they come
//     back on the lane).
//   - classic: the node holding the (classic) work queue is killed. What
//     classic loses or delays is reported, not failed on.
func TestFaultClusterNodeKilled(t *testing.T) {
	needFaults(t)
	root, urls := clusterURLs(t)
	t.Cleanup(func() { // all three nodes running, whatever happened
		if _, err := clusterScript(root, 3*time.Minute, "start"); err != nil {
			t.Errorf("scripts/cluster.sh start at the end: %v", err)
		}
	})
	t.Run("quorum", func(t *testing.T) { clusterKillRun(t, root, urls, queuey.Quorum) })
	t.Run("classic", func(t *testing.T) { clusterKillRun(t, root, urls, queuey.Classic) })
}

// clusterKillRun is one run: a worker and two producers on the cluster,
// the victim node killed and started again, the jobs drained, the run
// scored and reported.
func clusterKillRun(t *testing.T, root string, urls []string, qtype queuey.QueueType) {
	c := newClusterRun(t, root, urls, qtype)
	c.startWorker(c.newWorker())
	c.pickVictim()
	c.startProducers()
	c.killAndRestart()
	// Produce on: at least 20 s in all, and 7 s past the restart, so that
	// deferred jobs are due after it.
	pause(max(time.Until(c.began.Add(20*time.Second)), time.Until(c.up.Add(7*time.Second))))
	c.stopProducers()
	c.producedFor = time.Since(c.began)
	drained := c.drain()
	end := c.stopWorker()
	c.closeBackends()
	c.judge(drained, end)
}

// ------------------------------------------------------------ the cluster

// clusterURLs runs scripts/cluster.sh start (idempotent) from the
// repository root and returns the root and the nodes' URLs.
func clusterURLs(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "cluster.sh")); err != nil {
		t.Fatalf("no scripts/cluster.sh under %s: %v", root, err)
	}
	out, err := clusterScript(root, 3*time.Minute, "start")
	if err != nil {
		t.Fatalf("scripts/cluster.sh start: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "QUEUEY_CLUSTER="); ok {
			urls := strings.Split(v, ",")
			if len(urls) != 3 {
				t.Fatalf("scripts/cluster.sh start: expected 3 URLs, got %q", v)
			}
			return root, urls
		}
	}
	t.Fatalf("scripts/cluster.sh start printed no QUEUEY_CLUSTER= line: %q", out)
	return "", nil
}

// clusterScript runs scripts/cluster.sh with args; it returns stdout, and
// stderr in the error.
func clusterScript(root string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "cluster.sh"), args...)
	cmd.Dir = root
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("cluster.sh %s: %w: %s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.String(), nil
}

// queueNodes lists the cluster's queues with the node each lives on, by
// rabbitmqctl called the way scripts/cluster.sh calls it (the cluster's
// own HOME and cookie), through node n.
func queueNodes(n int, prefix string) (map[string]string, error) {
	server, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(server)
	if err != nil {
		return nil, err
	}
	dir := "/tmp/queuey-cluster"
	if d := os.Getenv("QUEUEY_CLUSTER_DIR"); d != "" {
		dir = d
	}
	args := []string{"env", "HOME=" + dir + "/home", "RABBITMQ_CONF_ENV_FILE=" + dir + "/rabbitmq-env.conf",
		"ERL_EPMD_ADDRESS=127.0.0.1", "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}",
		filepath.Join(filepath.Dir(real), "rabbitmqctl"), "-n", fmt.Sprintf("queuey%d@localhost", n),
		"-q", "list_queues", "name", "pid", "--no-table-headers"}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "rabbitmq", "--"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	rows := map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[0], prefix) {
			// pid is <rabbit@node.1.2.3>
			rows[f[0]] = strings.Trim(strings.SplitN(strings.TrimPrefix(f[1], "<"), ".", 2)[0], "<>")
		}
	}
	return rows, nil
}

// dialAnyNode opens a plain AMQP connection to the first node that takes
// one.
func dialAnyNode(urls []string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range urls {
		c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no node would take a connection: %w", errors.Join(errs...))
}

// deleteClusterQueues deletes the run's queues (work, dead-letter, lane,
// suspects, classic hold queues) through the first live node. The shared
// delay levels (queuey.wait.*) are left alone.
func deleteClusterQueues(t *testing.T, urls []string, work string) {
	t.Helper()
	conn, err := dialAnyNode(urls)
	if err != nil {
		t.Errorf("deleting the queues of %s: %v", work, err)
		return
	}
	defer conn.Close()
	for _, q := range []string{work, broker.DeadQueueName(work), broker.LaneQueueName(work), broker.SuspectQueueName(work),
		broker.HoldQueueName(work, clusterBackoff), broker.HoldQueueName(work, clusterDefer),
		broker.CancelLedgerName(strings.TrimSuffix(work, "."+clusterQueue)), broker.CancelFollowersName(strings.TrimSuffix(work, "."+clusterQueue))} {
		ch, err := conn.Channel() // one per queue: a failed delete closes its channel
		if err != nil {
			t.Errorf("deleting %s: %v", q, err)
			return
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("deleting %s: %v", q, err)
		}
		_ = ch.Close()
	}
}

// readyCounts returns the messages ready on each of queues, by a passive
// declare through the first live node.
func readyCounts(urls []string, queues ...string) (map[string]int, error) {
	conn, err := dialAnyNode(urls)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	counts := map[string]int{}
	for _, q := range queues {
		ch, err := conn.Channel() // one per queue: a failed declare closes its channel
		if err != nil {
			return nil, err
		}
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		counts[q] = info.Messages
		_ = ch.Close()
	}
	return counts, nil
}

// ------------------------------------------------------------ the job

// clusterJob is this test's one kind of job.
type clusterJob struct {
	Seq  int    `json:"seq"`
	Mode string `json:"mode"` // "plain", "defer" (defers once, 2 s), "fail" (fails its first attempt)
}

const clusterQueue = "work"

func (clusterJob) Kind() string        { return "cluster" }
func (clusterJob) Queue() queuey.Queue { return queuey.Queue{Name: clusterQueue} }

const (
	clusterDefer   = 2 * time.Second
	clusterBackoff = time.Second
	clusterWork    = 20 * time.Millisecond
	// clusterSlack widens the kill window on both sides when explaining
	// duplicates: an ack sent just before the kill may not have landed.
	clusterSlack = 3 * time.Second
)

// clusterMode is job seq's mode: one job in ten defers, one fails once.
func clusterMode(seq int) string {
	switch seq % 10 {
	case 0:
		return "defer"
	case 5:
		return "fail"
	}
	return "plain"
}

// ------------------------------------------------------------ the ledger

// cattempt is one job a producer tried to enqueue.
type cattempt struct {
	seq       int
	mode      string
	id        string
	called    time.Time // Enqueue called
	confirmed bool      // Enqueue returned nil
	err       error
}

// crun is one delivery the worker took up and, once its handler started,
// that handler's run.
type crun struct {
	seq                int
	attempt, deferrals int
	redelivered        bool // the broker had handed the message out before
	started            bool // the handler started (seq is known)
	start, done        time.Time
	err                error     // the handler's return; a deferral is one
	settled            time.Time // zero: never settled
	result             queuey.Result
}

// ok reports a run that ended in success.
func (r crun) ok() bool { return r.started && !r.done.IsZero() && r.err == nil }

// cledger is what the producers and the worker record: the one piece of
// state they share. Its fields, and the cruns it hands out, are read and
// written only under mu, by its methods; view copies it out for reading.
type cledger struct {
	mu       sync.Mutex
	seq      int // the last job number handed out
	attempts map[int]*cattempt
	runs     []*crun
	due      map[int]time.Time // deferred job → due again (no earlier than)
	lastRun  time.Time         // the latest handler start
}

// crunKey carries a delivery's *crun from the Deliver hook to the handler.
type crunKey struct{}

// newLedger is an empty ledger.
func newLedger() *cledger {
	return &cledger{attempts: map[int]*cattempt{}, due: map[int]time.Time{}}
}

// attempt numbers the next job, gives it its mode and records that its
// Enqueue is being called.
func (l *cledger) attempt() (seq int, mode string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	a := &cattempt{seq: l.seq, mode: clusterMode(l.seq), called: time.Now()}
	l.attempts[a.seq] = a
	return a.seq, a.mode
}

// enqueued records what Enqueue returned for job seq.
func (l *cledger) enqueued(seq int, id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.attempts[seq]
	a.id, a.confirmed, a.err = id, err == nil, err
}

// delivered records a delivery the worker took up, before its handler.
func (l *cledger) delivered(jc queuey.JobContext) *crun {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &crun{attempt: jc.Attempt, deferrals: jc.Deferrals, redelivered: jc.Redelivered}
	l.runs = append(l.runs, r)
	return r
}

// started records that r's handler started, on job seq.
func (l *cledger) started(r *crun, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.seq, r.started, r.start = seq, true, time.Now()
	l.lastRun = r.start
}

// deferred records when job seq, deferring itself, is due again: the
// earliest of its deferrals. A deferral whose delivery's ack was lost at
// the kill runs its handler again, which defers again, later; the first
// deferral's hold, confirmed, still comes back at its own time, and is
// not early for being before the second's.
func (l *cledger) deferred(seq int, due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if first, ok := l.due[seq]; !ok || due.Before(first) {
		l.due[seq] = due
	}
}

// done records what r's handler returned.
func (l *cledger) done(r *crun, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.done, r.err = time.Now(), err
}

// settled records what the broker was told about r.
func (l *cledger) settled(r *crun, res queuey.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.settled, r.result = time.Now(), res
}

// ledgerView is a copy of the ledger, read without locking.
type ledgerView struct {
	attempts map[int]cattempt
	runs     []crun
	due      map[int]time.Time
	lastRun  time.Time
}

// view copies the ledger out.
func (l *cledger) view() ledgerView {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ledgerView{attempts: make(map[int]cattempt, len(l.attempts)), runs: make([]crun, len(l.runs)),
		due: maps.Clone(l.due), lastRun: l.lastRun}
	for seq, a := range l.attempts {
		v.attempts[seq] = *a
	}
	for i, r := range l.runs {
		v.runs[i] = *r
	}
	return v
}

// succeeded is the set of jobs that ran to success.
func (v ledgerView) succeeded() map[int]bool {
	ok := map[int]bool{}
	for _, r := range v.runs {
		if r.ok() {
			ok[r.seq] = true
		}
	}
	return ok
}

// pending counts the confirmed jobs that have not run to success.
func (v ledgerView) pending() int {
	ok, n := v.succeeded(), 0
	for seq, a := range v.attempts {
		if a.confirmed && !ok[seq] {
			n++
		}
	}
	return n
}

// ------------------------------------------------------------ one run

// clusterRun is one kill-and-restart run against one queue type. The test
// goroutine owns its fields; the producers and the worker's hook and
// handler only read t, producer and ledger (set before they start) and
// write to the ledger, through its methods.
type clusterRun struct {
	t      *testing.T
	root   string   // the repository root, where scripts/cluster.sh is
	urls   []string // the three nodes
	qtype  queuey.QueueType
	name   string // the fault's name on the score line
	prefix string // the run's queue prefix
	work   string // the work queue's broker name
	set    queuey.QueueSet

	logs           *syncBuffer // the library's logs (keepLogs)
	logger         *slog.Logger
	began          time.Time
	baseGoroutines int
	backends       []*rabbitmq.Backend
	producer       *queuey.Producer
	ledger         *cledger

	cancelRun     context.CancelFunc // ends Worker.Run
	runDone       chan runReturn     // what Worker.Run returned
	end           *workerEnd         // set once the worker is stopped
	stopProducers func()             // stops the producers (idempotent)
	producedFor   time.Duration

	first     int // the node the backends dial first (levelNode)
	victim    int
	victimWhy string    // how the victim was known
	killed    bool      // the victim may be down: started again at cleanup
	killFrom  time.Time // kill -9 asked for
	up        time.Time // start-node returned: the victim is back
}

// newClusterRun names the run, registers its cleanups (the library's logs,
// its queues, its backends) and makes its producer, on a
// backend of its own, which declares the queues.
func newClusterRun(t *testing.T, root string, urls []string, qtype queuey.QueueType) *clusterRun {
	name := "cluster_" + strings.ToLower(qtype.String()) + "_node_kill"
	c := &clusterRun{t: t, root: root, urls: urls, qtype: qtype, name: name, prefix: unique(name),
		logs: &syncBuffer{}, ledger: newLedger(), began: time.Now(), baseGoroutines: runtime.NumGoroutine()}
	c.work = c.prefix + "." + clusterQueue
	c.first = c.levelNode()
	retry := queuey.FixedRetries(5, clusterBackoff)
	c.set = queuey.QueueSet{Prefix: c.prefix, Type: qtype, Queues: []queuey.Queue{{Name: clusterQueue, Retry: &retry}}}
	c.logger = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(c.keepLogs)
	// Cleanups run last registered first: the queues go after the victim
	// is back, the backends close after the worker stopped.
	t.Cleanup(func() { deleteClusterQueues(t, urls, c.work) })
	t.Cleanup(c.closeBackends)
	var err error
	c.producer, err = queuey.NewProducer(t.Context(), c.dial("producer"), c.set, nil)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	return c
}

// keepLogs shows the tail of the library's logs when the run failed, and
// writes them all under QUEUEY_CHAOS_KEEP when it is set.
func (c *clusterRun) keepLogs() {
	if c.t.Failed() {
		c.t.Logf("library logs (tail):\n%s", tail(c.logs.String(), 6000))
	}
	if dir := os.Getenv("QUEUEY_CHAOS_KEEP"); dir != "" {
		path := filepath.Join(dir, c.prefix+".log")
		if err := os.WriteFile(path, []byte(c.logs.String()), 0o644); err != nil {
			c.t.Errorf("keeping the library logs: %v", err)
		} else {
			c.t.Logf("library logs kept in %s", path)
		}
	}
}

// dial is a DialCluster backend over the three nodes, closed by
// closeBackends.
func (c *clusterRun) dial(role string) *rabbitmq.Backend {
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	urls := append(slices.Clone(c.urls[c.first-1:]), c.urls[:c.first-1]...)
	b, err := rabbitmq.DialCluster(ctx, urls, &rabbitmq.Options{
		ConnectionName: c.prefix + "." + role, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second, Logger: c.logger,
	})
	if err != nil {
		c.t.Fatalf("DialCluster (%s): %v", role, err)
	}
	c.backends = append(c.backends, b)
	return b
}

// closeBackends closes the backends dialled so far.
func (c *clusterRun) closeBackends() {
	for _, b := range c.backends {
		_ = b.Close()
	}
	c.backends = nil
}

// since is how long after the run began t was, in seconds.
func (c *clusterRun) since(t time.Time) float64 { return t.Sub(c.began).Seconds() }

// pause waits d: the fault's schedule, not a wait for some behaviour.
func pause(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// ------------------------------------------------------------ the worker

// newWorker is the run's worker, on a backend of its own, with
// Concurrency 2; its Deliver hook and its handler record into the ledger.
func (c *clusterRun) newWorker() *queuey.Worker {
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		r := c.ledger.delivered(d.Job)
		return context.WithValue(ctx, crunKey{}, r), func(o queuey.Outcome) { c.ledger.settled(r, o.Result) }
	}}
	w, err := queuey.NewWorker(c.dial("worker"), c.set, &queuey.WorkerConfig{Concurrency: 2, Hooks: hooks, Logger: c.logger})
	if err != nil {
		c.t.Fatalf("NewWorker: %v", err)
	}
	if err := queuey.Handle[clusterJob](w, c.handle); err != nil {
		c.t.Fatal(err)
	}
	return w
}

// handle is the job: 20 ms of work; a "defer" job defers itself once, by
// clusterDefer, and a "fail" job fails its first attempt.
func (c *clusterRun) handle(ctx context.Context, j clusterJob, jc queuey.JobContext) error {
	r := ctx.Value(crunKey{}).(*crun) // put there by the Deliver hook
	c.ledger.started(r, j.Seq)
	time.Sleep(clusterWork) // the job's work
	var res error
	switch {
	case j.Mode == "defer" && jc.Deferrals == 0:
		c.ledger.deferred(j.Seq, time.Now().Add(clusterDefer))
		res = queuey.Defer(clusterDefer, "not yet")
	case j.Mode == "fail" && jc.Attempt == 1:
		res = errors.New("fails once")
	}
	c.ledger.done(r, res)
	return res
}

// runReturn is what Worker.Run returned, and when.
type runReturn struct {
	err error
	at  time.Time
}

// workerEnd is how Worker.Run ended.
type workerEnd struct {
	err      error     // what Run returned; nil when it only saw its ctx end
	onItsOwn time.Time // when Run returned before its ctx ended; zero if it did not
	hung     bool      // Run did not return within 60 s of its ctx ending
}

// startWorker runs w until stopWorker, which cleanup calls too.
func (c *clusterRun) startWorker(w *queuey.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancelRun, c.runDone = cancel, make(chan runReturn, 1)
	go func() {
		err := w.Run(ctx)
		c.runDone <- runReturn{err, time.Now()}
	}()
	c.t.Cleanup(func() { c.stopWorker() })
}

// stopWorker ends Worker.Run, once, and says how it ended. A Run that does
// not return within 60 s of its ctx ending is a test error.
func (c *clusterRun) stopWorker() workerEnd {
	if c.end != nil {
		return *c.end
	}
	c.end = &workerEnd{}
	select {
	case r := <-c.runDone: // it ended on its own
		c.end.err, c.end.onItsOwn = r.err, r.at
	default:
		c.cancelRun()
		select {
		case r := <-c.runDone:
			if !errors.Is(r.err, context.Canceled) {
				c.end.err = r.err
			}
		case <-time.After(60 * time.Second):
			c.end.hung = true
			c.t.Errorf("%s: Worker.Run did not return within 60 s of its ctx ending", c.name)
		}
	}
	c.cancelRun()
	switch {
	case c.end.err != nil && !c.end.onItsOwn.IsZero():
		c.t.Logf("%s: Worker.Run ended on its own at +%.1fs: %v", c.name, c.since(c.end.onItsOwn), c.end.err)
	case c.end.err != nil:
		c.t.Logf("%s: Worker.Run returned, once stopped: %v", c.name, c.end.err)
	}
	return *c.end
}

// ------------------------------------------------------------ the fault

// deferLevel is the delay level a deferral of clusterDefer leaves from
// for the lane: its lowest bit (level 1 for 2 s).
var deferLevel = broker.DelayLevelName(bits.TrailingZeros64(uint64(clusterDefer / time.Second)))

// levelNode is the node leading deferLevel, or node 1 when the level is
// not there yet (the first backend, dialling node 1, declares it). With
// the backends dialling it first, a kill of the work queue's leader takes
// that level's leader too: its dead-letter worker starts again on another
// node and meets a lane that is electing a leader, the case that held
// deferrals for minutes on a broker left at RabbitMQ's default retry.
func (c *clusterRun) levelNode() int {
	if c.qtype != queuey.Quorum {
		return 1
	}
	n, err := c.leaderOf(deferLevel)
	if err != nil {
		c.t.Logf("%s: %s has no leader to find (%v): dialling node 1 first", c.name, deferLevel, err)
		return 1
	}
	return n
}

// pickVictim chooses the node to kill: the quorum queue's leader, or the
// node the classic queue lives on. A victim still down when the run ends
// is started again at cleanup.
func (c *clusterRun) pickVictim() {
	if c.qtype == queuey.Quorum {
		c.victim, c.victimWhy = c.leaderNode(), "the quorum queue's leader by scripts/cluster.sh node-of-leader"
		c.logLeaders()
	} else {
		c.victim, c.victimWhy = c.classicNode()
	}
	u := c.urls[c.victim-1]
	c.t.Logf("%s: the victim is node %d (%s), %s", c.name, c.victim, u[strings.LastIndex(u, ":")+1:], c.victimWhy)
	c.t.Cleanup(func() {
		if c.killed {
			if _, err := clusterScript(c.root, 3*time.Minute, "start-node", strconv.Itoa(c.victim)); err != nil {
				c.t.Errorf("start-node %d: %v", c.victim, err)
			}
		}
	})
}

// leaderNode is the node leading the quorum work queue.
func (c *clusterRun) leaderNode() int {
	n, err := c.leaderOf(c.work)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// leaderOf is the node leading quorum queue q, by scripts/cluster.sh
// node-of-leader.
func (c *clusterRun) leaderOf(q string) (int, error) {
	out, err := clusterScript(c.root, time.Minute, "node-of-leader", q)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || n < 1 || n > 3 {
		return 0, fmt.Errorf("node-of-leader %s printed %q", q, out)
	}
	return n, nil
}

// logLeaders says which of the lane's and deferLevel's leaders the kill
// takes with the work queue's; the run is valid either way, but only a
// kill of all three exercises a deferral meeting a lane with no leader.
func (c *clusterRun) logLeaders() {
	for _, q := range []string{broker.LaneQueueName(c.work), deferLevel} {
		n, err := c.leaderOf(q)
		switch {
		case err != nil:
			c.t.Logf("%s: the leader of %s: %v", c.name, q, err)
		case n == c.victim:
			c.t.Logf("%s: node %d leads %s too", c.name, n, q)
		default:
			c.t.Logf("%s: node %d, not the victim, leads %s", c.name, n, q)
		}
	}
}

// classicNode is the node the classic work queue lives on, by rabbitmqctl
// through node 2, and how that is known. When rabbitmqctl cannot say it
// is node 1: the producer declared the queue through it, the first URL.
func (c *clusterRun) classicNode() (int, string) {
	const guess = "declared through node 1, the first URL; rabbitmqctl could not say where it lives"
	rows, err := queueNodes(2, c.prefix)
	if err != nil {
		c.t.Logf("could not check the classic queue's node with rabbitmqctl: %v (killing node 1, dialled first)", err)
		return 1, guess
	}
	node := rows[c.work]
	if n, ok := strings.CutPrefix(node, "queuey"); ok && n != "" && n[0] >= '1' && n[0] <= '3' {
		return int(n[0] - '0'), "rabbitmqctl put it on " + node
	}
	c.t.Logf("rabbitmqctl put the classic queue %s on %q (killing node 1, dialled first)", c.work, node)
	return 1, guess
}

// startProducers starts two ticker-paced producers, about 130 jobs/s in
// all, more than the worker's ~100/s (Concurrency 2, 20 ms each), so that
// a backlog builds up. They run until stopProducers, which cleanup calls
// too.
func (c *clusterRun) startProducers() {
	stop := make(chan struct{})
	var producers sync.WaitGroup
	for range 2 {
		producers.Go(func() { c.produce(stop) })
	}
	c.stopProducers = sync.OnceFunc(func() {
		close(stop)
		producers.Wait()
	})
	c.t.Cleanup(c.stopProducers)
}

// produce enqueues a job every 15 ms, each Enqueue given 10 s, until stop
// is closed.
func (c *clusterRun) produce(stop <-chan struct{}) {
	tick := time.NewTicker(15 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		seq, mode := c.ledger.attempt()
		ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
		id, err := c.producer.Enqueue(ctx, clusterJob{Seq: seq, Mode: mode})
		cancel()
		c.ledger.enqueued(seq, id, err)
	}
}

// killAndRestart kills the victim with kill -9 5 s after the producers
// started, and starts it again 8 s later; it records the kill window.
func (c *clusterRun) killAndRestart() {
	pause(5 * time.Second)
	c.killFrom = time.Now()
	c.killed = true
	if _, err := clusterScript(c.root, time.Minute, "kill", strconv.Itoa(c.victim)); err != nil {
		c.t.Fatal(err)
	}
	killedAt := time.Now()
	pause(8 * time.Second)
	restartFrom := time.Now()
	if _, err := clusterScript(c.root, 3*time.Minute, "start-node", strconv.Itoa(c.victim)); err != nil {
		c.t.Fatal(err)
	}
	c.killed = false
	c.up = time.Now()
	c.t.Logf("node %d killed at +%.1fs (took %.1fs), start-node from +%.1fs to +%.1fs",
		c.victim, c.since(c.killFrom), killedAt.Sub(c.killFrom).Seconds(), c.since(restartFrom), c.since(c.up))
}

// drainEnd is how the drain ended.
type drainEnd struct {
	took     time.Duration
	stalled  bool // no handler started for 15 s, jobs still pending
	timedOut bool // 60 s went by, jobs still pending
}

// drain waits until every confirmed job ran to success, for up to 60 s,
// or until no handler has started for 15 s (once the drain is 15 s old).
func (c *clusterRun) drain() drainEnd {
	from := time.Now()
	var d drainEnd
	err := within(60*time.Second, func() bool {
		v := c.ledger.view()
		if v.pending() == 0 {
			return true
		}
		d.stalled = time.Since(v.lastRun) > 15*time.Second && time.Since(from) > 15*time.Second
		return d.stalled
	})
	d.took, d.timedOut = time.Since(from), err != nil
	return d
}

// ------------------------------------------------------------ the score

// judge scores the run and reports it: a quorum run fails on its score
// and its own checks, a classic run is reported only (a goroutine it
// leaves behind is still a test error).
func (c *clusterRun) judge(d drainEnd, end workerEnd) {
	v := c.ledger.view()
	s := &chaos.Score{Fault: c.name, PerFault: []int{0}}
	c.logEnqueueFailures(v)
	lostModes := scoreJobs(s, v)
	ls, dups := scoreRuns(s, v, chaos.Window{Name: "node_kill", From: c.killFrom, To: c.up})
	c.logHistories(v, dups)
	leaked := c.leakedGoroutines()
	s.Leaks += leaked
	c.addFigures(s, ls, lostModes, d, end)
	c.t.Logf("%s: deferred jobs due after the restart: %d, median lateness %v (max %v); backlog jobs enqueued after it: %d, median wait %v (max %v)",
		c.name, len(ls.late), percentile(ls.late, 0.5), percentile(ls.late, 1), len(ls.backlog), percentile(ls.backlog, 0.5), percentile(ls.backlog, 1))
	if c.qtype == queuey.Quorum {
		checkQuorum(s, ls, end, leaked)
		if m, bound := percentile(ls.window, 1), c.up.Sub(c.killFrom)+downLatenessMargin; m > bound {
			s.Fail("a deferred job due while the node was down ran %v after its due time, beyond the node's downtime and the broker's dead-letter retry (%v)", m, bound)
		}
		report(c.t, s)
		return
	}
	if leaked > 0 {
		c.t.Errorf("%s: %d goroutines left in the test process", c.name, leaked)
	}
	keepScore(s)
	if len(s.Examples) > 0 {
		c.t.Logf("examples: %s", strings.Join(s.Examples, " "))
	}
	c.t.Log(c.classicStory(s, v, lostModes, end))
}

// logEnqueueFailures logs the failed Enqueue calls, grouped by error (its
// first 160 bytes), and when the first and the last of them were made.
func (c *clusterRun) logEnqueueFailures(v ledgerView) {
	byErr := map[string]int{}
	var first, last time.Time
	for _, a := range v.attempts {
		if a.err == nil {
			continue
		}
		msg := a.err.Error()
		byErr[msg[:min(len(msg), 160)]]++
		if first.IsZero() || a.called.Before(first) {
			first = a.called
		}
		if a.called.After(last) {
			last = a.called
		}
	}
	for msg, n := range byErr {
		c.t.Logf("%s: %d Enqueue calls failed with: %s", c.name, n, msg)
	}
	if !first.IsZero() {
		c.t.Logf("%s: failed Enqueue calls were made from +%.1fs to +%.1fs (kill at +%.1fs, node up at +%.1fs)",
			c.name, c.since(first), c.since(last), c.since(c.killFrom), c.since(c.up))
	}
}

// logHistories logs, for a few jobs with an unexplained duplicate, the
// job's Enqueue call, every run of it against the kill window, and the
// library's log lines that name it.
func (c *clusterRun) logHistories(v ledgerView, seqs []int) {
	for _, seq := range seqs[:min(len(seqs), 5)] {
		a := v.attempts[seq]
		lines := []string{fmt.Sprintf("%s: job %d (%s, %s) enqueued %s, confirmed %t; kill window %s..%s; its runs:",
			c.name, seq, a.mode, a.id, fmtClock(a.called), a.confirmed, fmtClock(c.killFrom), fmtClock(c.up))}
		for _, r := range v.runs {
			if r.started && r.seq == seq {
				lines = append(lines, fmt.Sprintf("  a%d/d%d redelivered=%t start %s done %s (%v) settled %s (%s)",
					r.attempt, r.deferrals, r.redelivered, fmtClock(r.start), fmtClock(r.done), r.err, fmtClock(r.settled), r.result))
			}
		}
		for line := range strings.Lines(c.logs.String()) {
			if a.id != "" && strings.Contains(line, a.id) && len(lines) < 30 {
				lines = append(lines, "  log: "+strings.TrimSpace(line))
			}
		}
		c.t.Log(strings.Join(lines, "\n"))
	}
}

// example adds a few ids behind the figures, for a person to look at.
func example(s *chaos.Score, format string, args ...any) {
	if len(s.Examples) < 12 {
		s.Examples = append(s.Examples, fmt.Sprintf(format, args...))
	}
}

// scoreJobs counts the attempted jobs: confirmed, ok (ran to success),
// recovered (ok though Enqueue failed), lost (confirmed, never ok). It
// returns the lost ones by mode, as sorted "mode=n".
func scoreJobs(s *chaos.Score, v ledgerView) []string {
	ok := v.succeeded()
	lostByMode := map[string]int{}
	for _, a := range v.attempts {
		s.Attempted++
		if a.confirmed {
			s.Confirmed++
		}
		switch {
		case ok[a.seq]:
			s.OK++
			if !a.confirmed {
				s.Recovered++
			}
		case a.confirmed:
			s.Lost++
			lostByMode[a.mode]++
			example(s, "lost:%d/%s(%s, enqueued %s)", a.seq, a.id, a.mode, a.called.Format("15:04:05.000"))
		}
	}
	var modes []string
	for m, n := range lostByMode {
		modes = append(modes, fmt.Sprintf("%s=%d", m, n))
	}
	slices.Sort(modes)
	return modes
}

// runKey is one attempt (and deferral) of one job: its runs after the
// first are duplicates.
type runKey struct{ seq, attempt, deferrals int }

// laneSample is what the lane check compares, after the restart.
type laneSample struct {
	window  []time.Duration // deferred jobs due while the node was down: first start - due
	late    []time.Duration // deferred jobs due after it: first start - due
	over    int             // of those, late by more than 2 s
	backlog []time.Duration // plain jobs enqueued after it: first start - Enqueue call
}

// scoreRuns counts the runs: started, unexpected (of no attempted job),
// duplicates and early ones. It returns the lane sample, and the jobs
// with an unexplained duplicate.
func scoreRuns(s *chaos.Score, v ledgerView, w chaos.Window) (laneSample, []int) {
	byKey := map[runKey][]crun{}
	failed := map[runKey]time.Time{} // seq and attempt → the earliest failed (or deferring) return
	for _, r := range v.runs {
		if !r.started {
			continue
		}
		s.Runs++
		if _, known := v.attempts[r.seq]; !known {
			s.Unexpected++
			continue
		}
		k := runKey{r.seq, r.attempt, r.deferrals}
		byKey[k] = append(byKey[k], r)
		if r.err != nil && !r.done.IsZero() {
			fk := runKey{r.seq, r.attempt, 0}
			if t0, ok := failed[fk]; !ok || r.done.Before(t0) {
				failed[fk] = r.done
			}
		}
	}
	var dups []int
	for k, rs := range byKey {
		slices.SortFunc(rs, func(a, b crun) int { return a.start.Compare(b.start) })
		if scoreDups(s, k, rs, w) {
			dups = append(dups, k.seq)
		}
	}
	slices.Sort(dups)
	return scoreFirsts(s, v, byKey, failed, w), slices.Compact(dups)
}

// scoreDups counts the runs of k after its first (rs in start order):
// explained when the run before was in flight (started, not yet settled)
// in the kill window widened by clusterSlack, unexplained otherwise. It
// reports whether any was unexplained.
func scoreDups(s *chaos.Score, k runKey, rs []crun, w chaos.Window) (unexplained bool) {
	for i := 1; i < len(rs); i++ {
		prev := rs[i-1]
		end := prev.settled
		if end.IsZero() {
			end = time.Unix(0, 1<<62) // never settled: in flight to the end
		}
		if prev.start.Before(w.To.Add(clusterSlack)) && end.After(w.From.Add(-clusterSlack)) {
			s.DupExplained++
			s.PerFault[0]++
			continue
		}
		s.DupUnexplained++
		unexplained = true
		example(s, "dup:%d/a%d/d%d(prev %s..%s %s)", k.seq, k.attempt, k.deferrals,
			prev.start.Format("15:04:05.000"), fmtClock(prev.settled), prev.result)
	}
	return unexplained
}

// scoreFirsts checks each key's first run: a deferred run not before its
// due time, a retry not before the backoff after the failure that
// scheduled it; either is early otherwise. It samples, after the node was
// up again, the lateness of deferred runs and the wait of plain jobs.
func scoreFirsts(s *chaos.Score, v ledgerView, byKey map[runKey][]crun, failed map[runKey]time.Time, w chaos.Window) laneSample {
	var ls laneSample
	for k, rs := range byKey {
		first := rs[0]
		switch {
		case k.deferrals > 0:
			due, ok := v.due[k.seq]
			if ok && first.start.Before(due) {
				s.Early++
				example(s, "early:%d by %v", k.seq, due.Sub(first.start))
			}
			switch late := first.start.Sub(due); {
			case ok && due.After(w.To):
				ls.late = append(ls.late, late)
				if late > 2*time.Second {
					ls.over++
				}
			case ok && due.After(w.From):
				ls.window = append(ls.window, late)
			}
		case k.attempt > 1:
			if at, ok := failed[runKey{k.seq, k.attempt - 1, 0}]; ok && first.start.Before(at.Add(clusterBackoff)) {
				s.Early++
				example(s, "early-retry:%d by %v", k.seq, at.Add(clusterBackoff).Sub(first.start))
			}
		case k.attempt == 1:
			if a := v.attempts[k.seq]; a.mode == "plain" && a.called.After(w.To) {
				ls.backlog = append(ls.backlog, first.start.Sub(a.called))
			}
		}
	}
	return ls
}

// leakedGoroutines counts the goroutines of the process over its baseline,
// given 5 s to end once the worker stopped and the backends closed, and
// dumps them when there are any.
func (c *clusterRun) leakedGoroutines() int {
	if within(5*time.Second, func() bool { return runtime.NumGoroutine() <= c.baseGoroutines }) == nil {
		return 0
	}
	n := runtime.NumGoroutine() - c.baseGoroutines
	if n > 0 {
		dumpGoroutines(c.t, c.baseGoroutines)
	}
	return max(n, 0)
}

// addFigures puts the run's measurements on the figures line.
func (c *clusterRun) addFigures(s *chaos.Score, ls laneSample, lostModes []string, d drainEnd, end workerEnd) {
	s.Figure("victim_node", c.victim)
	s.Figure("kill_to_up", c.up.Sub(c.killFrom))
	s.Figure("produced_for", c.producedFor)
	s.Figure("rate_per_s", fmt.Sprintf("%.0f", float64(s.Attempted)/c.producedFor.Seconds()))
	s.Figure("drain", d.took)
	s.Figure("deferred_while_down", len(ls.window))
	s.Figure("down_lateness_max", percentile(ls.window, 1))
	s.Figure("deferred_after_restart", len(ls.late))
	s.Figure("lane_lateness_median", percentile(ls.late, 0.5))
	s.Figure("lane_lateness_max", percentile(ls.late, 1))
	s.Figure("backlog_wait_median", percentile(ls.backlog, 0.5))
	s.Figure("backlog_wait_max", percentile(ls.backlog, 1))
	if len(lostModes) > 0 {
		s.Figure("lost_by_mode", strings.Join(lostModes, ","))
	}
	if d.stalled {
		s.Figure("stalled", true)
	}
	if end.err != nil {
		s.Figure("worker_run_failed", true)
	}
	if d.timedOut {
		s.Figure("drain_timed_out", true)
	}
}

// downLatenessMargin is how much later than the node's return a deferral
// due while it was down may run: one retry of the broker's dead-letter
// worker (dead_letter_worker_publisher_confirm_timeout, 5 s on the local
// cluster) and a second for the hops after it.
const downLatenessMargin = 6 * time.Second

// checkQuorum adds the quorum run's own checks: Run kept running, no
// goroutine was left, the deferred jobs due while the node was down ran
// within 30 s of their due time, and those due after the restart within
// 2 s, sooner than the backlog was waiting.
func checkQuorum(s *chaos.Score, ls laneSample, end workerEnd, leaked int) {
	if end.err != nil {
		s.Fail("Worker.Run returned %v", end.err)
	}
	if leaked > 0 {
		s.Fail("%d goroutines left in the test process", leaked)
	}
	if m := percentile(ls.window, 1); m > 30*time.Second {
		s.Fail("a deferred job due while the node was down ran %v after its due time (over 30 s: held by a delay level?)", m)
	}
	switch {
	case len(ls.late) < 5:
		s.Fail("only %d deferred jobs were due after the restart: no lane check", len(ls.late))
	case ls.over > 0:
		s.Fail("%d of %d deferred jobs due after the restart ran more than 2 s after their due time (max %v)", ls.over, len(ls.late), percentile(ls.late, 1))
	}
	if len(ls.backlog) < 5 {
		s.Fail("only %d backlog jobs were enqueued after the restart: no backlog to compare with", len(ls.backlog))
	} else if m, b := percentile(ls.late, 0.5), percentile(ls.backlog, 0.5); b <= m {
		s.Fail("backlog jobs waited no longer (median %v) than deferred jobs were late (median %v): no backlog, or the lane is not preferred", b, m)
	}
}

// ------------------------------------------------------------ the classic report

// classicTally is what the classic report counts beyond the score.
type classicTally struct {
	// lost jobs by when Enqueue was called: before the kill, while the
	// node was down, after it was back
	lostBefore, lostDown, lostAfter int
	// confirmed jobs enqueued before the node was back that first
	// succeeded after it: from the Enqueue call to that run's start
	held          []time.Duration
	unroutable    int // failed Enqueue calls returned unroutable
	startsAfterUp int // handler runs started after the node was back
}

// tallyClassic counts the lost jobs by when they were enqueued, the jobs
// held until the node was back, the unroutable Enqueue failures and the
// runs after the restart.
func (c *clusterRun) tallyClassic(v ledgerView) classicTally {
	var ct classicTally
	okStart := map[int]time.Time{} // job → the start of its first successful run
	for _, r := range v.runs {
		if r.started && r.start.After(c.up) {
			ct.startsAfterUp++
		}
		if s, seen := okStart[r.seq]; r.ok() && (!seen || r.start.Before(s)) {
			okStart[r.seq] = r.start
		}
	}
	for _, a := range v.attempts {
		if a.err != nil && strings.Contains(a.err.Error(), "unroutable") {
			ct.unroutable++
		}
		start, ok := okStart[a.seq]
		switch {
		case !a.confirmed:
		case !ok && a.called.Before(c.killFrom):
			ct.lostBefore++
		case !ok && a.called.Before(c.up):
			ct.lostDown++
		case !ok:
			ct.lostAfter++
		case a.called.Before(c.up) && start.After(c.up):
			ct.held = append(ct.held, start.Sub(a.called))
		}
	}
	return ct
}

// classicStory says, from the run's numbers, what the classic queue lost
// or delayed and why.
func (c *clusterRun) classicStory(s *chaos.Score, v ledgerView, lostModes []string, end workerEnd) string {
	ct := c.tallyClassic(v)
	parts := []string{
		fmt.Sprintf("classic: the work queue lived on node %d alone (%s), and node %d was down from +%.1fs to +%.1fs.",
			c.victim, c.victimWhy, c.victim, c.since(c.killFrom), c.since(c.up)),
		fmt.Sprintf("%d of %d confirmed jobs were lost (%s; enqueued %d before the kill, %d while the node was down, %d after it was back).",
			s.Lost, s.Confirmed, cmpOr(strings.Join(lostModes, ","), "none"), ct.lostBefore, ct.lostDown, ct.lostAfter),
		fmt.Sprintf("%d confirmed jobs enqueued before the node was back ran only after it, a median %v (max %v) after their Enqueue call.",
			len(ct.held), percentile(ct.held, 0.5).Round(time.Millisecond), percentile(ct.held, 1).Round(time.Millisecond)),
	}
	if failed := s.Attempted - s.Confirmed; failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d Enqueue calls failed (%d returned unroutable: no queue to route to while its node was down); %d of those jobs ran all the same.",
			failed, s.Attempted, ct.unroutable, s.Recovered))
	}
	parts = append(parts, c.workerStory(end, ct.startsAfterUp),
		fmt.Sprintf("%d early, %d unexplained duplicates.", s.Early, s.DupUnexplained), c.strandedStory())
	return strings.Join(parts, " ")
}

// workerStory says what the worker did about the queue's node going down.
func (c *clusterRun) workerStory(end workerEnd, startsAfterUp int) string {
	switch {
	case end.err != nil && !end.onItsOwn.IsZero():
		when := "while the node was down"
		if end.onItsOwn.After(c.up) {
			when = "after the node was back"
		}
		return fmt.Sprintf("Worker.Run gave up at +%.1fs, %s (its error is above), so nothing consumed the queue after that; %d runs started after the node was back.",
			c.since(end.onItsOwn), when, startsAfterUp)
	case end.err != nil:
		return fmt.Sprintf("Worker.Run kept running, but returned an error when stopped (above); %d runs started after the node was back.", startsAfterUp)
	}
	return fmt.Sprintf("Worker.Run kept running; %d runs started after the node was back.", startsAfterUp)
}

// strandedStory says how many messages were left on the work queue and
// its dead letters: stranded there, not gone.
func (c *clusterRun) strandedStory() string {
	dead := broker.DeadQueueName(c.work)
	n, err := readyCounts(c.urls, c.work, dead)
	if err != nil {
		return fmt.Sprintf("The messages left on the queues could not be counted: %v.", err)
	}
	return fmt.Sprintf("At the end %d messages were still ready on the work queue and %d on its dead letters (stranded there, not gone).", n[c.work], n[dead])
}

// ------------------------------------------------------------ misc

// fmtClock is t's time of day, or "never" for the zero time.
func fmtClock(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// dumpGoroutines logs every goroutine's stack.
func dumpGoroutines(t *testing.T, base int) {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	t.Logf("goroutines over the baseline of %d:\n%s", base, tail(string(buf[:n]), 20000))
}
