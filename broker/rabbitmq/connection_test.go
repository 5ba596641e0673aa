package rabbitmq_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

const sentinel = "s3cr3t-sentinel-pw"

func TestRefusedCredentialsAreReportedOnceWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
	}{
		{"wrong password", "amqp://guest:" + sentinel + "@127.0.0.1:5672/"},
		// A missing vhost is not ErrAccessRefused: see TestAMissingVhostIsNotCalledARefusedPassword.
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			b, err := rabbitmq.Dial(ctx, tc.url, &rabbitmq.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err == nil {
				b.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, rabbitmq.ErrAccessRefused) {
				t.Errorf("got %v, want ErrAccessRefused", err)
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), logs.String()} {
				if strings.Contains(text, sentinel) {
					t.Errorf("the password leaked: %q", text)
				}
			}
		})
	}
}

func TestNoBrokerSaysHowToStartOne(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = rabbitmq.Dial(t.Context(), "amqp://guest:"+sentinel+"@"+addr+"/", nil)
	if err == nil || !strings.Contains(err.Error(), "rabbitmq-server -detached") || strings.Contains(err.Error(), sentinel) {
		t.Errorf("got %v, want advice on starting a broker and no password", err)
	}
}

// TestDialEndsWithItsCtx: a peer that takes the connection and never
// speaks AMQP holds the handshake, which amqp091 runs without a ctx, only
// as long as Dial's ctx lasts; an ended ctx is what the error wraps.
func TestDialEndsWithItsCtx(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted sync.WaitGroup
	t.Cleanup(func() { l.Close(); accepted.Wait() })
	accepted.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // silent
		}
	})
	url := "amqp://guest:guest@" + l.Addr().String() + "/"

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = rabbitmq.Dial(ctx, url, nil)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
		t.Errorf("Dial with a 500ms ctx to a silent peer = %v after %v, want context.DeadlineExceeded soon after 500ms", err, took.Round(time.Millisecond))
	}

	ended, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if _, err = rabbitmq.Dial(ended, url, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with an ended ctx = %v, want context.Canceled", err)
	}
}

func TestAMQPSVerifiesCertificatesByDefault(t *testing.T) {
	t.Parallel()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // the handshake fails on the client's side
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = rabbitmq.Dial(ctx, "amqps://guest:guest@"+l.Addr().String()+"/", nil)
	var unknownCA x509.UnknownAuthorityError
	if err == nil || !(errors.As(err, &unknownCA) || strings.Contains(err.Error(), "certificate")) {
		t.Errorf("got %v, want a certificate verification error", err)
	}
}

// TestAURLThatDoesNotParseSaysWhyWithoutThePassword: a password with a
// character a URL reserves, not escaped, is the common cause; the parser's
// own text would quote part of it.
func TestAURLThatDoesNotParseSaysWhyWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, pw := range []string{"s3cr3t/sentinel", "s3cr3t#sentinel", "s3cr3t sentinel"} {
		_, err := rabbitmq.Dial(t.Context(), "amqp://guest:"+pw+"@127.0.0.1:5672/", nil)
		if err == nil || !strings.Contains(err.Error(), "percent-encoded") || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "sentinel") {
			t.Errorf("Dial with password %q: %v; want advice on percent-encoding, and nothing of the password", pw, err)
		}
	}
	if _, err := rabbitmq.Dial(t.Context(), "http://guest:"+sentinel+"@127.0.0.1:5672/", nil); err == nil ||
		!strings.Contains(err.Error(), "is not an amqp:// or amqps:// URL") || strings.Contains(err.Error(), sentinel) {
		t.Errorf("Dial with an http URL: %v; want it called not an AMQP URL, without the password", err)
	}
}

func TestRedactHidesThePassword(t *testing.T) {
	t.Parallel()
	got := rabbitmq.Redact("amqps://user:" + sentinel + "@host:5671/vh")
	if strings.Contains(got, sentinel) || !strings.Contains(got, "user:xxxxx@host:5671") {
		t.Errorf("Redact: got %q", got)
	}
}

type pJob struct{}

