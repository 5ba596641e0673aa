package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/chaos"
)

// enqueueBatch enqueues n jobs made from tmpl with EnqueueBatch.
func (r *rig) enqueueBatch(n int, tmpl chaos.Job) {
	r.t.Helper()
	jobs := make([]queuey.Job, n)
	seqs := make([]int, n)
	now := time.Now()
	r.mu.Lock()
	for i := range jobs {
		r.seq++
		j := tmpl
		j.Seq, j.NotBefore = r.seq, now.UnixNano()
		jobs[i], seqs[i] = j, j.Seq
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.t.Context(), 60*time.Second)
	defer cancel()
	ids, err := r.producer.EnqueueBatch(ctx, jobs)
	r.mu.Lock()
	for i, id := range ids {
		r.attempts = append(r.attempts, chaos.Attempt{ID: id, Seq: seqs[i], Confirmed: id != "", NotBefore: now})
	}
	r.mu.Unlock()
	if err != nil {
		r.t.Fatalf("enqueue batch: %v", err)
	}
}

// startsOf counts the start records written by process pid.
func (r *rig) startsOf(pid int) (n int, first time.Time) {
	for _, rec := range r.records() {
		if rec.Ev == chaos.EvStart && rec.PID == pid {
			if n == 0 || rec.Time().Before(first) {
				first = rec.Time()
			}
			n++
		}
	}
	return n, first
}

// Fault 3: the broker closes the worker's connection three times while
// jobs run. The worker reconnects by itself; only jobs in flight at a cut
// run twice; no ack of an old channel reaches the broker (no "unknown
// delivery tag" in its log); the channels per connection stay bounded.
func TestFaultCloseConnection(t *testing.T) {
	needFaults(t)
	r := newRig(t, "close_connection", rigOptions{})
	const jobs, prefetch = 600, 4 // enough left for the third cut on a busy machine
	r.enqueueBatch(jobs, chaos.Job{WorkMs: 200})
	w := r.startWorker(workerOptions{prefetch: prefetch})
	var reconnects, resumes []time.Duration
	maxChannels := 0
	for cut := range 3 {
		r.waitStarted(40+cut*60, 30*time.Second) // each cut takes a second or two of rabbitmqctl
		win := closeConnection(t, w.name)
		r.addFault(win)
		at, ok := waitLog(t, w.log, "rabbitmq reconnected", win.From, 20*time.Second)
		if !ok {
			t.Fatalf("cut %d: the worker did not reconnect within 20 s", cut+1)
		}
		reconnects = append(reconnects, at.Sub(win.From))
		if err := within(20*time.Second, func() bool {
			for _, rec := range r.records() {
				if rec.Ev == chaos.EvStart && rec.Time().After(win.To) {
					resumes = append(resumes, rec.Time().Sub(win.From))
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("cut %d: no job started after the reconnect", cut+1)
		}
		for _, c := range listConns(t, w.name) {
			maxChannels = max(maxChannels, c.Channels)
		}
	}
	drain := r.drain(60 * time.Second)
	unknown, lines := logSince(r.logPath, r.logOffset, "unknown delivery tag")
	r.finish(func(s *chaos.Score) {
		s.Figure("reconnect_p50", percentile(reconnects, 0.5))
		s.Figure("reconnect_max", percentile(reconnects, 1))
		s.Figure("resume_max", percentile(resumes, 1))
		s.Figure("drain", drain)
		s.Figure("max_channels_per_conn", maxChannels)
		s.Figure("unknown_delivery_tag", unknown)
		if unknown > 0 {
			s.Fail("the broker log has %d 'unknown delivery tag' lines: %s", unknown, strings.Join(lines, " | "))
		}
		// One consumer channel, the declaring channel and the publish pool (4).
		if maxChannels > 6 {
			s.Leaks += maxChannels - 6
			s.Fail("%d channels on the worker's connection after a reconnect (at most 6 expected)", maxChannels)
		}
		for i, n := range s.PerFault {
			if n > prefetch {
				s.Fail("cut %d: %d duplicates, more than the prefetch (%d)", i+1, n, prefetch)
			}
		}
	}, nil)
}

// Fault 4: SIGKILL of a worker process with prefetch 10, three times, a
// new process started each time. Nothing is lost; every duplicate was in
// the killed process's prefetch window (at most 10 per kill).
func TestFaultSigkillWorker(t *testing.T) {
	needFaults(t)
	r := newRig(t, "sigkill_worker", rigOptions{})
	const jobs, prefetch = 800, 10
	r.enqueueBatch(jobs, chaos.Job{WorkMs: 100})
	w := r.startWorker(workerOptions{prefetch: prefetch})
	var redeliver []time.Duration
	for k := range 3 {
		r.waitStarted(r.started()+50+rand.IntN(100), 60*time.Second)
		at := w.kill()
		<-w.done
		r.addFault(chaos.Window{Name: "sigkill", From: at, To: w.exitedAt})
		w = r.startWorker(workerOptions{prefetch: prefetch})
		if err := within(30*time.Second, func() bool { n, _ := r.startsOf(w.pid); return n > 0 }); err != nil {
			t.Fatalf("kill %d: the new worker ran nothing", k+1)
		}
		_, first := r.startsOf(w.pid)
		redeliver = append(redeliver, first.Sub(at))
	}
	drain := r.drain(90 * time.Second)
	r.finish(func(s *chaos.Score) {
		s.Figure("kill_to_next_run_max", percentile(redeliver, 1))
		s.Figure("drain", drain)
		for i, n := range s.PerFault {
			if n > prefetch {
				s.Fail("kill %d: %d duplicates, more than the prefetch (%d)", i+1, n, prefetch)
			}
		}
	}, nil)
}

// Fault 10: SIGTERM with jobs in flight. No job starts after the signal,
// the jobs in flight finish and are acked, the prefetched ones go back to
// the queue at once (not when the jobs in flight end), and Run returns
// within the grace period. With a grace period shorter than the jobs, the
// cut-off jobs come back and run again: duplicates explained by the stop.
func TestFaultSigterm(t *testing.T) {
	needFaults(t)
	sigtermTests(t)
}

func sigtermTests(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		jobs, prefetch, concurrent int
		work, grace                time.Duration
	}{
		{"sigterm", 24, 20, 4, 2 * time.Second, 10 * time.Second},
		{"sigterm_short_grace", 12, 10, 4, 3 * time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.name, rigOptions{})
			r.enqueueBatch(tc.jobs, chaos.Job{WorkMs: int(tc.work / time.Millisecond)})
			w := r.startWorker(workerOptions{prefetch: tc.prefetch, concurrency: tc.concurrent, shutdownTimeout: tc.grace})
			r.waitStarted(tc.concurrent, 30*time.Second)
			// Every prefetch slot is taken: concurrent running, the rest held.
			if err := within(10*time.Second, func() bool {
				n, err := r.backend.Depth(t.Context(), r.queue)
				return err == nil && n == tc.jobs-tc.prefetch
			}); err != nil {
				t.Fatalf("the worker did not fill its prefetch")
			}
			time.Sleep(300 * time.Millisecond)
			at := w.term()
			r.addFault(chaos.Window{Name: "sigterm", From: at, To: at.Add(tc.grace)})
			backAt := time.Duration(-1)
			_ = within(tc.grace+5*time.Second, func() bool {
				n, err := r.backend.Depth(t.Context(), r.queue)
				if err == nil && n >= tc.jobs-tc.concurrent {
					backAt = time.Since(at)
					return true
				}
				return false
			})
			if err := w.wait(tc.grace + 5*time.Second); err != nil {
				t.Fatal(err)
			}
			var lateStarts, finished, settled int
			stopTook := w.exitedAt.Sub(at)
			for _, rec := range r.records() {
				switch {
				case rec.PID != w.pid:
				case rec.Ev == chaos.EvExit:
					stopTook = time.Unix(0, rec.StoppedAt).Sub(at)
				case rec.Ev == chaos.EvStart && rec.Time().After(at):
					lateStarts++
				case rec.Ev == chaos.EvDone && rec.Err == "" && rec.Time().After(at):
					finished++
				case rec.Ev == chaos.EvSettled && rec.Result == string(queuey.Succeeded) && rec.Time().After(at):
					settled++
				}
			}
			// The rest runs on a second worker.
			r.startWorker(workerOptions{prefetch: tc.jobs, concurrency: tc.jobs})
			drain := r.drain(60 * time.Second)
			r.finish(func(s *chaos.Score) {
				s.Figure("run_returned_after", stopTook)
				s.Figure("process_exited_after", w.exitedAt.Sub(at))
				s.Figure("prefetched_back_after", backAt)
				s.Figure("starts_after_sigterm", lateStarts)
				s.Figure("finished_after_sigterm", finished)
				s.Figure("drain", drain)
				if lateStarts > 0 {
					s.Fail("%d jobs started after SIGTERM", lateStarts)
				}
				if stopTook > tc.grace+time.Second {
					s.Fail("Run took %v to return, over the grace period %v + 1 s", stopTook, tc.grace)
				}
				switch {
				case backAt < 0:
					s.Fail("the %d prefetched deliveries never went back to the queue", tc.prefetch-tc.concurrent)
				case backAt > time.Second:
					s.Fail("the %d prefetched deliveries went back %v after SIGTERM, when the jobs in flight ended, not at once",
						tc.prefetch-tc.concurrent, backAt.Round(10*time.Millisecond))
				}
				if tc.grace > tc.work {
					if finished != tc.concurrent || settled != tc.concurrent {
						s.Fail("%d jobs finished and %d were acked after SIGTERM, want the %d in flight", finished, settled, tc.concurrent)
					}
					if s.DupExplained+s.DupUnexplained > 0 {
						s.Fail("%d duplicates with a grace period longer than the jobs", s.DupExplained+s.DupUnexplained)
					}
				} else if s.DupExplained > tc.concurrent {
					s.Fail("%d jobs ran twice, more than the %d cut off", s.DupExplained, tc.concurrent)
				}
			}, nil)
		})
	}
}

