package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/inspect"
)

const webUsage = `usage: queuey web [-demo] [-url URL] [-prefix P] [-queues a,b] [-listen ADDR] [-management URL|off] [-read-only]

Serves the operator's console. Each queue's declaration is read from
RabbitMQ's management API; without it, or to override it for every
queue: -type, -max-priority, -transient, -message-ttl. -demo serves it on the in-memory backend
with jobs flowing, deferring, failing and a schedule ticking: no broker.
A -listen address that is not loopback needs a credential in
$QUEUEY_WEB_TOKEN (sent as a bearer token, or as basic auth's password).
`

// webFlags are queuey web's flags.
type webFlags struct {
	demo, readOnly      bool
	url, prefix, queues string
	listen              string
	decl                declared
}

func parseWeb(args []string, stderr io.Writer) (webFlags, error) {
	var f webFlags
	fs := flag.NewFlagSet("queuey web", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, webUsage); fs.PrintDefaults() }
	fs.BoolVar(&f.demo, "demo", false, "serve a demo on the in-memory backend (no broker)")
	fs.StringVar(&f.url, "url", "", "AMQP URL of the broker (default $QUEUEY_AMQP_URL, else the local broker at 127.0.0.1:5672 as guest)")
	fs.StringVar(&f.prefix, "prefix", "", "the queue set's prefix")
	fs.StringVar(&f.queues, "queues", "", "the set's queue names, comma-separated (required without -demo)")
	f.decl.register(fs)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:0", "address to serve on (port 0: a free one, printed at start)")
	fs.BoolVar(&f.readOnly, "read-only", false, "refuse every replay, delete, pause, resume and cancel")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if !f.demo && strings.TrimSpace(f.queues) == "" {
		return f, errors.New("-queues is required (or -demo)")
	}
	return f, f.decl.check(fs)
}

// web is the queuey web command.
func web(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseWeb(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "queuey web: %v\n\n%s", err, webUsage)
		return exitUsage
	}
	token := os.Getenv("QUEUEY_WEB_TOKEN")
	if err := checkListen(f.listen, token); err != nil {
		fmt.Fprintf(stderr, "queuey web: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, stop, err := openConsole(ctx, f, logger)
	if err != nil {
		fmt.Fprintf(stderr, "queuey web: %v\n", err)
		return exitError
	}
	defer stop()
	if err := serve(ctx, f.listen, withToken(c, token), stdout); err != nil {
		fmt.Fprintf(stderr, "queuey web: %v\n", err)
		return exitError
	}
	return exitOK
}

// checkListen refuses a non-loopback address without a credential.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && ip.IsLoopback()) || token != "" {
		return nil
	}
	return fmt.Errorf("-listen %s is reachable from other machines, and the console replays and deletes jobs: set $QUEUEY_WEB_TOKEN to a secret to require it, or listen on 127.0.0.1", addr)
}

// withToken requires token (a bearer token, or basic auth's password),
// when there is one.
func withToken(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			_, got, _ = r.BasicAuth()
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="queuey console"`)
			http.Error(w, "the console needs its token ($QUEUEY_WEB_TOKEN) as the password", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serve serves h on addr until ctx ends, and prints the URL once it listens.
func serve(ctx context.Context, addr string, h http.Handler, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "queuey console on http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}

// openConsole builds the console on the broker, or the demo, and returns
// what stops it.
func openConsole(ctx context.Context, f webFlags, logger *slog.Logger) (http.Handler, func(), error) {
	if f.demo {
		return startDemo(ctx, logger)
	}
	raw := cmp.Or(f.url, os.Getenv("QUEUEY_AMQP_URL"), defaultURL)
	backend, err := rabbitmq.Dial(ctx, raw, &rabbitmq.Options{ConnectionName: "queuey web", Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	api := f.decl.api(raw)
	set, learned, err := webSet(ctx, backend, api, f)
	if err != nil {
		backend.Close()
		return nil, nil, err
	}
	opts := &console.Options{ReadOnly: f.readOnly, Logger: logger, Producer: &queuey.ProducerConfig{Logger: logger}, Management: api}
	c, err := console.New(ctx, backend, set, opts)
	if err != nil {
		backend.Close()
		var ie *broker.InequivalentError
		if errors.As(err, &ie) {
			if l, ok := learned[ie.Queue]; ok {
				err = f.decl.explain(err, ie.Queue, l.q, l.unknown)
			}
		}
		return nil, nil, err
	}
	return runConsole(ctx, c, func() { backend.Close() })
}

// learnedQueue is a queue of the console's set as the broker's declaration
// and the flags say it, and why the declaration is not known ("" when
// it is).
type learnedQueue struct {
	q       queuey.Queue
	unknown string
}

// webSet is the set of the queues -queues names, each as the broker
// declared it, by broker name too. A queue that does not exist is an
// error: nothing is created.
func webSet(ctx context.Context, backend *rabbitmq.Backend, api *inspect.Management, f webFlags) (queuey.QueueSet, map[string]learnedQueue, error) {
	set := queuey.QueueSet{Prefix: f.prefix}
	learned := map[string]learnedQueue{}
	for n := range strings.SplitSeq(f.queues, ",") {
		n = strings.TrimSpace(n)
		b := broker.QueueName(f.prefix, n)
		if _, err := backend.Depth(ctx, b); err != nil {
			return set, nil, fmt.Errorf("queue %q: %w (check -prefix and -queues); nothing was created", b, err)
		}
		q, unknown, err := f.decl.queue(ctx, api, f.prefix, n)
		if err != nil {
			return set, nil, err
		}
		set.Queues = append(set.Queues, q)
		learned[b] = learnedQueue{q, unknown}
	}
	return set, learned, nil
}

// runConsole runs c's listener until stop, then closes.
func runConsole(ctx context.Context, c *console.Console, closeAll func()) (http.Handler, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return c, func() { cancel(); <-done; closeAll() }, nil
}