func (pJob) Kind() string        { return "p" }
func (pJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

func TestAChangedMaxPriorityIsAClearErrorOnTheBroker(t *testing.T) {
	t.Parallel()
	prefix := unique("prio")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work"}}}
	if _, err := queuey.NewProducer(t.Context(), b, set, nil); err != nil {
		t.Fatal(err)
	}
	set.Queues[0].MaxPriority = queuey.NoPriorities
	_, err := queuey.NewProducer(t.Context(), b, set, nil)
	if !errors.Is(err, broker.ErrPreconditionFailed) || !strings.Contains(err.Error(), prefix+".work") || !strings.Contains(err.Error(), "MaxPriority") {
		t.Errorf("got %v, want ErrPreconditionFailed naming the queue and the fix", err)
	}
	// The backend still works.
	set.Queues[0].MaxPriority = 0
	p, err := queuey.NewProducer(t.Context(), b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(t.Context(), pJob{}); err != nil {
		t.Errorf("enqueue after a refused declare: %v", err)
	}
}

// While the broker cannot be reached, a publish waits for it, bounded by
// its ctx, and goes through once the connection is back.
func TestPublishesWaitForTheConnection(t *testing.T) {
	t.Parallel()
	proxy, b, q := throughProxy(t, "wait")
	ctx := t.Context()
	proxy.down()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := b.Publish(short, broker.Message{Queue: q, ID: "1", Body: []byte("{}")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish while down: got %v, want the ctx deadline", err)
	}
	proxy.up()
	long, cancel2 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel2()
	if err := b.Publish(long, broker.Message{Queue: q, ID: "2", Body: []byte("{}")}); err != nil {
		t.Fatalf("publish after the broker came back: %v", err)
	}
}

// A batch whose connection is cut half-way goes on on the next one: every
// message is confirmed, and every one reaches the queue (those whose
// confirm was lost with the connection may arrive twice).
func TestABatchOutlivesItsConnection(t *testing.T) {
	t.Parallel()
	proxy, b, q := throughProxy(t, "batchcut")
	ctx := t.Context()
	const n = 3000
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{Queue: q, ID: fmt.Sprintf("m%04d", i), Body: []byte(`{"pad":"` + strings.Repeat("x", 200) + `"}`)}
	}
	// About a third of the batch's bytes, then the cut.
	cut := proxy.cutAfter(n / 3 * 300)
	type outcome struct {
		err   error
		times int
	}
	published := make(chan []outcome, 1)
	go func() {
		out := make([]outcome, n)
		b.PublishBatch(ctx, msgs, func(i int, err error) { out[i].err, out[i].times = err, out[i].times+1 })
		published <- out
	}()
	<-cut
	proxy.up()
	for i, o := range <-published {
		if o.err != nil || o.times != 1 {
			t.Fatalf("message %d: settled %d times, last with %v; want once, confirmed", i, o.times, o.err)
		}
	}

	direct := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer direct.Close()
	c, err := direct.Consume(ctx, q, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	seen := map[string]int{}
	for len(seen) < n {
		select {
		case d := <-c.Deliveries():
			seen[d.Message().ID]++
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived", len(seen), n)
		}
	}
}

// A publish the broker refuses (a CC header must be an array, not a
// string) closes the batch's channel under the publishes in flight beside
// it: they are published again, and only the refused one fails.
func TestABatchFailsOnlyTheRefusedPublish(t *testing.T) {
	t.Parallel()
	_, b, q := throughProxy(t, "batchrefused")
	const n, bad = 600, 300
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{Queue: q, ID: fmt.Sprintf("m%04d", i), Body: []byte("{}")}
	}
	msgs[bad].Headers = map[string]string{"CC": "not-an-array"}
	errs := make([]error, n)
	times := make([]int, n)
	b.PublishBatch(t.Context(), msgs, func(i int, err error) { errs[i], times[i] = err, times[i]+1 })
	for i := range msgs {
		switch {
		case times[i] != 1:
			t.Errorf("message %d settled %d times, want once", i, times[i])
		case i == bad && !errors.Is(errs[i], rabbitmq.ErrRefused):
			t.Errorf("the refused message: got %v, want ErrRefused", errs[i])
		case i != bad && errs[i] != nil:
			t.Errorf("message %d: %v", i, errs[i])
		}
	}

	direct := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer direct.Close()
	c, err := direct.Consume(t.Context(), q, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	seen := map[string]bool{}
	for len(seen) < n-1 {
		select {
		case d := <-c.Deliveries():
			if id := d.Message().ID; id == msgs[bad].ID {
				t.Errorf("the refused message arrived")
			} else {
				seen[id] = true
			}
			if err := d.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived", len(seen), n-1)
		}
	}
}

// Publishes from many goroutines share the pool's channels, and a refused
// publish closes its channel under the others in flight on it: only the
// refused ones may fail, and every other message arrives.
func TestConcurrentPublishesFailOnlyTheRefusedOnes(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, &rabbitmq.Options{PublishChannels: 1, Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	q := unique("refusedconc") + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, Durable: true}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	bad := func(i int) bool { return i%100 == 50 }
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			msg := broker.Message{Queue: q, ID: fmt.Sprintf("m%04d", i), Body: []byte("{}")}
			if bad(i) {
				msg.Headers = map[string]string{"CC": "not-an-array"}
			}
			errs[i] = b.Publish(t.Context(), msg)
		})
	}
	wg.Wait()
	good := 0
	for i, err := range errs {
		switch {
		case bad(i) && !errors.Is(err, rabbitmq.ErrRefused):
			t.Errorf("refused message %d: got %v, want ErrRefused", i, err)
		case !bad(i) && err != nil:
			t.Errorf("message %d: %v", i, err)
		case !bad(i):
			good++
		}
	}

	c, err := b.Consume(t.Context(), q, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	seen := map[string]bool{}
	for len(seen) < good {
		select {
		case d := <-c.Deliveries():
			var i int
			if _, err := fmt.Sscanf(d.Message().ID, "m%04d", &i); err != nil || bad(i) {
				t.Errorf("unexpected message %q", d.Message().ID)
			}
			seen[d.Message().ID] = true
			if err := d.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived", len(seen), good)
		}
	}
}

// A hold queue expires 2×TTL after its last declare; publishes do not
// count. A hold publish that reaches the broker late (held up by the
// network, a reconnect or an alarm) after a declare recent enough to skip
// must not land in a queue that expires before the message's TTL ends:
// once the broker has it, the queue is declared again if the declare has
// grown old meanwhile.
func TestALateHoldPublishOutlivesItsQueuesExpiry(t *testing.T) {
	t.Parallel()
	proxy, b, q := throughProxy(t, "latehold")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const ttl = time.Second
	p := workProducer(t, b, prefixOf(q), "work")
	first, err := p.EnqueueAfter(ctx, workJob{ID: "first"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	release := proxy.stall()
	defer release()
	late := time.AfterFunc(ttl+ttl/2, release) // past the declare's TTL: the queue would expire before the message's TTL ends
	defer late.Stop()
	last, err := p.EnqueueAfter(ctx, workJob{ID: "late"}, ttl)
	if err != nil {
		t.Fatal(err)
	}

	direct := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer direct.Close()
	c, err := direct.Consume(ctx, q, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case d := <-c.Deliveries():
			seen[d.Message().ID] = true
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(6 * time.Second):
			t.Fatalf("held messages back on the queue: %v, want first (%s) and late (%s)", seen, first, last)
		}
	}
}

// TestCloseDoesNotWaitForAnAnswerThatNeverComes: Close asks the broker to
// close the connection and waits for its answer a few seconds at most,
// even while the broker's heartbeats keep coming. amqp091 pushes its read
// deadline back at each of them, so a deadline on the close alone fires
// only when amqp091 next writes a heartbeat of its own, up to a heartbeat
// interval later (a minute here).
func TestCloseDoesNotWaitForAnAnswerThatNeverComes(t *testing.T) {
	t.Parallel()
	proxy, b, _ := dialThroughProxy(t, "close-muted", &rabbitmq.Options{Heartbeat: time.Minute})
	proxy.mute()
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(closed)
		b.Close()
	}()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s of a broker that sends heartbeats and never answers")
	}
}