// supervise restarts the rig's worker each time it exits with status 1 (a
// crash), until stop is closed; every crash is a fault window.
func (r *rig) supervise(o workerOptions, stop <-chan struct{}) (crashes *atomic.Int32, done <-chan struct{}) {
	crashes = &atomic.Int32{}
	d := make(chan struct{})
	go func() {
		defer close(d)
		for {
			w := r.startWorker(o)
			select {
			case <-w.done:
				if w.exitCode() != 1 {
					return
				}
				crashes.Add(1)
				r.addFault(chaos.Window{Name: "crash", From: w.exitedAt.Add(-time.Second), To: w.exitedAt})
			case <-stop:
				return
			}
		}
	}()
	return crashes, d
}

// Fault 8: a job that kills its worker process (os.Exit(1)) every time it
// runs. With PoisonAfter 3 it is dead-lettered as poison after its third
// crash; the other jobs keep flowing and none of them is dead-lettered.
func TestFaultPoisonJob(t *testing.T) {
	needFaults(t)
	poisonTest(t, "poison_job", 1)
}

// The same with prefetch and concurrency 4: the three jobs enqueued right
// after the poison job are in flight with it at its first crash, come
// back redelivered with it and are counted. Each counted job then runs
// alone (its worker stops consuming, runs what it already holds, then the
// job), so the poison job's next crashes take nothing else with them and
// the neighbours run to the end. (Before, they moved side by side with it
// to the back of the queue, crashed with it every time, and were
// dead-lettered as poison with it.)
func TestFaultPoisonJobBystanders(t *testing.T) {
	needFaults(t)
	poisonTest(t, "poison_bystanders", 4)
}

