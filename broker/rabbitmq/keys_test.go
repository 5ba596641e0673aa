package rabbitmq_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// Sixteen producers on two connections race 1,000 unique enqueues over
// ten keys; then a worker runs what was enqueued: exactly ten jobs, and
// each success lets its key go.
func TestUniqueJobsRacingProducersEnqueueOnePerKeyOnRabbitMQ(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 4}, nil)
	other := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = other.Close() })
	set := queuey.QueueSet{Prefix: r.prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: 4}}}
	second, err := queuey.NewProducer(t.Context(), other, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	const producers, enqueues, keys = 16, 1000, 10
	var mu sync.Mutex
	enqueued := map[string]string{}
	refused := 0
	var wg sync.WaitGroup
	for p := range producers {
		producer := r.producer
		if p%2 == 1 {
			producer = second
		}
		wg.Go(func() {
			for i := p; i < enqueues; i += producers {
				key := fmt.Sprintf("key-%d", i%keys)
				id, err := producer.Enqueue(t.Context(), job{Name: key}, queuey.UniqueKey(key, time.Minute))
				mu.Lock()
				switch dup, _ := errors.AsType[*queuey.DuplicateError](err); {
				case dup != nil && dup.JobID != "" && dup.JobID != enqueued[key] && enqueued[key] != "":
					t.Errorf("a refusal of %s named %s, not its live job %s", key, dup.JobID, enqueued[key])
				case dup != nil:
					refused++
				case err != nil:
					t.Errorf("enqueue %d: %v", i, err)
				case enqueued[key] != "":
					t.Errorf("%s enqueued twice: %s and %s", key, enqueued[key], id)
				default:
					enqueued[key] = id
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(enqueued) != keys || refused != enqueues-keys {
		t.Fatalf("%d enqueued, %d refused; want %d and %d", len(enqueued), refused, keys, enqueues-keys)
	}
	r.start(keys)
	ran := map[string]bool{}
	for _, run := range r.wait(20 * time.Second) {
		ran[run.JobID] = true
	}
	for key, id := range enqueued {
		if !ran[id] {
			t.Errorf("%s's job %s did not run", key, id)
		}
	}
	if depth, err := r.backend.Depth(t.Context(), r.prefix+".work"); err != nil || depth != 0 || len(ran) != keys {
		t.Fatalf("%d jobs ran, %d (%v) still on the queue; want exactly %d and none", len(ran), depth, err, keys)
	}
	// Each success let its key go.
	for key := range enqueued {
		waitEnqueued(t, r.producer, job{Name: key}, queuey.UniqueKey(key, time.Minute))
	}
}

// waitEnqueued enqueues j with opts, again while its key is still held
// (its release follows its job's ack), up to a deadline, and returns its
// id.
func waitEnqueued(t *testing.T, p *queuey.Producer, j job, opts ...queuey.EnqueueOption) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, err := p.Enqueue(t.Context(), j, opts...)
		if !errors.Is(err, queuey.ErrDuplicate) || time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("enqueue %s: %v", j.Name, err)
			}
			return id
		}
		<-time.After(20 * time.Millisecond)
	}
}

// A dead-lettered unique job lets its key go; its replay is refused while
// a newer job holds the key, and taken once that one is done.
func TestUniqueKeyOnRabbitMQIsLetGoByADeadLetterAndTakenByItsReplay(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	key := queuey.UniqueKey("report-7", time.Minute)
	dead, err := r.producer.Enqueue(t.Context(), job{Name: "broken", Fatal: true}, key)
	if err != nil {
		t.Fatal(err)
	}
	r.start(2)
	// newer waits 2 s in a hold, live all the while.
	var newer string
	for deadline := time.Now().Add(10 * time.Second); newer == ""; {
		newer, err = r.producer.EnqueueAfter(t.Context(), job{Name: "newer"}, 2*time.Second, key)
		if err != nil && (!errors.Is(err, queuey.ErrDuplicate) || time.Now().After(deadline)) {
			t.Fatalf("enqueue once the dead letter is in: %v", err)
		}
	}
	set := queuey.QueueSet{Prefix: r.prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: 1}}}
	dl, err := queuey.NewDeadLetters(t.Context(), r.backend, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := dl.Replay(t.Context(), "work", queuey.ReplayOptions{Select: queuey.ByID(dead)})
	if dup, _ := errors.AsType[*queuey.DuplicateError](err); n != 0 || dup == nil || dup.JobID != newer {
		t.Fatalf("replay while %s is live: %d, %v; want a refusal naming it", newer, n, err)
	}
	r.wait(10 * time.Second) // the dead one and newer
	deadline := time.Now().Add(10 * time.Second)
	for n == 0 { // replayed to wait 2 s, live meanwhile
		n, err = dl.Replay(t.Context(), "work", queuey.ReplayOptions{Select: queuey.ByID(dead), After: 2 * time.Second})
		if err != nil && !errors.Is(err, queuey.ErrDuplicate) || time.Now().After(deadline) {
			t.Fatalf("replay once %s is done: %d, %v", newer, n, err)
		}
	}
	_, err = r.producer.Enqueue(t.Context(), job{Name: "third"}, key)
	if dup, _ := errors.AsType[*queuey.DuplicateError](err); dup == nil || dup.JobID != dead {
		t.Fatalf("enqueue after the replay: %v; want a refusal naming the replayed %s", err, dead)
	}
}

// childEnv marks the test binary run as the worker process of
// TestUniqueJobOfAKilledWorker.
const childEnv = "QUEUEY_UNIQUE_CHILD_PREFIX"