// TestCallsTheBrokerDoesNotTakeEndSoonAfterTheirCtx: a broker that stops
// reading a connection while keeping it alive (heartbeats go on) holds a
// publish in its socket write, and a declare or a depth query waiting for
// an answer; amqp091 takes no ctx for them. Each returns with its ctx's
// error 2 s after the ctx ends (the backend's grace), the connection is
// given up, and once the broker reads again the backend publishes as
// before. Not parallel with the other tests: it times calls against a
// stalled socket, which the load of the parallel tests makes slower to
// fill; its three calls run at once.
func TestCallsTheBrokerDoesNotTakeEndSoonAfterTheirCtx(t *testing.T) {
	// Big enough to fill the socket's buffers, so that the write itself
	// waits; made before any ctx starts.
	bigBody := []byte(`"` + strings.Repeat("x", 16<<20) + `"`)
	calls := []struct {
		name string
		call func(ctx context.Context, b *rabbitmq.Backend, queue string) error
	}{
		{"publish", func(ctx context.Context, b *rabbitmq.Backend, queue string) error {
			return b.Publish(ctx, broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: bigBody})
		}},
		{"declare", func(ctx context.Context, b *rabbitmq.Backend, queue string) error {
			return b.Declare(ctx, broker.QueueSpec{Name: queue + "2", Durable: true})
		}},
		{"depth", func(ctx context.Context, b *rabbitmq.Backend, queue string) error {
			_, err := b.Depth(ctx, queue)
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // with each other: a proxy and a backend each
			proxy, b, queue := throughProxy(t, "stuck-"+c.name)
			// The publishing pool's channels (4) all open, so that the publish
			// waits in its write rather than in a channel's opening.
			publishSmall(t, b, queue, 8)
			unmute := proxy.mute()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- c.call(ctx, b, queue) }()
			select {
			case err := <-done:
				took := time.Since(start)
				// Not an error of some other path that a lost connection
				// took (waiting for the next one ends with the ctx, at 1 s):
				// the guard's, after the ctx and its 2 s of grace.
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "neither took it nor answered") {
					t.Fatalf("%s returned %v, want the guard's error, wrapping context.DeadlineExceeded", c.name, err)
				}
				t.Logf("%s returned after %v: %v", c.name, took.Round(time.Millisecond), err)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s with a 1 s ctx had not returned after 10 s", c.name)
			}

			unmute()
			publishSmall(t, b, queue, 1) // once the broker reads again
			// The 8 from before, the one after, and the stalled publish's
			// if the broker took it whole before the connection was given up.
			if n, err := b.Depth(t.Context(), queue); err != nil || n < 9 {
				t.Fatalf("Depth = %d, %v; want at least 9 messages", n, err)
			}
		})
	}
}

// TestARequestTheBrokerTakesButNeverAnswersEndsAtTheCap: a broker that
// takes the connection's bytes (the client's heartbeats, one a second,
// keep its socket moving) but answers nothing holds a declare past its ctx
// only until the answer cap (3 s here; 30 s in production), not for as
// long as the socket moves.
//
// Not parallel: the cap is the package's, and the parallel tests, paused
// while the sequential ones run, would read it.
func TestARequestTheBrokerTakesButNeverAnswersEndsAtTheCap(t *testing.T) {
	rabbitmq.SetAnswerCap(t, 3*time.Second)
	proxy, b, queue := dialThroughProxy(t, "answer-cap", &rabbitmq.Options{Heartbeat: time.Second})
	proxy.mute()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	err := b.Declare(ctx, broker.QueueSpec{Name: queue + "2", Durable: true})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "neither took it nor answered") {
		t.Fatalf("Declare = %v, want the guard's error, wrapping context.DeadlineExceeded", err)
	}
	// The ctx's 1 s, then the cap, looked at every 2 s (the grace): 5 s. A
	// socket that took nothing would have been given up at 3 s.
	if took < 4*time.Second || took > 9*time.Second {
		t.Errorf("Declare returned after %v, want about 5 s: 1 s of ctx and the 3 s cap, checked at the 2 s grace", took.Round(time.Millisecond))
	}
	t.Logf("Declare returned after %v: %v", took.Round(time.Millisecond), err)
}