func poisonTest(t *testing.T, name string, prefetch int) {
	r := newRig(t, name, rigOptions{})
	const normal, poisonAfter = 200, 3
	r.enqueueBatch(20, chaos.Job{WorkMs: 20})
	poison := r.enqueue(nil, chaos.Job{Crash: true}, 0, 10*time.Second)
	if !poison.Confirmed {
		t.Fatal(poison.Err)
	}
	for range 3 { // its neighbours in the queue
		r.enqueue(nil, chaos.Job{WorkMs: 500}, 0, 10*time.Second)
	}
	r.enqueueBatch(normal-23, chaos.Job{WorkMs: 20})
	workerBinary(t) // built here, not in the supervising goroutine
	stop := make(chan struct{})
	start := time.Now()
	crashes, supervised := r.supervise(workerOptions{prefetch: prefetch, concurrency: prefetch, poisonAfter: poisonAfter}, stop)
	drain := r.drain(30 * time.Second)
	var dead map[string]string
	err := within(30*time.Second, func() bool {
		dead = r.deadLetters()
		return dead[poison.ID] != ""
	})
	took := time.Since(start)
	close(stop)
	<-supervised
	r.finish(func(s *chaos.Score) {
		s.Figure("crashes", crashes.Load())
		s.Figure("dead_letters", len(dead))
		s.Figure("drain", drain)
		s.Figure("jobs_per_s", fmt.Sprintf("%.0f", float64(normal)/took.Seconds()))
		if err != nil {
			s.Fail("the poison job is not in the dead letters after %d crashes", crashes.Load())
		} else if reason := dead[poison.ID]; !strings.HasPrefix(reason, "poison:") {
			s.Fail("the poison job's dead-letter reason is %q, want poison: ...", reason)
		}
		// The first crash, among its queue-mates, makes it a suspect; the
		// next poisonAfter, running alone, are counted.
		if n := crashes.Load(); n != poisonAfter+1 {
			s.Fail("%d crashes, want %d", n, poisonAfter+1)
		}
		if len(dead) > 1 {
			var others []string
			for id, why := range dead {
				if id != poison.ID {
					others = append(others, id[:8]+": "+why)
				}
			}
			s.Fail("%d jobs that never crashed anything were dead-lettered as well: %s", len(dead)-1, strings.Join(others, "; "))
		}
	}, dead)
}

// Fault 8c: PoisonAfter 3, no poison job, and the worker killed with
// SIGKILL at random 20 times (four runs of it with QUEUEY_CHAOS=full, one
// in the short set). A worker that dies takes down the jobs it held,
// running or not; only a job running alone is counted, so no job is
// dead-lettered as poison and every job ends acked. (Before, a counted
// copy waiting its turn to run alone was counted again at every kill: an
// innocent job was dead-lettered in 2 of 4 runs.)
func TestFaultPoisonAfterUnderRandomKills(t *testing.T) {
	needFaults(t)
	runs := 1
	if os.Getenv("QUEUEY_CHAOS") == "full" {
		runs = 4
	}
	for i := range runs {
		t.Run(fmt.Sprint("run ", i+1), func(t *testing.T) { poisonKills(t, fmt.Sprint("poison_kills_", i+1)) })
	}
}

func poisonKills(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	const prefetch, kills = 8, 20
	// 750 jobs: in each eight, seven short and one long, so that a job
	// that must wait for its queue-mates sometimes waits long.
	for range 750 / 8 {
		r.enqueueBatch(7, chaos.Job{WorkMs: 20})
		r.enqueueBatch(1, chaos.Job{WorkMs: 400})
	}
	o := workerOptions{prefetch: prefetch, concurrency: prefetch, poisonAfter: 3}
	w := r.startWorker(o)
	killed := 0
	for killed < kills {
		// Spread over the run, the end too, where the jobs earlier kills
		// brought back run alone; none once every job has run.
		// At most 35 starts apart: 20 kills fit in the 750 jobs' first
		// starts, whatever the draws (at most 45 apart, they did not
		// always: the jobs could all run before the last kill).
		if !r.waitStartedUnlessDone(r.started()+5+rand.IntN(31), 60*time.Second) {
			break
		}
		at := w.kill()
		<-w.done
		killed++
		r.addFault(chaos.Window{Name: "sigkill", From: at, To: w.exitedAt})
		w = r.startWorker(o)
	}
	drain := r.drain(180 * time.Second)
	dead := r.deadLetters()
	r.finish(func(s *chaos.Score) {
		s.Figure("kills", killed)
		s.Figure("drain", drain)
		s.Figure("dead_letters", len(dead))
		if killed < kills {
			s.Fail("every job ran after %d kills, before the %d planned", killed, kills)
		}
		if len(dead) > 0 {
			var why []string
			for id, reason := range dead {
				why = append(why, id[:8]+": "+reason)
			}
			s.Fail("%d jobs that crashed nothing were dead-lettered: %s", len(dead), strings.Join(why, "; "))
		}
	}, dead)
}