// A worker process killed (SIGKILL) while it runs a unique job: the job
// comes back and runs again, its key held all along, and the key is let
// go once it is done.
func TestUniqueJobOfAKilledWorkerStaysUniqueAndIsLetGoOnceDone(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	key := queuey.UniqueKey("nightly", time.Minute)
	id, err := r.producer.Enqueue(t.Context(), job{Name: "block-long"}, key)
	if err != nil {
		t.Fatal(err)
	}
	killWorkerWhenItRuns(t, r.prefix, "running "+id)
	if _, err := r.producer.Enqueue(t.Context(), job{Name: "long"}, key); !errors.Is(err, queuey.ErrDuplicate) {
		t.Fatalf("enqueue after the kill: %v; want a refusal naming %s", err, id)
	}
	r.start(1)
	runs := r.wait(20 * time.Second)
	if runs[0].JobID != id || !runs[0].Redelivered {
		t.Fatalf("ran %s (redelivered %v), want %s redelivered", runs[0].JobID, runs[0].Redelivered, id)
	}
	waitEnqueued(t, r.producer, job{Name: "after"}, key)
}

// killWorkerWhenItRuns starts a worker process on the queue set of
// prefix (runChild), kills it (SIGKILL) once it says it runs a job whose
// line holds match, and returns the lines it said: "running <id> <name>".
func killWorkerWhenItRuns(t *testing.T, prefix, match string) []string {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+prefix)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	for lines := bufio.NewScanner(out); lines.Scan(); {
		said = append(said, lines.Text())
		if strings.Contains(lines.Text(), match) {
			break
		}
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if len(said) == 0 || !strings.Contains(said[len(said)-1], match) {
		t.Fatalf("the worker process ended before it ran %s; it said %q", match, said)
	}
	return said
}

// runChild is the worker process of killWorkerWhenItRuns, when the test
// binary is started with childEnv set (TestMain): it says on stdout which
// job it runs, and runs it: one whose name starts with "block" until it
// is killed, any other at once.
func runChild(prefix string) int {
	ctx := context.Background()
	b, err := rabbitmq.Dial(ctx, rabbittest.URL(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: 1}}}
	w, err := queuey.NewWorker(b, set, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = queuey.Handle(w, func(ctx context.Context, j job, jc queuey.JobContext) error {
			fmt.Printf("running %s %s\n", jc.JobID, j.Name)
			if strings.HasPrefix(j.Name, "block") {
				<-ctx.Done()
			}
			return ctx.Err()
		})
	}
	if err == nil {
		err = w.Run(ctx)
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// The lock queues a live key costs, as the broker lists them.
func TestAUniqueKeyCostsTwoQueuesOfOneMessage(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	if _, err := r.producer.Enqueue(t.Context(), job{Name: "a"}, queuey.UniqueKey("k", time.Minute)); err != nil {
		t.Fatal(err)
	}
	lock := broker.KeyLockName(r.prefix, "k")
	got := listQueues(t, lock)
	if len(got) != 2 || got[lock].Messages != 1 || got[broker.KeyHolderName(lock)].Messages != 1 || !got[lock].Durable {
		t.Fatalf("queues of the key: %+v; want the lock and its holder, durable, one message each", got)
	}
	if a := got[lock].Arguments; a["x-max-length"] != 1.0 || a["x-overflow"] != "reject-publish" || a["x-message-ttl"] != 60000.0 || a["x-expires"] != 70000.0 {
		t.Errorf("lock queue arguments %v", a)
	}
}

// BenchmarkUniqueEnqueue measures, in one run, plain enqueues and unique
// ones (each with a key of its own, so each takes a key) from 16
// goroutines on one backend: enqueues/s each.
func BenchmarkUniqueEnqueue(b *testing.B) {
	backend := rabbittest.Dial(b, nil)
	defer backend.Close()
	prefix := unique("bench")
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work"}}}
	p, err := queuey.NewProducer(b.Context(), backend, set, nil)
	if err != nil {
		b.Fatal(err)
	}
	var locks []string
	defer func() { rabbittest.DeleteQueues(b, append(locks, prefix+".work", prefix+".work.dead")...) }()
	var mu sync.Mutex
	var n atomic.Int64 // keys used, over every round of b.N
	for _, mode := range []string{"plain", "unique"} {
		b.Run(mode, func(b *testing.B) {
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var opts []queuey.EnqueueOption
					if mode == "unique" {
						key := fmt.Sprintf("k%d", n.Add(1))
						opts = append(opts, queuey.UniqueKey(key, time.Minute))
						lock := broker.KeyLockName(prefix, key)
						mu.Lock()
						locks = append(locks, lock, broker.KeyHolderName(lock))
						mu.Unlock()
					}
					if _, err := p.Enqueue(b.Context(), job{Name: "bench"}, opts...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "enqueues/s")
		})
	}
}

// On a quorum queue a unique job is as on a classic one: its key (a
// classic lock queue whatever the topology) refuses a second job until
// the first succeeds.
func TestUniqueJobsOnAQuorumQueue(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1, Type: queuey.Quorum}, nil)
	key := queuey.UniqueKey("k", time.Minute)
	id, err := r.producer.Defer(t.Context(), job{Name: "first"}, time.Second, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.producer.Enqueue(t.Context(), job{Name: "second"}, key)
	if dup, _ := errors.AsType[*queuey.DuplicateError](err); dup == nil || dup.JobID != id {
		t.Fatalf("enqueue while %s waits: %v; want a refusal naming it", id, err)
	}
	r.start(1)
	r.wait(20 * time.Second)
	waitEnqueued(t, r.producer, job{Name: "third"}, key)
}