// TestAPublishThatMovesIsNotCutOff: a big publish on a slow network is
// still being written long after its ctx (500ms) ended; as long as the
// socket takes bytes the connection is not given up, and the broker gets
// the message whole (the caller hears of its ctx while waiting for the
// confirm).
func TestAPublishThatMovesIsNotCutOff(t *testing.T) {
	t.Parallel()
	// One publishing channel: the broker confirms in order on a channel, so
	// the confirm of a publish after the big one says the big one is in.
	proxy, b, queue := dialThroughProxy(t, "slow-publish", &rabbitmq.Options{PublishChannels: 1})
	publishSmall(t, b, queue, 1) // the channel open
	// 16 MiB at 32 KiB a tick of 10ms: 512 ticks or more, far past the ctx
	// and its grace.
	big := broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`"` + strings.Repeat("x", 16<<20) + `"`)}
	proxy.throttle()
	connections := proxy.accepted.Load()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Publish(ctx, big)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "neither took it nor answered") {
		t.Fatalf("Publish = %v, want the ctx's error from the wait for the confirm, not the guard's", err)
	}
	t.Logf("Publish returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	// The same connection takes the next publish, and the big one arrived
	// before it.
	publishSmall(t, b, queue, 1)
	if got := proxy.accepted.Load(); got != connections {
		t.Errorf("the proxy took %d connections during the slow publish, want none: the connection was given up", got-connections)
	}
	if n, err := b.Depth(t.Context(), queue); err != nil || n != 3 {
		t.Errorf("Depth = %d, %v; want 3 (1, the big one, 1)", n, err)
	}
}

// TestALostConnectionEndsTheRedeclaresWaitForABlock: after a reconnect
// the backend redeclares the topology, waiting, as every publish and
// declare does, for a block the broker put on the connection (a resource
// alarm) to lift. If the connection is lost meanwhile, the block will
// never lift: the wait ends there, and the backend dials again, instead of
// waiting on a dead connection for ever and publishing nothing more.
func TestALostConnectionEndsTheRedeclaresWaitForABlock(t *testing.T) {
	t.Parallel()
	proxy, b, queue, told := dialToBlock(t, "redeclare-blocked")
	// A second queue, so that declares are left when the block comes.
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: queue + ".more", Durable: true}); err != nil {
		t.Fatal(err)
	}
	sprung, answered := proxy.blockAtDeclare()
	proxy.down()
	proxy.up()
	await(t, sprung, "the new connection redeclared nothing")
	await(t, told, "the backend never heard of the block")
	await(t, answered, "the broker never answered the redeclare's first declare")
	// The redeclare's next declare waits for the block to lift. Lose the
	// connection under it.
	proxy.down()
	proxy.up()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	msg := broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	if err := b.Publish(ctx, msg); err != nil {
		t.Fatalf("Publish after the blocked connection was lost = %v; want it published on the next connection", err)
	}
	t.Logf("published on the next connection after %v", time.Since(start).Round(time.Millisecond))
	if n, err := b.Depth(t.Context(), queue+".more"); err != nil || n != 0 {
		t.Errorf("Depth of the second queue = %d, %v; want it redeclared, empty", n, err)
	}
}

// TestABatchWaitingForABlockGoesOnTheNextConnection: a batch waiting for
// the broker to lift its block on a connection that is then lost goes
// again on the next connection, as a single publish does, rather than
// fail.
func TestABatchWaitingForABlockGoesOnTheNextConnection(t *testing.T) {
	t.Parallel()
	proxy, b, queue, told := dialToBlock(t, "batch-blocked")
	// A declare sets the trap off: its queue is declared, then its
	// dead-letter queue waits for the block to lift, until its ctx ends.
	_, answered := proxy.blockAtDeclare()
	dctx, dcancel := context.WithTimeout(t.Context(), time.Second)
	defer dcancel()
	if err := b.Declare(dctx, broker.QueueSpec{Name: queue + ".more", Durable: true}); !errors.Is(err, rabbitmq.ErrBlocked) {
		t.Fatalf("Declare on the blocked connection = %v, want ErrBlocked", err)
	}
	await(t, told, "the backend never heard of the block")
	await(t, answered, "the broker never answered the first declare")
	// The batch opens the first publishing channel (confirm.select), then
	// waits for the block to lift before its first message.
	selected := proxy.awaitAnswer(85, 11)
	msgs := make([]broker.Message, 5)
	for i := range msgs {
		msgs[i] = broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	}
	errs := make([]error, len(msgs))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.PublishBatch(ctx, msgs, func(i int, err error) { errs[i] = err })
	}()
	await(t, selected, "the batch opened no publishing channel")
	proxy.down()
	proxy.up()
	<-done
	for i, err := range errs {
		if err != nil {
			t.Errorf("batch message %d: %v; want it published on the next connection", i, err)
		}
	}
	if n, err := b.Depth(t.Context(), queue); err != nil || n != len(msgs) {
		t.Errorf("Depth = %d, %v; want the %d messages", n, err, len(msgs))
	}
}

