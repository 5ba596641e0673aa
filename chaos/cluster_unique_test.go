package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// Fault: unique jobs on the local three-node cluster, a quorum work queue.
// Sixteen producers on three backends (each dialling a different node
// first, so that the keys' lock queues land on every node) race 1,000
// unique enqueues over ten keys; a third of the way through, node 2 is
// killed with kill -9, and started again once the race is over. Then a
// worker runs what was enqueued. Exactly one job per key is enqueued and
// runs, once: an enqueue whose lock lives on the dead node fails with the
// broker's error, never as a second job.
func TestFaultClusterUniqueJobsWithANodeKilled(t *testing.T) {
	needFaults(t)
	root, urls := clusterURLs(t)
	t.Cleanup(func() {
		if _, err := clusterScript(root, 3*time.Minute, "start"); err != nil {
			t.Errorf("scripts/cluster.sh start at the end: %v", err)
		}
	})
	prefix := unique("cluster_unique")
	set := queuey.QueueSet{Prefix: prefix, Type: queuey.Quorum, Queues: []queuey.Queue{{Name: clusterQueue, Prefetch: 4}}}
	t.Cleanup(func() { deleteClusterQueues(t, urls, prefix+"."+clusterQueue) })
	producers := make([]*queuey.Producer, 3)
	for i := range producers {
		b := dialClusterFrom(t, urls, i, prefix)
		p, err := queuey.NewProducer(t.Context(), b, set, nil)
		if err != nil {
			t.Fatalf("NewProducer: %v", err)
		}
		producers[i] = p
	}
	race := raceUnique(t, producers, root)
	if _, err := clusterScript(root, 3*time.Minute, "start-node", "2"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d enqueued, %d refused as duplicates, %d failed with the broker's error (first: %v)",
		len(race.enqueued), race.refused, race.failed, race.firstErr)
	if len(race.enqueued) != 10 {
		t.Fatalf("%d keys enqueued, want 10: %v", len(race.enqueued), race.enqueued)
	}
	ran := runUniqueJobs(t, dialClusterFrom(t, urls, 0, prefix), set, len(race.enqueued))
	for key, id := range race.enqueued {
		if ran[id] != 1 {
			t.Errorf("%s's job %s ran %d times, want once", key, id, ran[id])
		}
	}
	if len(ran) != len(race.enqueued) {
		t.Errorf("%d distinct jobs ran, want %d", len(ran), len(race.enqueued))
	}
}

// uniqueRace is what the racing producers got.
type uniqueRace struct {
	mu       sync.Mutex
	enqueued map[string]string // key → job id
	refused  int
	failed   int
	firstErr error
}

// raceUnique runs the race, killing node 2 a third of the way through.
func raceUnique(t *testing.T, producers []*queuey.Producer, root string) *uniqueRace {
	const goroutines, enqueues, keys = 16, 1000, 10
	r := &uniqueRace{enqueued: map[string]string{}}
	var next atomic.Int64
	killAt := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for g := range goroutines {
		p := producers[g%len(producers)]
		wg.Go(func() {
			for i := next.Add(1) - 1; i < enqueues; i = next.Add(1) - 1 {
				if i == enqueues/3 {
					once.Do(func() { close(killAt) })
				}
				key := "key-" + strconv.Itoa(int(i%keys))
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				id, err := p.Enqueue(ctx, clusterJob{Seq: int(i)}, queuey.UniqueKey(key, 2*time.Minute))
				cancel()
				r.add(t, key, id, err)
			}
		})
	}
	<-killAt
	if _, err := clusterScript(root, time.Minute, "kill", "2"); err != nil {
		t.Errorf("kill node 2: %v", err)
	}
	wg.Wait()
	return r
}

// add records one enqueue's result: a second job for a key fails the test.
func (r *uniqueRace) add(t *testing.T, key, id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch dup, _ := errors.AsType[*queuey.DuplicateError](err); {
	case dup != nil:
		r.refused++
	case err != nil:
		r.failed++
		if r.firstErr == nil {
			r.firstErr = err
		}
	case r.enqueued[key] != "":
		t.Errorf("%s enqueued twice: %s and %s", key, r.enqueued[key], id)
	default:
		r.enqueued[key] = id
	}
}

// runUniqueJobs runs a worker until n jobs have run and the queue has
// been quiet for 3 s, and returns how often each job id ran.
func runUniqueJobs(t *testing.T, b broker.Backend, set queuey.QueueSet, n int) map[string]int {
	w, err := queuey.NewWorker(b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	runs := make(chan struct{}, 1000)
	if err := queuey.Handle(w, func(_ context.Context, _ clusterJob, jc queuey.JobContext) error {
		mu.Lock()
		ran[jc.JobID]++
		mu.Unlock()
		runs <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	waitRuns(t, runs, n)
	stop()
	if err := <-stopped; err != nil {
		t.Errorf("worker: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(ran)
}

// waitRuns waits for n runs within a minute, then for 3 s without any.
func waitRuns(t *testing.T, runs <-chan struct{}, n int) {
	deadline := time.After(time.Minute)
	for i := 0; i < n; i++ {
		select {
		case <-runs:
		case <-deadline:
			t.Fatalf("%d of %d jobs ran within a minute", i, n)
		}
	}
	select {
	case <-runs:
		t.Error("a job ran after every key's job had")
	case <-time.After(3 * time.Second):
	}
}

// dialClusterFrom is a DialCluster backend over the nodes that dials node
// first+1 first, closed when the test ends.
func dialClusterFrom(t *testing.T, urls []string, first int, prefix string) *rabbitmq.Backend {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	order := append(slices.Clone(urls[first:]), urls[:first]...)
	b, err := rabbitmq.DialCluster(ctx, order, &rabbitmq.Options{ConnectionName: fmt.Sprintf("%s.%d", prefix, first),
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second})
	if err != nil {
		t.Fatalf("DialCluster: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
