package rabbitmq

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countedConn counts a big write as its pieces go, not once it is all
// sent: guard reads the count to tell a slow network from a stopped one.
func TestCountedConnCountsABigWriteAsItGoes(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := &countedConn{Conn: client}
	const size = 4 * countedPiece
	type result struct {
		n   int
		err error
	}
	wrote := make(chan result, 1)
	go func() {
		n, err := c.Write(make([]byte, size))
		wrote <- result{n, err}
	}()

	// One piece and one byte more read: the first piece's write has
	// returned (net.Pipe hands a write over only as it is read), and the
	// second has begun.
	if _, err := io.ReadFull(server, make([]byte, countedPiece+1)); err != nil {
		t.Fatal(err)
	}
	if got := c.written.Load(); got != countedPiece {
		t.Errorf("written = %d while the write goes on, want %d (one piece)", got, countedPiece)
	}
	select {
	case r := <-wrote:
		t.Fatalf("Write returned %d, %v before all of it was read", r.n, r.err)
	default:
	}

	if _, err := io.ReadFull(server, make([]byte, size-countedPiece-1)); err != nil {
		t.Fatal(err)
	}
	if r := <-wrote; r.n != size || r.err != nil {
		t.Errorf("Write = %d, %v; want %d, nil", r.n, r.err, size)
	}
	if got := c.written.Load(); got != size {
		t.Errorf("written = %d, want %d", got, size)
	}
}

// writeCounter counts the writes that reach the socket.
type writeCounter struct {
	net.Conn
	writes atomic.Int32
}

func (c *writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// What is flushed while the socket is busy goes out in one write, in the
// order it was flushed.
func TestSocketWriterSendsWhatQueuedMeanwhileInOneWriteInOrder(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	counter := &writeCounter{Conn: client}
	w := newSocketWriter(&countedConn{Conn: counter})
	defer w.Close()

	var want bytes.Buffer
	for i := range 11 {
		piece := fmt.Appendf(nil, "publish %02d;", i)
		want.Write(piece)
		// net.Pipe takes a write only as it is read: the writer's first
		// write waits, and the rest queue behind it.
		if n, err := w.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("the socket got %q, want %q", got, want.Bytes())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := counter.writes.Load(); n > 2 {
		t.Errorf("11 flushes took %d writes, want at most 2 (the first, then the rest at once)", n)
	}
	if got := w.written.Load(); got != int64(want.Len()) {
		t.Errorf("written = %d, want %d", got, want.Len())
	}
}

// A write that fails fails the Writes after it, and closes the socket so
// that amqp091's reader ends the connection.
func TestSocketWriterFailsLaterWritesOnceAWriteFailed(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	w := newSocketWriter(&countedConn{Conn: client})
	defer w.Close()
	server.Close()

	if _, err := w.Write([]byte("lost")); err != nil {
		t.Fatalf("the first Write = %v; it only queues", err)
	}
	// The writer tells the failure (broken) before it closes the socket,
	// so that a read failing on the close finds its cause; it has closed
	// it once it has returned (done).
	<-w.broken
	<-w.done
	if _, err := w.Write([]byte("after")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a Write after the failed one = %v, want the write's error (%v)", err, io.ErrClosedPipe)
	}
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("reading the socket = %v, want it closed", err)
	}
}

// Close sends what is queued before it closes the socket.
func TestSocketWriterCloseSendsWhatIsQueuedFirst(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	w := newSocketWriter(&countedConn{Conn: client})
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(server) // until the writer closes the socket
		read <- b
	}()
	for _, piece := range []string{"connection.close-ok", ";bye"} {
		if _, err := w.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := string(<-read); got != "connection.close-ok;bye" {
		t.Errorf("the peer read %q before the close", got)
	}
	if _, err := w.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close = %v, want net.ErrClosed", err)
	}
}

// A peer that reads nothing does not hold Close past its drain.
func TestSocketWriterCloseGivesUpAStuckWrite(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	w := newSocketWriter(&countedConn{Conn: client})
	w.drain = time.Millisecond
	if _, err := w.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = w.Close() // the socket's close ends the stuck write, and the writer with it
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close had not returned 5 s after its 1 ms drain, the writer stuck in a write the peer never reads")
	}
}

// A piece past amqp091's buffer (a big body's frame) is not queued: its
// Write returns once it is on the socket, so a socket the broker no longer
// reads holds the publish in its write (where guard looks) and what waits
// in memory stays small.
func TestSocketWriterBigPieceWaitsForTheSocket(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	w := newSocketWriter(&countedConn{Conn: client})
	defer w.Close()
	big := make([]byte, smallPiece+1)
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write(big)
		wrote <- err
	}()

	// Read all but the last byte: the write is still under way.
	if _, err := io.ReadFull(server, make([]byte, len(big)-1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		t.Fatalf("Write returned (%v) before its piece was on the socket", err)
	default:
	}
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Errorf("Write = %v", err)
	}
}

// A Write the writer no longer takes, as the connection closes, fails as a
// write to a closed socket does (a *net.OpError), so that lostOr reports
// the connection lost and the publish is made again on the next one.
func TestSocketWriterAWriteAfterCloseIsALostConnection(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	w := newSocketWriter(&countedConn{Conn: client})
	_ = w.Close()
	_, err := w.Write([]byte("publish"))
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v (%T), want a *net.OpError wrapping net.ErrClosed", err, err)
	}
	if got := lostOr(err); !errors.Is(got, ErrConnectionLost) {
		t.Errorf("lostOr(%v) = %v, want ErrConnectionLost", err, got)
	}
}

// Close sends everything queued, more than one write's worth too: a
// connection.close-ok or an ack queued behind a burst of publishes is not
// dropped.
func TestSocketWriterCloseSendsAllThatIsQueued(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	w := newSocketWriter(&countedConn{Conn: client})
	const pieces = 200 // of 4 KiB: 800 KiB, many times socketBatch
	piece := bytes.Repeat([]byte("x"), smallPiece)
	for range pieces {
		if _, err := w.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	read := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, server) // until the writer closes the socket
		read <- int(n)
	}()
	_ = w.Close()
	if got := <-read; got != pieces*smallPiece {
		t.Errorf("the peer read %d bytes before the close, want all %d queued", got, pieces*smallPiece)
	}
}

// failingConn fails every write with err and blocks reads until closed.
type failingConn struct {
	net.Conn
	err    error
	closed chan struct{}
}

func (c *failingConn) Write([]byte) (int, error) { return 0, c.err }
func (c *failingConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}
func (c *failingConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

// Once a write failed, the socket's reads end with that write's error:
// amqp091's reader, which notices first, says why the connection ended
// (a reset, a timeout), not that the socket was closed.
func TestSocketWriterReadSaysWhyTheWriteFailed(t *testing.T) {
	t.Parallel()
	errReset := errors.New("connection reset by peer")
	conn := &failingConn{err: errReset, closed: make(chan struct{})}
	w := newSocketWriter(&countedConn{Conn: conn})
	defer w.Close()
	if _, err := w.Write([]byte("publish")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Read(make([]byte, 1)); !errors.Is(err, errReset) {
		t.Errorf("Read after the failed write = %v, want the write's error", err)
	}
}