// dialToBlock is throughProxy for a test that blocks the connection
// (blockAtDeclare): told gets a token each time the backend logs that the
// broker blocked it.
func dialToBlock(t *testing.T, name string) (_ *proxy, _ *rabbitmq.Backend, queue string, told <-chan struct{}) {
	t.Helper()
	seen := make(chan struct{}, 1)
	h := &noticeHandler{text: "rabbitmq blocked the connection", seen: seen, heard: make(chan struct{})}
	p, b, queue := dialThroughProxy(t, name, &rabbitmq.Options{
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, Logger: slog.New(h)})
	p.blockHeard = h.heard
	return p, b, queue, seen
}

// await waits up to 10 s for c, or fails the test saying what did not
// happen.
func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// noticeHandler is a slog.Handler that sends on seen (without waiting)
// for each record whose message contains text, closes heard (if set) at
// the first, and drops every record.
type noticeHandler struct {
	text  string
	seen  chan struct{}
	heard chan struct{}
	once  sync.Once
}

func (h *noticeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *noticeHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *noticeHandler) WithGroup(string) slog.Handler            { return h }
func (h *noticeHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.text) {
		select {
		case h.seen <- struct{}{}:
		default:
		}
		if h.heard != nil {
			h.once.Do(func() { close(h.heard) })
		}
	}
	return nil
}

// publishSmall publishes n small messages to queue, each confirmed.
func publishSmall(t *testing.T, b *rabbitmq.Backend, queue string, n int) {
	t.Helper()
	for range n {
		msg := broker.Message{Queue: queue, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
		if err := b.Publish(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAWaitForADeclaresTurnEndsWithItsCtx: declares take turns on one
// channel; one that waits behind a declare the broker does not answer
// returns at its own ctx, not at the other's.
func TestAWaitForADeclaresTurnEndsWithItsCtx(t *testing.T) {
	t.Parallel()
	proxy, b, queue := throughProxy(t, "declare-turn")
	proxy.mute()
	firstCtx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- b.Declare(firstCtx, broker.QueueSpec{Name: queue + ".a", Durable: true}) }()
	select {
	case <-proxy.held: // the first declare is on its way, holding the turn
	case <-time.After(10 * time.Second):
		t.Fatal("the first declare never reached the proxy")
	}

	ctx, cancel2 := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel2()
	err := b.Declare(ctx, broker.QueueSpec{Name: queue + ".b", Durable: true})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting to declare") {
		t.Errorf("second Declare = %v, want its own ctx's error while waiting for its turn", err)
	}
	select {
	case err := <-first:
		t.Errorf("the first declare returned (%v) before the second", err)
	default:
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "neither took it nor answered") {
		t.Errorf("first Declare = %v, want the guard's error", err)
	}
}

// throughProxy dials the broker through a proxy that a test can cut, with
// quick reconnects, and declares a work queue of a unique name; the queue
// is deleted and the backend closed when the test ends.
func throughProxy(t *testing.T, name string) (*proxy, *rabbitmq.Backend, string) {
	t.Helper()
	return dialThroughProxy(t, name, &rabbitmq.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
}

// dialThroughProxy is throughProxy with opts (without a Logger, it
// discards).
func dialThroughProxy(t *testing.T, name string, opts *rabbitmq.Options) (*proxy, *rabbitmq.Backend, string) {
	t.Helper()
	proxy := newProxy(t, "127.0.0.1:5672")
	prefix := unique(name)
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := rabbitmq.Dial(t.Context(), "amqp://guest:guest@"+proxy.addr+"/", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	return proxy, b, q
}

// proxy forwards a loopback port to the broker and can be cut.
type proxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup

	cutAt    int64         // once this many bytes went to the broker, cut (0: never)
	sent     int64         // bytes gone to the broker since cutAfter
	cutNow   chan struct{} // closed at the cut
	gate     chan struct{} // while stalled: closed when the stall ends
	muted    atomic.Bool   // see mute
	slow     atomic.Bool   // see throttle
	accepted atomic.Int64  // connections the proxy took
	held     chan struct{} // a token each time bytes to the broker wait in a stall
	trap     atomic.Pointer[declareTrap]
	// blockHeard, when set, is closed once the backend has taken in a
	// block: a sprung trap holds the declare back until then, so that the
	// client's next call after the declare's answer meets the block
	// (the backend follows blocks on a goroutine of its own).
	blockHeard <-chan struct{}
	answers    map[[2]uint16]chan struct{} // see awaitAnswer; under mu
}

// stall holds every byte on its way to the broker, as a congested network
// or a broker that stops reading would, until release is called.
func (p *proxy) stall() (release func()) {
	gate := make(chan struct{})
	p.mu.Lock()
	p.gate = gate
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		p.gate = nil
		p.mu.Unlock()
		close(gate)
	})
}

// heartbeatFrame is an AMQP heartbeat: type 8, channel 0, no payload,
// the frame end.
var heartbeatFrame = []byte{8, 0, 0, 0, 0, 0, 0, 0xCE}

// mute turns the broker into one that never answers but stays alive: bytes
// to the broker are held (stall), the broker's own never reach the client,
// and the proxy sends the client a heartbeat every 50ms instead, until
// unmute (or the end of the test). A broker that blocks a connection (a
// resource alarm) behaves so: it sends heartbeats, reads nothing and
// answers nothing. The broker behind may drop the connection meanwhile
// (it misses the client's heartbeats); the client does not see it. Call it
// while the connection is idle, so that no frame of the broker's is cut in
// half. unmute cuts the connections, which the client then dials again
// through a proxy that forwards as before.
func (p *proxy) mute() (unmute func()) {
	release := p.stall()
	p.muted.Store(true)
	stop := make(chan struct{})
	var injecting sync.WaitGroup
	injecting.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p.mu.Lock()
			conns := p.conns // client, broker pairs
			p.mu.Unlock()
			for i := 0; i < len(conns); i += 2 {
				_, _ = conns[i].Write(heartbeatFrame)
			}
		}
	})
	unmute = sync.OnceFunc(func() {
		close(stop)
		injecting.Wait()
		p.down()
		p.muted.Store(false)
		release()
		p.up()
	})
	p.t.Cleanup(unmute)
	return unmute
}

