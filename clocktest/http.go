package clocktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// HTTPServerURL is the URL of every HTTPServer. Its host is never looked
// up: an HTTPServer's Client connects every request to its own server,
// whatever the URL.
const HTTPServerURL = "http://clocktest.invalid"

// ErrHTTPServerClosed is what a request through the Client of a closed
// HTTPServer fails with.
var ErrHTTPServerClosed = errors.New("clocktest: the HTTP server is closed")

// HTTPServer is an HTTP server for tests in virtual time, in place of
// httptest.Server. Its connections are in memory (net.Pipe): its Client
// dials none over the network, it reads and writes through channels, and
// its server runs on goroutines of the same synctest bubble, so the bubble
// sees them blocked when they wait, and a handler that calls the API does
// not stop virtual time. A real connection (httptest.NewServer) would: see
// Options.Watchdog.
//
// It speaks HTTP/1.1 without TLS. Make it, and call it, inside the
// bubble (in the function of Run); Harness.NewHTTPServer closes it when
// the test ends. Outside a bubble it works too, on real time.
type HTTPServer struct {
	// URL is the base URL of the server, HTTPServerURL, for the code
	// under test; call it through Client.
	URL string

	ln        *pipeListener
	srv       *http.Server
	transport *http.Transport
	client    *http.Client
	served    chan struct{} // closed when srv.Serve returns
	closeOnce sync.Once
}

// NewHTTPServer starts an HTTPServer that serves handler. Close it when
// done; Harness.NewHTTPServer does that for you.
func NewHTTPServer(handler http.Handler) *HTTPServer {
	s := &HTTPServer{
		URL:    HTTPServerURL,
		ln:     &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{}), bubble: bubbleID()},
		srv:    &http.Server{Handler: handler},
		served: make(chan struct{}),
	}
	s.transport = &http.Transport{DialContext: s.ln.dial}
	s.client = &http.Client{Transport: s.transport}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.ln) // returns http.ErrServerClosed once Close closed it
	}()
	return s
}

// Client is the client that connects to the server, in memory, whatever
// the host of the URL it is given.
func (s *HTTPServer) Client() *http.Client { return s.client }

// Close closes the server, its connections and its Client's idle
// connections, and waits for the server to stop accepting. A handler of
// the server that is still running goes on, its connection closed. Later
// calls do nothing.
func (s *HTTPServer) Close() {
	s.closeOnce.Do(func() {
		_ = s.srv.Close() // closes the listener and every connection
		s.transport.CloseIdleConnections()
		<-s.served
	})
}

// pipeListener is a net.Listener whose connections are net.Pipes made by
// its dial.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	bubble    int64 // the synctest bubble it was made in; 0: none
}

// dial makes a connection to the listener's server: the client's end of a
// net.Pipe whose other end the server accepts.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	if b := bubbleID(); b != l.bubble {
		return nil, fmt.Errorf("clocktest: an HTTPServer is called in synctest bubble %d but was made in bubble %d (0: none): make it where it is called, inside the function of clocktest.Run", b, l.bubble)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		_, _ = client.Close(), server.Close()
		return nil, ErrHTTPServerClosed
	case <-ctx.Done():
		_, _ = client.Close(), server.Close()
		return nil, ctx.Err()
	}
}

// Accept waits for a connection that dial made.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and dial.
func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr is the listener's address, in name only.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// pipeAddr is the address of an in-memory listener.
type pipeAddr struct{}

// Network is "pipe", as net.Pipe's addresses say.
func (pipeAddr) Network() string { return "pipe" }

// String is the host of HTTPServerURL.
func (pipeAddr) String() string { return "clocktest.invalid" }