// waitStartedUnlessDone waits up to within for n job starts, and reports
// false, at once, if every confirmed job has run to success first.
func (r *rig) waitStartedUnlessDone(n int, within time.Duration) bool {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for r.started() < n {
		if len(r.succeeded()) >= len(r.confirmed()) {
			return false
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("only %d job starts, waiting for %d", r.started(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Fault 7: the work queue, then a hold queue, deleted behind the
// library's back while jobs are published. No publish of a returned
// message is reported as a success (every confirmed job runs: it was
// routed), and the topology comes back: a running worker declares its
// work queue again by itself, publishes into a work queue nobody declared
// again are refused with ErrUnroutable, and a hold queue deleted under the
// producer's declare cache is declared again on the next hold (before
// 7f8d785 every EnqueueAfter into it was refused until the cache ran out,
// TTL/2 later).
//
// The queues are deleted empty, so that every job the deletion itself
// destroys is known: none.
func TestFaultDeletedQueues(t *testing.T) {
	needFaults(t)
	r := newRig(t, "deleted_queues", rigOptions{})
	w := r.startWorker(workerOptions{prefetch: 8})
	for range 50 {
		r.enqueue(nil, chaos.Job{}, 0, 5*time.Second)
	}
	r.drain(30 * time.Second)

	var unroutable, otherErrs atomic.Int32
	publish := func(delay time.Duration) bool {
		a := r.enqueue(nil, chaos.Job{}, delay, 2*time.Second)
		switch {
		case a.Confirmed:
			return true
		case strings.Contains(a.Err, broker.ErrUnroutable.Error()):
			unroutable.Add(1)
		default:
			otherErrs.Add(1)
		}
		time.Sleep(10 * time.Millisecond)
		return false
	}
	// publishUntil publishes until one goes through, and says when.
	publishUntil := func(delay time.Duration, from time.Time) time.Duration {
		for range 2000 {
			if publish(delay) {
				return time.Since(from)
			}
		}
		return -1
	}

	// 1. The work queue, deleted under a running worker: it declares the
	// queue again by itself.
	from := time.Now()
	mustCtl(t, "delete_queue", r.queue)
	r.addFault(chaos.Window{Name: "delete_work_queue", From: from, To: time.Now()})
	redeclared, selfRepaired := waitLog(t, w.log, "queue is gone; declaring it again", from, 20*time.Second)
	redeclaredAfter := redeclared.Sub(from)
	workBack := publishUntil(0, from)
	r.drain(30 * time.Second)

	// 2. The work queue deleted with no worker to declare it: every publish
	// into it is returned and reported as ErrUnroutable, until a worker
	// starts and declares it.
	w.term()
	_ = w.wait(20 * time.Second)
	from = time.Now()
	mustCtl(t, "delete_queue", r.queue)
	r.addFault(chaos.Window{Name: "delete_work_queue_idle", From: from, To: time.Now()})
	refusedWhileGone := 0
	for range 20 {
		if !publish(0) {
			refusedWhileGone++
		}
	}
	r.startWorker(workerOptions{prefetch: 8})
	workBackIdle := publishUntil(0, from)
	r.drain(30 * time.Second)

	// 3. A hold queue, declared by the producer a moment ago and emptied:
	// deleted, then published into at once: declared again, not refused.
	const hold = 4 * time.Second
	holdQueue := broker.HoldQueueName(r.queue, hold)
	probe := r.enqueue(nil, chaos.Job{}, hold, 5*time.Second) // declares the hold queue now
	if !probe.Confirmed {
		t.Fatal(probe.Err)
	}
	if got := getAll(t, holdQueue); len(got) != 1 {
		t.Fatalf("the hold queue holds %d messages, want the probe", len(got))
	}
	r.withdraw(probe.Seq, holdQueue) // taken out by the test, not lost
	from = time.Now()
	mustCtl(t, "delete_queue", holdQueue)
	r.addFault(chaos.Window{Name: "delete_hold_queue", From: from, To: time.Now()})
	before := unroutable.Load()
	holdBack := publishUntil(hold, from)
	holdRefused := unroutable.Load() - before
	for range 10 {
		r.enqueue(nil, chaos.Job{}, hold, 5*time.Second)
	}
	drain := r.drain(60 * time.Second)
	r.finish(func(s *chaos.Score) {
		s.Figure("unroutable_errors", unroutable.Load())
		s.Figure("other_errors", otherErrs.Load())
		s.Figure("worker_redeclared_after", redeclaredAfter)
		s.Figure("work_queue_back_after", workBack)
		s.Figure("refused_while_no_worker", refusedWhileGone)
		s.Figure("work_queue_back_after_worker_start", workBackIdle)
		s.Figure("hold_publishes_refused", holdRefused)
		s.Figure("hold_queue_back_after", holdBack)
		s.Figure("drain", drain)
		if !selfRepaired {
			s.Fail("the worker did not declare its deleted work queue again")
		}
		if refusedWhileGone != 20 {
			s.Fail("%d of 20 publishes into a deleted work queue were refused, want all 20", refusedWhileGone)
		}
		if holdRefused > 0 {
			s.Fail("%d EnqueueAfter calls into the deleted hold queue were refused before it was declared again", holdRefused)
		}
		if workBack < 0 || workBackIdle < 0 || holdBack < 0 {
			s.Fail("publishing did not recover (work %v, after worker start %v, hold %v)", workBack, workBackIdle, holdBack)
		}
		if otherErrs.Load() > 0 {
			s.Fail("%d publishes failed with another error than ErrUnroutable", otherErrs.Load())
		}
	}, nil)
}

// halfOpen runs fault 5 against a loopback proxy: the worker and the
// producer reach the broker through it with a 1 s heartbeat; the proxy
// stops forwarding for 5 s while keeping the sockets open. Both notice
// within two heartbeats, an Enqueue with a 2 s deadline returns an error
// instead of hanging, and after the heal the work resumes without a
// restart.
func TestFaultHalfOpenConnection(t *testing.T) {
	needFaults(t)
	const heartbeat = time.Second
	proxy := newFaultProxy(t, "127.0.0.1:5672")
	via := "amqp://guest:guest@" + proxy.addr + "/"
	r := newRig(t, "half_open", rigOptions{url: via, opts: rabbitmq.Options{Heartbeat: heartbeat}})
	r.onSettle(proxy.close)
	w := r.startWorker(workerOptions{prefetch: 4, heartbeat: heartbeat, url: via})
	silenceTest(r, w, silence{
		window: "blackhole", what: "a blackholed connection", heal: "heal", backFigure: "worker_back_after_heal",
		heartbeat: heartbeat, enqueues: 3, hold: 5 * time.Second, backWithin: 20 * time.Second,
		cut: proxy.blackhole, restore: proxy.heal,
	})
}

// silence is a fault that leaves the path to the broker open but silent
// (no byte gets through), for silenceTest.
type silence struct {
	window, what, heal, backFigure string // the fault's window name, and words for its figures and failures
	heartbeat                      time.Duration
	enqueues                       int           // enqueues tried during the fault, each with a 2 s deadline
	hold                           time.Duration // from the cut to the restore
	backWithin                     time.Duration // how soon after the restore the worker must be back
	cut, restore                   func()
}

// silenceTest runs a silence fault on a rig whose worker w runs jobs:
// worker and producer must notice within two heartbeats, enqueues during
// it must fail by their deadline, and everything drains after.
func silenceTest(r *rig, w *proc, f silence) {
	t := r.t
	r.enqueueBatch(60, chaos.Job{WorkMs: 100})
	r.waitStarted(10, 30*time.Second)
	at := time.Now()
	f.cut()
	var blocked []time.Duration
	var errs, oks int
	for range f.enqueues {
		start := time.Now()
		a := r.enqueue(nil, chaos.Job{}, 0, 2*time.Second)
		blocked = append(blocked, time.Since(start))
		if a.Confirmed {
			oks++
		} else {
			errs++
		}
	}
	workerLost, wOK := waitLog(t, w.log, "rabbitmq connection lost; reconnecting", at, 10*time.Second)
	prodLost, pOK := waitLog(t, r.prodLogs.String, "rabbitmq connection lost; reconnecting", at, 10*time.Second)
	time.Sleep(time.Until(at.Add(f.hold))) // the fault lasts this long
	restored := time.Now()
	f.restore()
	r.addFault(chaos.Window{Name: f.window, From: at, To: restored})
	back, backOK := waitLog(t, w.log, "rabbitmq reconnected", restored, f.backWithin)
	for range 20 {
		r.enqueue(nil, chaos.Job{}, 0, 20*time.Second)
	}
	drain := r.drain(60 * time.Second)
	r.finish(func(s *chaos.Score) {
		s.Figure("worker_detect", workerLost.Sub(at))
		s.Figure("producer_detect", prodLost.Sub(at))
		s.Figure("enqueue_blocked_max", percentile(blocked, 1))
		s.Figure("enqueue_errors_during", errs)
		s.Figure(f.backFigure, back.Sub(restored))
		s.Figure("drain", drain)
		if !wOK || !pOK {
			s.Fail("%s was not noticed within 10 s (worker %v, producer %v)", f.what, wOK, pOK)
		}
		for name, d := range map[string]time.Duration{"worker": workerLost.Sub(at), "producer": prodLost.Sub(at)} {
			if d > 2*f.heartbeat+500*time.Millisecond {
				s.Fail("the %s took %v to notice, more than two heartbeats (%v)", name, d.Round(time.Millisecond), 2*f.heartbeat)
			}
		}
		if oks > 0 {
			s.Fail("%d enqueues reported success through %s", oks, f.what)
		}
		if m := percentile(blocked, 1); m > 2500*time.Millisecond {
			s.Fail("an Enqueue with a 2 s deadline blocked %v", m)
		}
		if !backOK {
			s.Fail("the worker did not reconnect within %v of the %s", f.backWithin, f.heal)
		}
	}, nil)
}

// A peer that accepts TCP and never speaks AMQP (a tarpit) while the
// worker reconnects, then a healthy path: the worker gives up on the
// silent peer and gets through. (Before 209e43d the backend's own dialer
// set no deadline on the AMQP handshake, and the reconnect waited on the
// silent peer for good.)
func TestFaultReconnectThroughATarpit(t *testing.T) {
	needFaults(t)
	const heartbeat = time.Second
	proxy := newFaultProxy(t, "127.0.0.1:5672")
	via := "amqp://guest:guest@" + proxy.addr + "/"
	r := newRig(t, "reconnect_tarpit", rigOptions{})
	r.onSettle(proxy.close)
	w := r.startWorker(workerOptions{prefetch: 4, heartbeat: heartbeat, url: via})
	r.enqueueBatch(20, chaos.Job{WorkMs: 50})
	r.waitStarted(5, 30*time.Second)
	at := time.Now()
	proxy.setTarpit(true)
	proxy.blackhole()
	lost, _ := waitLog(t, w.log, "rabbitmq connection lost; reconnecting", at, 10*time.Second)
	time.Sleep(2 * time.Second) // a redial is now stuck in the tarpit
	healed := time.Now()
	proxy.heal()
	r.addFault(chaos.Window{Name: "tarpit", From: at, To: healed})
	back, ok := waitLog(t, w.log, "rabbitmq reconnected", healed, 30*time.Second)
	for range 10 {
		r.enqueue(nil, chaos.Job{}, 0, 10*time.Second)
	}
	if ok {
		r.drain(30 * time.Second)
	}
	r.finish(func(s *chaos.Score) {
		s.Figure("detect", lost.Sub(at))
		if ok {
			s.Figure("reconnected_after_heal", back.Sub(healed))
		} else {
			s.Figure("reconnected_after_heal", "never (30 s)")
			s.Fail("the worker did not reconnect within 30 s of the heal: its redial hangs on a peer that never answers the AMQP handshake")
		}
	}, nil)
}

// Fault 6: a memory alarm, then a disk alarm, while jobs are produced and
// consumed. Enqueue honours its deadline with rabbitmq.ErrBlocked; the
// worker, which publishes nothing while its jobs succeed, keeps acking;
// everything drains after.
func TestFaultResourceAlarms(t *testing.T) {
	needFaults(t)
	alarmTest(t, "alarms", false)
}

// The same with one job in 50 failing once, so that the worker must
// publish retries while the broker blocks publishers. A retry cannot be
// published until the alarm ends, so its delivery waits, unacked, holding
// a prefetch slot; the other jobs keep running and being acked on the
// consumers' connection, which the broker does not block. (It used to
// block: the worker consumed and published on one connection, so its
// first retry publish stalled every ack until the alarm ended.)
func TestFaultAlarmWithRetries(t *testing.T) {
	needFaults(t)
	alarmTest(t, "alarms_with_retries", true)
}

func alarmTest(t *testing.T, name string, retries bool) {
	r := newRig(t, name, rigOptions{})
	mem := evalTerm(t, "vm_memory_monitor:get_vm_memory_high_watermark().")
	disk := strings.TrimSuffix(strings.TrimPrefix(evalTerm(t, "application:get_env(rabbit, disk_free_limit)."), "{ok,"), "}")
	if _, err := strconv.ParseFloat(mem, 64); err != nil {
		mem = "0.4"
	}
	if _, err := strconv.Atoi(disk); err != nil {
		disk = "50MB"
	}
	t.Cleanup(func() { restoreAlarms(t, mem, disk) })
	const prefetch = 4
	w := r.startWorker(workerOptions{prefetch: prefetch})
	if retries {
		for range 8 { // 400 jobs; the 50th, 100th, ... fail once
			r.enqueueBatch(49, chaos.Job{WorkMs: 100})
			r.enqueueBatch(1, chaos.Job{WorkMs: 100, FailOnce: true})
		}
	} else {
		r.enqueueBatch(700, chaos.Job{WorkMs: 100}) // still flowing in the second alarm
	}
	r.waitStarted(20, 30*time.Second)
	alarms := []struct{ name, cmd, value string }{
		{"memory", "set_vm_memory_high_watermark", "0.0000001"},
		{"disk", "set_disk_free_limit", "100000GB"},
	}
	if retries {
		alarms = alarms[:1]
	}
	var blocked []time.Duration
	var notBlocked []string
	settledDuring := map[string]int{}
	settledAfterRetry, retryBlocked := 0, false
	for _, alarm := range alarms {
		from := time.Now()
		mustCtl(t, alarm.cmd, alarm.value)
		for range 4 {
			start := time.Now()
			a := r.enqueue(nil, chaos.Job{}, 0, time.Second)
			blocked = append(blocked, time.Since(start))
			if a.Confirmed {
				continue // the alarm reaches the connection within moments
			}
			if !strings.Contains(a.Err, rabbitmq.ErrBlocked.Error()) {
				notBlocked = append(notBlocked, alarm.name+": "+a.Err)
			}
		}
		time.Sleep(2 * time.Second)
		if alarm.name == "memory" {
			mustCtl(t, "set_vm_memory_high_watermark", mem)
		} else {
			mustCtl(t, "set_disk_free_limit", disk)
		}
		to := time.Now()
		r.addFault(chaos.Window{Name: alarm.name + "_alarm", From: from, To: to})
		// The first retry the worker had to publish under the alarm (a
		// handler's failure): its acks must not stall after it.
		var firstRetry time.Time
		for _, rec := range r.records() {
			if rec.Ev == chaos.EvDone && rec.Err != "" && rec.PID == w.pid && rec.Time().After(from) && rec.Time().Before(to) {
				if firstRetry.IsZero() || rec.Time().Before(firstRetry) {
					firstRetry = rec.Time()
				}
			}
		}
		ok := !firstRetry.IsZero()
		retryBlocked = retryBlocked || ok
		for _, rec := range r.records() {
			if rec.Ev != chaos.EvSettled || rec.PID != w.pid || !rec.Time().Before(to) {
				continue
			}
			if rec.Time().After(from.Add(time.Second)) {
				settledDuring[alarm.name]++
			}
			if retries && ok && rec.Time().After(firstRetry.Add(500*time.Millisecond)) {
				settledAfterRetry++
			}
		}
		time.Sleep(time.Second)
	}
	drain := r.drain(60 * time.Second)
	unroutable := w.logContains("message is unroutable") // a hold that failed
	declaredAgain := w.logContains("hold queue is gone") // a hold whose queue expired under the alarm, declared again
	r.finish(func(s *chaos.Score) {
		s.Figure("enqueue_blocked_max", percentile(blocked, 1))
		for _, a := range alarms {
			s.Figure("settled_during_"+a.name+"_alarm", settledDuring[a.name])
		}
		s.Figure("hold_publishes_returned", unroutable)
		s.Figure("hold_queues_declared_again", declaredAgain)
		s.Figure("drain", drain)
		if len(notBlocked) > 0 {
			s.Fail("enqueues under an alarm failed without ErrBlocked: %s", strings.Join(notBlocked, "; "))
		}
		if m := percentile(blocked, 1); m > 1500*time.Millisecond {
			s.Fail("an Enqueue with a 1 s deadline blocked %v under an alarm", m)
		}
		if retries {
			s.Figure("settled_after_first_blocked_retry", settledAfterRetry)
			switch {
			case !retryBlocked:
				s.Fail("no retry came due during the alarm: the run tested nothing")
			case settledAfterRetry <= prefetch:
				s.Fail("the worker settled %d deliveries after its first retry publish was blocked, no more than its prefetch: its acks stalled",
					settledAfterRetry)
			}
		} else {
			for _, a := range alarms {
				if settledDuring[a.name] <= prefetch {
					s.Fail("the worker settled %d deliveries in the %s alarm's last %v, no more than its prefetch: its acks stalled",
						settledDuring[a.name], a.name, 2*time.Second)
				}
			}
		}
		if unroutable > 0 {
			s.Fail("%d retries were published after their hold queue had expired, and ran their failed attempt again", unroutable)
		}
	}, nil)
}

// Fault 1: kill -9 of the broker while 4 producers enqueue 5,000 jobs,
// each Enqueue with a 5 s deadline; the broker is restarted 5 s later and
// two worker processes drain. Every job whose Enqueue returned nil runs;
// Enqueue returns errors, not hangs, during the outage.
func TestFaultBrokerKill(t *testing.T) {
	needFull(t)
	r := newRig(t, "broker_kill", rigOptions{})
	t.Cleanup(func() { ensureBroker(t) }) // runs before the rig's cleanup
	pid := beamPID(t)
	producers := make([]*queuey.Producer, 4)
	for i := range producers {
		producers[i] = r.newProducer(fmt.Sprintf("p%d", i+1))
	}
	r.startWorker(workerOptions{prefetch: 16})
	r.startWorker(workerOptions{prefetch: 16})
	const jobs, deadline = 5000, 5 * time.Second
	var next, confirmed atomic.Int64
	var maxBlocked atomic.Int64
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Go(func() {
			for next.Add(1) <= jobs {
				start := time.Now()
				a := r.enqueue(p, chaos.Job{WorkMs: 1}, 0, deadline)
				for d := int64(time.Since(start)); ; {
					if m := maxBlocked.Load(); d <= m || maxBlocked.CompareAndSwap(m, d) {
						break
					}
				}
				if a.Confirmed {
					confirmed.Add(1)
				}
			}
		})
	}
	if err := within(120*time.Second, func() bool { return confirmed.Load() >= jobs/2 }); err != nil {
		t.Fatal("never reached half the jobs confirmed")
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	_ = within(30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	time.Sleep(5 * time.Second)
	restart := time.Now()
	ensureBroker(t)
	up := time.Now()
	r.addFault(chaos.Window{Name: "broker_kill", From: killed, To: up})
	wg.Wait()
	drain := r.drain(180 * time.Second)
	var firstAfter time.Time
	for _, rec := range r.records() {
		if rec.Ev == chaos.EvDone && rec.Time().After(up) && (firstAfter.IsZero() || rec.Time().Before(firstAfter)) {
			firstAfter = rec.Time()
		}
	}
	r.finish(func(s *chaos.Score) {
		s.Figure("broker_startup", up.Sub(restart))
		s.Figure("outage", up.Sub(killed))
		s.Figure("enqueue_blocked_max", time.Duration(maxBlocked.Load()))
		s.Figure("first_job_after_restart", firstAfter.Sub(up))
		s.Figure("drain", drain)
		if m := time.Duration(maxBlocked.Load()); m > deadline+time.Second {
			s.Fail("an Enqueue with a %v deadline blocked %v", deadline, m)
		}
	}, nil)
}

// Fault 2: the broker's app stopped for 30 s (stop_app, start_app) with
// 1,000 jobs held for 5-60 s, 100 ready and 50 in the dead letters. None
// is lost, none runs early, the dead letters and the queue arguments are
// intact.
func TestFaultBrokerStop(t *testing.T) {
	needFull(t)
	r := newRig(t, "broker_stop", rigOptions{})
	t.Cleanup(func() { ensureBroker(t) })
	r.startWorker(workerOptions{prefetch: 16})
	for range 50 {
		r.enqueue(nil, chaos.Job{Fail: true}, 0, 10*time.Second)
	}
	if err := within(30*time.Second, func() bool { return len(r.deadLetters()) == 50 }); err != nil {
		t.Fatalf("the 50 failing jobs did not reach the dead letters (%d)", len(r.deadLetters()))
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= 1000 {
				r.enqueue(nil, chaos.Job{}, 5*time.Second+rand.N(55*time.Second), 10*time.Second)
			}
		})
	}
	wg.Wait()
	r.enqueueBatch(100, chaos.Job{WorkMs: 10})
	before := listQueues(t, r.prefix)
	time.Sleep(time.Until(start.Add(10 * time.Second)))
	stopped := time.Now()
	mustCtl(t, "stop_app")
	time.Sleep(30 * time.Second)
	mustCtl(t, "start_app")
	mustCtl(t, "await_startup", "--timeout", "120")
	up := time.Now()
	r.addFault(chaos.Window{Name: "broker_stop", From: stopped, To: up})
	after := listQueues(t, r.prefix)
	drain := r.drain(120 * time.Second)
	dead := r.deadLetters()
	changed := 0
	for name, q := range before {
		if a, ok := after[name]; ok && fmt.Sprint(a.Arguments) != fmt.Sprint(q.Arguments) {
			changed++
		}
	}
	r.finish(func(s *chaos.Score) {
		s.Figure("outage", up.Sub(stopped))
		s.Figure("dead_letters_after", len(dead))
		s.Figure("queues_before", len(before))
		s.Figure("queues_after", len(after))
		s.Figure("queue_args_changed", changed)
		s.Figure("drain", drain)
		if len(dead) != 50 {
			s.Fail("%d dead letters after the restart, want the 50 from before", len(dead))
		}
		if changed > 0 {
			s.Fail("%d queues came back with other arguments", changed)
		}
	}, dead)
}

// Fault 5, second half: the broker frozen with SIGSTOP for 6 s, then
// SIGCONT. The worker and the producer notice within two heartbeats (1 s),
// an Enqueue with a 2 s deadline returns an error, and the work resumes.
func TestFaultBrokerFrozen(t *testing.T) {
	needFull(t)
	const heartbeat = time.Second
	r := newRig(t, "broker_frozen", rigOptions{opts: rabbitmq.Options{Heartbeat: heartbeat}})
	pid := beamPID(t)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT); ensureBroker(t) })
	w := r.startWorker(workerOptions{prefetch: 4, heartbeat: heartbeat})
	silenceTest(r, w, silence{
		window: "sigstop", what: "a frozen broker", heal: "SIGCONT", backFigure: "worker_back_after_cont",
		heartbeat: heartbeat, enqueues: 2, hold: 6 * time.Second, backWithin: 30 * time.Second,
		cut: func() {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		},
		restore: func() { _ = syscall.Kill(pid, syscall.SIGCONT) },
	})
}

// Fault 9: consumer_timeout lowered to 5 s (and the channel tick that
// checks it to 1 s; both apply to channels opened afterwards), and a job
// that runs 12 s. The broker closes the worker's channel; the worker logs
// rabbitmq.ErrConsumerTimeout, consumes again, and the job's second run
// (a redelivery, short this time) is an explained duplicate; the late ack
// of the first run is not sent (no "unknown delivery tag").
func TestFaultConsumerTimeout(t *testing.T) {
	needFull(t)
	r := newRig(t, "consumer_timeout", rigOptions{})
	prevTimeout := evalTerm(t, "application:get_env(rabbit, consumer_timeout).")
	prevTick := evalTerm(t, "application:get_env(rabbit, channel_tick_interval).")
	t.Cleanup(func() {
		for key, prev := range map[string]string{"consumer_timeout": prevTimeout, "channel_tick_interval": prevTick} {
			expr := fmt.Sprintf("application:unset_env(rabbit, %s).", key)
			if v := strings.TrimSuffix(strings.TrimPrefix(prev, "{ok,"), "}"); v != prev {
				expr = fmt.Sprintf("application:set_env(rabbit, %s, %s).", key, v)
			}
			if _, err := ctl(60*time.Second, "eval", expr); err != nil {
				t.Errorf("restore %s: %v", key, err)
			}
		}
	})
	evalTerm(t, "application:set_env(rabbit, consumer_timeout, 5000).")
	evalTerm(t, "application:set_env(rabbit, channel_tick_interval, 1000).")
	slow := r.enqueue(nil, chaos.Job{SlowFirstMs: 12000, WorkMs: 100}, 0, 10*time.Second)
	r.enqueueBatch(20, chaos.Job{WorkMs: 100})
	w := r.startWorker(workerOptions{prefetch: 4})
	r.waitStarted(1, 30*time.Second)
	started := time.Now()
	var detected time.Time
	err := within(60*time.Second, func() bool {
		for _, line := range strings.Split(w.log(), "\n") {
			if strings.Contains(line, "consumer_timeout") {
				var l struct {
					Time time.Time `json:"time"`
				}
				_ = json.Unmarshal([]byte(line), &l)
				detected = l.Time
				return true
			}
		}
		return false
	})
	if err == nil {
		r.addFault(chaos.Window{Name: "consumer_timeout", From: detected.Add(-2 * time.Second), To: detected})
	}
	drain := r.drain(60 * time.Second)
	time.Sleep(13 * time.Second) // the first, slow run ends and its late ack is refused
	runs := 0
	var rerun time.Time
	for _, rec := range r.records() {
		if rec.Ev == chaos.EvStart && rec.Seq == slow.Seq {
			runs++
			if rec.Redelivered {
				rerun = rec.Time()
			}
		}
	}
	unknown, _ := logSince(r.logPath, r.logOffset, "unknown delivery tag")
	closedAt, closedOK := brokerLogTime(r.logPath, r.logOffset, "timed out waiting for delivery acknowledgement")
	r.finish(func(s *chaos.Score) {
		if closedOK {
			s.Figure("broker_closed_channel_after", closedAt.Sub(started))
		}
		if err == nil {
			s.Figure("timeout_reported_after", detected.Sub(started))
		}
		if !rerun.IsZero() {
			s.Figure("redelivered_run_after", rerun.Sub(started))
		}
		s.Figure("slow_job_runs", runs)
		s.Figure("unknown_delivery_tag", unknown)
		s.Figure("drain", drain)
		if err != nil {
			s.Fail("no rabbitmq.ErrConsumerTimeout in the worker's log within 60 s")
		}
		if runs != 2 {
			s.Fail("the slow job ran %d times, want 2 (once cut off, once redelivered)", runs)
		}
		if unknown > 0 {
			s.Fail("%d 'unknown delivery tag' lines in the broker log", unknown)
		}
	}, nil)
}

// After a lost consumer (here a connection closed by the broker), the
// queue is consumed again at once, even while a long job of the lost
// consumer runs: its ack would be refused anyway. (Before 209e43d the
// queue actor waited for every running handler first, so one long job
// stopped the queue for as long as it ran.)
func TestFaultConsumerLossResumesAtOnce(t *testing.T) {
	needFaults(t)
	r := newRig(t, "consumer_loss_resume", rigOptions{})
	r.enqueue(nil, chaos.Job{WorkMs: 10000}, 0, 10*time.Second)
	r.enqueueBatch(600, chaos.Job{WorkMs: 50}) // still work left after the cut on a busy machine
	w := r.startWorker(workerOptions{prefetch: 4})
	r.waitStarted(20, 30*time.Second)
	win := closeConnection(t, w.name)
	r.addFault(win)
	var resumed time.Time
	_ = within(20*time.Second, func() bool {
		for _, rec := range r.records() {
			if rec.Ev == chaos.EvStart && rec.Time().After(win.To) && (resumed.IsZero() || rec.Time().Before(resumed)) {
				resumed = rec.Time()
			}
		}
		return !resumed.IsZero()
	})
	reconnected, _ := waitLog(t, w.log, "rabbitmq reconnected", win.From, 10*time.Second)
	drain := r.drain(60 * time.Second)
	r.finish(func(s *chaos.Score) {
		s.Figure("reconnected_after", reconnected.Sub(win.From))
		s.Figure("consuming_again_after", resumed.Sub(win.From))
		s.Figure("drain", drain)
		if resumed.IsZero() || resumed.Sub(win.To) > 2*time.Second {
			s.Fail("the queue was consumed again %v after the connection was closed (reconnected after %v): it waited for the 10 s job",
				resumed.Sub(win.From).Round(10*time.Millisecond), reconnected.Sub(win.From).Round(10*time.Millisecond))
		}
	}, nil)
}

// Fault 11: a 3-minute soak. 20,000 jobs from 4 producers, 20% held for
// 1-10 s, 5% failing once, 2 worker processes with prefetch 16, and every
// 10 s a random fault: a closed connection, a SIGKILLed worker (restarted)
// or a 5 s memory alarm.
func TestFaultSoak(t *testing.T) {
	needFull(t)
	r := newRig(t, "soak", rigOptions{})
	mem := evalTerm(t, "vm_memory_monitor:get_vm_memory_high_watermark().")
	if _, err := strconv.ParseFloat(mem, 64); err != nil {
		mem = "0.4"
	}
	t.Cleanup(func() { restoreAlarms(t, mem, "50MB") })
	var wmu sync.Mutex
	workers := []*proc{r.startWorker(workerOptions{prefetch: 16, name: "a"}), r.startWorker(workerOptions{prefetch: 16, name: "b"})}
	producers := make([]*queuey.Producer, 4)
	for i := range producers {
		producers[i] = r.newProducer(fmt.Sprintf("p%d", i+1))
	}
	const jobs, soak = 20000, 3 * time.Minute
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > jobs {
					return
				}
				// Paced over 150 s, so that faults hit a running system.
				if due := start.Add(time.Duration(i) * 150 * time.Second / jobs); time.Until(due) > 0 {
					time.Sleep(time.Until(due))
				}
				j := chaos.Job{WorkMs: rand.IntN(10), FailOnce: rand.IntN(100) < 5}
				var delay time.Duration
				if rand.IntN(100) < 20 {
					delay = time.Second + rand.N(9*time.Second)
				}
				r.enqueue(p, j, delay, 5*time.Second)
			}
		})
	}
	counts := map[string]int{}
	stopFaults := time.Now().Add(soak)
	for time.Now().Before(stopFaults) {
		time.Sleep(10 * time.Second)
		wmu.Lock()
		k := rand.IntN(len(workers))
		w := workers[k]
		wmu.Unlock()
		switch fault := rand.IntN(3); fault {
		case 0:
			r.addFault(closeConnection(t, w.name))
			counts["close_connection"]++
		case 1:
			at := w.kill()
			<-w.done
			r.addFault(chaos.Window{Name: "sigkill", From: at, To: w.exitedAt})
			wmu.Lock()
			workers[k] = r.startWorker(workerOptions{prefetch: 16, name: fmt.Sprintf("%c%d", 'a'+k, counts["sigkill"]+2)})
			wmu.Unlock()
			counts["sigkill"]++
		case 2:
			from := time.Now()
			mustCtl(t, "set_vm_memory_high_watermark", "0.0000001")
			time.Sleep(5 * time.Second)
			mustCtl(t, "set_vm_memory_high_watermark", mem)
			r.addFault(chaos.Window{Name: "memory_alarm", From: from, To: time.Now()})
			counts["memory_alarm"]++
		}
	}
	wg.Wait()
	drain := r.drain(180 * time.Second)
	took := time.Since(start)
	r.finish(func(s *chaos.Score) {
		s.Figure("duration", took)
		s.Figure("jobs_per_s", fmt.Sprintf("%.0f", float64(s.OK)/took.Seconds()))
		for _, k := range []string{"close_connection", "sigkill", "memory_alarm"} {
			s.Figure(k, counts[k])
		}
		s.Figure("drain", drain)
	}, nil)
}