// throttle makes the way to the broker a slow network: 32 KiB every 10ms.
func (p *proxy) throttle() { p.slow.Store(true) }

// declareTrap is blockAtDeclare's: armed, then sprung, then answered.
type declareTrap struct {
	state    atomic.Int32
	sprung   chan struct{}
	answered chan struct{}
}

// blockAtDeclare arms a trap: at the next queue.declare a client sends, the
// proxy tells that client its connection is blocked (connection.blocked,
// as a broker does in a resource alarm, here without one), then lets the
// declare go on to the broker, which answers it. sprung is closed when the
// client has been told, answered when the broker's answer to that declare
// has gone to the client. The broker lifts no such block: the client
// waits for it as long as the connection lasts. Like mute, it writes to
// the client between the broker's frames only while the broker has
// nothing else to send: a client waiting for its declare's answer.
func (p *proxy) blockAtDeclare() (sprung, answered <-chan struct{}) {
	trap := &declareTrap{sprung: make(chan struct{}), answered: make(chan struct{})}
	p.trap.Store(trap)
	return trap.sprung, trap.answered
}

// awaitAnswer returns a channel closed once the broker sends a client
// the method class.id (an answer, such as confirm.select-ok, 85.11):
// the bytes are on their way to the client, which reads them before
// anything that comes after them, the end of the connection included.
func (p *proxy) awaitAnswer(class, id uint16) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.answers == nil {
		p.answers = map[[2]uint16]chan struct{}{}
	}
	c := make(chan struct{})
	p.answers[[2]uint16{class, id}] = c
	return c
}

func (p *proxy) sawAnswer(class, id uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.answers[[2]uint16{class, id}]; ok {
		close(c)
		delete(p.answers, [2]uint16{class, id})
	}
}

// connectionBlocked is the method frame connection.blocked (class 10,
// method 60) on channel 0, with the reason "test".
var connectionBlocked = []byte{1, 0, 0, 0, 0, 0, 9, 0, 10, 0, 60, 4, 't', 'e', 's', 't', 0xCE}

func (p *proxy) springTrap(client net.Conn) {
	if trap := p.trap.Load(); trap != nil && trap.state.CompareAndSwap(0, 1) {
		_, _ = client.Write(connectionBlocked)
		close(trap.sprung)
		if p.blockHeard != nil {
			select {
			case <-p.blockHeard:
			case <-time.After(5 * time.Second): // the test's await says it
			}
		}
	}
}

func (p *proxy) trapAnswered() {
	if trap := p.trap.Load(); trap != nil && trap.state.CompareAndSwap(1, 2) {
		close(trap.answered)
	}
}

// frameScan follows one direction of an AMQP connection frame by frame
// and calls method with the class and method ids of each method frame.
type frameScan struct {
	skip   int    // bytes to pass before the next frame's header
	hdr    []byte // the frame header read so far (type, channel, size; then a method's class and id)
	method func(class, id uint16)
}

func (f *frameScan) scan(b []byte) {
	for len(b) > 0 {
		if f.skip > 0 {
			n := min(f.skip, len(b))
			f.skip -= n
			b = b[n:]
			continue
		}
		want := 7
		if len(f.hdr) >= 7 && f.hdr[0] == 1 { // a method frame: its ids too
			want = 11
		}
		n := min(want-len(f.hdr), len(b))
		f.hdr = append(f.hdr, b[:n]...)
		b = b[n:]
		if len(f.hdr) < want || (want == 7 && f.hdr[0] == 1) {
			continue
		}
		size := int(binary.BigEndian.Uint32(f.hdr[3:7]))
		f.skip = size + 1 - (len(f.hdr) - 7) // the rest of the payload, and the frame end
		if len(f.hdr) == 11 && f.method != nil {
			f.method(binary.BigEndian.Uint16(f.hdr[7:9]), binary.BigEndian.Uint16(f.hdr[9:11]))
		}
		f.hdr = f.hdr[:0]
	}
}

// trickle writes b to w at throttle's pace.
func (p *proxy) trickle(w io.Writer, b []byte) (int, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	written := 0
	for len(b) > 0 {
		<-tick.C
		n, err := w.Write(b[:min(len(b), 32<<10)])
		written += n
		b = b[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// toClient forwards the broker's bytes to the client until mute.
type toClient struct {
	p      *proxy
	w      io.Writer
	frames frameScan
}

func (t *toClient) Write(b []byte) (int, error) {
	if t.p.muted.Load() {
		return len(b), nil // dropped
	}
	t.frames.scan(b)
	return t.w.Write(b)
}

// cutAfter cuts the proxy (as down does) once n more bytes have gone to the
// broker; the channel is closed then.
func (p *proxy) cutAfter(n int64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAt, p.sent, p.cutNow = n, 0, make(chan struct{})
	return p.cutNow
}

// toBroker counts bytes on their way to the broker for cutAfter.
type toBroker struct {
	p      *proxy
	w      io.Writer
	frames frameScan
}

func (t *toBroker) Write(b []byte) (int, error) {
	t.frames.scan(b)
	t.p.mu.Lock()
	gate := t.p.gate
	t.p.mu.Unlock()
	if gate != nil {
		select {
		case t.p.held <- struct{}{}:
		default:
		}
		<-gate
	}
	if t.p.slow.Load() {
		return t.p.trickle(t.w, b)
	}
	n, err := t.w.Write(b)
	p := t.p
	p.mu.Lock()
	cut := false
	if p.cutAt > 0 {
		p.sent += int64(n)
		if p.sent >= p.cutAt {
			p.cutAt, cut = 0, true
		}
	}
	p.mu.Unlock()
	if cut {
		p.down()
		close(p.cutNow)
	}
	return n, err
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target, held: make(chan struct{}, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = l.Addr().String()
	p.serve(l)
	t.Cleanup(func() { p.down(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			// Small, so that what a stalled proxy holds back stays in the
			// client's socket, and a big write waits there.
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			// The client's stream opens with the 8-byte protocol header.
			toB := &toBroker{p: p, w: up, frames: frameScan{skip: 8, method: func(class, id uint16) {
				if class == 50 && id == 10 { // queue.declare
					p.springTrap(c)
				}
			}}}
			toC := &toClient{p: p, w: c, frames: frameScan{method: func(class, id uint16) {
				if class == 50 && id == 11 { // queue.declare-ok
					p.trapAnswered()
				}
				p.sawAnswer(class, id)
			}}}
			p.wg.Go(func() { _, _ = io.Copy(toB, c); up.Close() })
			p.wg.Go(func() {
				_, _ = io.Copy(toC, up)
				if !p.muted.Load() { // a muted broker stays alive to its client until unmute
					c.Close()
				}
			})
		}
	})
}

// down closes the listener and every forwarded connection.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// up listens again on the same address.
func (p *proxy) up() {
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(l)
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestFormattingABackendNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, b); strings.Contains(got, "guest@") && !strings.Contains(got, "xxxxx") {
			t.Errorf("%s of the backend shows the password: %s", verb, got)
		}
	}
}

// TestAPublishHasTheWireProperties: read back raw, a message carries
// what the Rust crate and any AMQP tool expect: content type
// application/json, persistent, message id = job id, type = kind, its
// priority and correlation id, and the x-attempt and x-deferrals headers
// as unsigned 32-bit integers (AMQP long-uint, as the Rust crate sends).
func TestAPublishHasTheWireProperties(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	q := unique("wire") + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	env := broker.NewEnvelope("send_email", q, []byte(`{"to":"a@example.com"}`), time.Now())
	env.Attempt, env.Deferrals, env.Priority, env.CorrelationID = 3, 2, 7, "order-7"
	msg, err := env.Message()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(t.Context(), msg); err != nil {
		t.Fatal(err)
	}

	d, ok, err := rawChannel(t).Get(q, true)
	if err != nil || !ok {
		t.Fatalf("basic.get: %v, %t", err, ok)
	}
	got := map[string]any{
		"content type": d.ContentType, "delivery mode": d.DeliveryMode, "message id": d.MessageId,
		"type": d.Type, "priority": d.Priority, "correlation id": d.CorrelationId,
		"x-attempt": d.Headers["x-attempt"], "x-deferrals": d.Headers["x-deferrals"],
	}
	want := map[string]any{
		"content type": "application/json", "delivery mode": amqp.Persistent, "message id": env.JobID,
		"type": "send_email", "priority": uint8(7), "correlation id": "order-7",
		"x-attempt": uint32(3), "x-deferrals": uint32(2),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %v (%T), want %v (%T)", k, got[k], got[k], w, w)
		}
	}
	if string(d.Body) != string(msg.Body) {
		t.Errorf("body: got %s, want %s", d.Body, msg.Body)
	}
}

// A consumer whose connection is lost while it is being stopped reports
// the loss, as one lost before its stop does: the broker has its
// deliveries back, and a worker that took the end for its own stop would
// let its handlers run on jobs that run again elsewhere.
func TestAConsumerLostWhileItIsStoppedReportsTheLoss(t *testing.T) {
	t.Parallel()
	proxy, b, q := throughProxy(t, "lost-while-stopping")
	c, err := b.Consume(t.Context(), q, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	if err := b.Publish(t.Context(), broker.Message{Queue: q, ID: broker.NewJobID(), Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Deliveries(): // held, unacked
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	unmute := proxy.mute() // the broker's answer to the stop never comes
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.Stop()
	}()
	unmute() // and then the connection is cut
	for range c.Deliveries() {
	}
	<-stopped
	if err := c.Err(); !errors.Is(err, rabbitmq.ErrConnectionLost) {
		t.Errorf("Err after a loss during the stop = %v, want ErrConnectionLost", err)
	}
}

// TestAPeerThatDoesNotSpeakAMQPIsSaidOnce: a peer that answers the AMQP
// header with something else (an HTTP server, here) is named, its URL
// redacted, as one that does not speak AMQP 0-9-1, once; the amqp091
// error stays under it for errors.As.
func TestAPeerThatDoesNotSpeakAMQPIsSaidOnce(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	t.Cleanup(func() { l.Close(); served.Wait() })
	served.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the client's protocol header first: a close before it
			// is written would fail the write, not the handshake.
			_, _ = io.ReadFull(c, make([]byte, 8))
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	})
	url := "amqp://guest:" + sentinel + "@" + l.Addr().String() + "/"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, url, nil)
	if err == nil {
		b.Close()
		t.Fatal("Dial succeeded")
	}
	var amqpErr *amqp.Error
	text := err.Error()
	if !strings.Contains(text, "the peer at "+rabbitmq.Redact(url)+" did not speak AMQP 0-9-1") ||
		strings.Count(text, "Exception") > 1 || strings.Contains(text, sentinel) || !errors.As(err, &amqpErr) {
		t.Errorf("Dial of an HTTP server: %q (amqp091's error under it: %v); want it said once that the peer at %s did not speak AMQP 0-9-1",
			text, amqpErr != nil, rabbitmq.Redact(url))
	}
}

// TestAMissingVhostIsNotCalledARefusedPassword: RabbitMQ refuses the
// connection.open of a vhost that does not exist (or that the user may not
// use) with 530 NOT_ALLOWED; that is said, and it is not ErrAccessRefused,
// which is for the credentials.
func TestAMissingVhostIsNotCalledARefusedPassword(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(rabbittest.URL())
	if err != nil {
		t.Fatal(err)
	}
	vhost := "no-such-vhost-" + unique("vh")
	u.Path = "/" + vhost
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, u.String(), &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		b.Close()
		t.Fatal("Dial succeeded")
	}
	var amqpErr *amqp.Error
	text := err.Error()
	if errors.Is(err, rabbitmq.ErrAccessRefused) || strings.Contains(text, "password") ||
		!strings.Contains(text, fmt.Sprintf("virtual host %q does not exist or is not accessible to user", vhost)) ||
		!errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotAllowed {
		t.Errorf("Dial of a missing vhost: %q; want it said that the vhost does not exist or is not accessible, "+
			"not ErrAccessRefused, and the broker's 530 under it", text)
	}
}

// TestAChangedDurabilityIsExplainedAsSuch: a queue declared durable by
// someone else, and transient by the backend, is refused with a hint about
// durability (Queue.Transient), not about x-max-priority.
func TestAChangedDurabilityIsExplainedAsSuch(t *testing.T) {
	t.Parallel()
	prefix := unique("durable")
	name := prefix + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, name, name+".dead") })
	ch := rawChannel(t)
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-priority": int64(10)}); err != nil {
		t.Fatal(err)
	}
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work", Transient: true}}}
	_, err := queuey.NewProducer(t.Context(), b, set, nil)
	if err == nil {
		t.Fatal("a transient declaration of a durable queue succeeded")
	}
	text := err.Error()
	if !errors.Is(err, broker.ErrPreconditionFailed) || !strings.Contains(text, "'durable'") ||
		!strings.Contains(text, "Transient") || strings.Contains(text, "x-max-priority") || strings.Contains(text, "MaxPriority") {
		t.Errorf("got %q, want ErrPreconditionFailed naming 'durable' and Queue.Transient, and no word of x-max-priority", text)
	}
}

// An inspection of a queue (Depth, the check of a work queue beside each
// hold) is one passive declare on the declaration channel: it does not
// open and close a channel of its own each time, which cost two more round
// trips and the broker a channel process per call. A missing queue, which
// closes the channel it was asked on, leaves the next inspection working.
func TestAnInspectionIsOnePassiveDeclare(t *testing.T) {
	t.Parallel()
	prefix := unique("inspect")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = b.Close() })
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Depth(t.Context(), q+".missing"); !errors.Is(err, broker.ErrNoQueue) {
		t.Fatalf("Depth of a missing queue: %v, want ErrNoQueue", err)
	}
	if n, err := b.Depth(t.Context(), q); err != nil || n != 0 {
		t.Fatalf("Depth after a missing queue's: %d, %v; want 0, nil", n, err)
	}
	const inspections = 20
	before := rabbitmq.Written(b)
	for range inspections {
		if _, err := b.Depth(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	// A queue.declare frame: 7 bytes of header and 1 of end around the
	// method (4), a reserved short (2), the name (1+len), the flags (1)
	// and an empty table (4). A channel.open and a channel.close around
	// it would add 32.
	declare := 8 + 4 + 2 + 1 + len(q) + 1 + 4
	if per := float64(rabbitmq.Written(b)-before) / inspections; per > float64(declare)+4 {
		t.Errorf("%.1f bytes written per inspection, want those of one passive declare: %d", per, declare)
	}
}
