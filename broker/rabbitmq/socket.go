package rabbitmq

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// countedConn is the socket under a connection (the TCP connection, under
// TLS when there is TLS), counting the bytes written to it: guard tells by
// it a connection that goes slowly from one that has stopped.
type countedConn struct {
	net.Conn
	written atomic.Int64
}

// countedPiece is the most Write hands the socket at once. A TCP write
// returns only once all of it is sent, and amqp091 writes a body frame
// (up to 128 KiB) in one call: in pieces, the count moves on a slow
// network too (16 KiB in guard's 2 s is 8 KB/s).
const countedPiece = 16 << 10

func (c *countedConn) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n, err := c.Conn.Write(b[:min(len(b), countedPiece)])
		c.written.Add(int64(n))
		written += n
		b = b[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// socketWriter is the actor that owns a connection's writes: amqp091
// flushes every publish on its own, one write system call each, and the
// broker reads each as a packet of its own. Write hands what amqp091
// flushes to the writer goroutine, which sends, in one write, everything
// handed to it while its last write was under way: with many callers
// publishing, many publishes go in one packet, at a lower cost per publish
// to both sides (ARCHITECTURE.md, "A connection's socket"). Alone, a publish
// goes out at once, as before.
//
// A small piece (a publish's frames, an ack) is copied and queued, and
// Write returns; a big one (a body frame past amqp091's buffer) waits until
// it is on the socket, as a plain write would, so that what is queued stays
// small and a socket the broker no longer reads holds the publish in its
// write, where guard looks for it.
//
// Order is kept: one goroutine writes, in the order Write was called
// (amqp091 calls it under its connection's send lock). A failed write
// fails every later Write, and closes the socket, so amqp091's reader ends
// the connection as it would on its own failed write.
type socketWriter struct {
	*countedConn
	pieces  chan piece
	closing chan struct{} // closed by Close: write what is queued, then stop
	done    chan struct{} // closed when the writer goroutine has returned
	broken  chan struct{} // closed when a write failed; err says why
	err     error
	once    sync.Once
	drain   time.Duration // socketDrain but in tests
}

// piece is what one Write hands the writer.
type piece struct {
	b       []byte
	written chan error // for a big piece: its outcome, once on the socket
}

const (
	// socketQueue is how many pieces may wait for the writer. Past it
	// Write waits, as a write to a full socket would.
	socketQueue = 256
	// smallPiece is the most Write copies and queues: amqp091's buffer.
	smallPiece = 4 << 10
	// socketBatch is the size past which the writer adds no more pieces
	// to a write.
	socketBatch = 64 << 10
	// socketDrain bounds how long Close lets the writer send what is
	// queued before it closes the socket under it.
	socketDrain = time.Second
)

func newSocketWriter(conn *countedConn) *socketWriter {
	w := &socketWriter{
		countedConn: conn,
		pieces:      make(chan piece, socketQueue),
		closing:     make(chan struct{}),
		done:        make(chan struct{}),
		broken:      make(chan struct{}),
		drain:       socketDrain,
	}
	go w.run()
	return w
}

// Write hands b to the writer: a copy of a small b (amqp091 reuses its
// buffer), or b itself, waiting until it is written.
func (w *socketWriter) Write(b []byte) (int, error) {
	if err := w.failure(); err != nil {
		return 0, err
	}
	p := piece{b: b}
	if len(b) <= smallPiece {
		p.b = append([]byte(nil), b...)
	} else {
		p.written = make(chan error, 1)
	}
	select {
	case w.pieces <- p:
	case <-w.broken:
		return 0, w.err
	case <-w.closing:
		return 0, w.closedError()
	}
	if p.written == nil {
		return len(b), nil
	}
	var err error
	select {
	case err = <-p.written:
	case <-w.done:
		select {
		case err = <-p.written: // it wrote p, then stopped
		default: // it stopped before it took p
			err = w.failure()
		}
	}
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// failure says why Write can take nothing more, if it cannot.
func (w *socketWriter) failure() error {
	select {
	case <-w.broken:
		return w.err
	case <-w.closing:
		return w.closedError()
	default:
		return nil
	}
}

// closedError is what a write to a closed socket returns (lostOr reports
// it as a lost connection, and the publish is made again on the next).
func (w *socketWriter) closedError() error {
	return &net.OpError{Op: "write", Net: "tcp", Source: w.LocalAddr(), Addr: w.RemoteAddr(), Err: net.ErrClosed}
}

// Read reads the socket. Once a write failed, a read that fails says what
// the write met (a reset, a timeout): the writer closed the socket after
// it, and amqp091's reader, which ends the connection, tells its cause.
func (w *socketWriter) Read(b []byte) (int, error) {
	n, err := w.countedConn.Read(b)
	if err != nil {
		select {
		case <-w.broken:
			return n, w.err
		default:
		}
	}
	return n, err
}

// Close sends what is queued (at most socketDrain long), then closes the
// socket and waits for the writer to return.
func (w *socketWriter) Close() error {
	w.once.Do(func() { close(w.closing) })
	timer := time.NewTimer(w.drain)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
	}
	err := w.countedConn.Close()
	<-w.done
	return err
}

// run writes what Write hands it until Close or a failed write.
func (w *socketWriter) run() {
	defer close(w.done)
	var b batch
	for {
		select {
		case p := <-w.pieces:
			b.add(p)
			if !w.send(w.gather(&b)) {
				return
			}
		case <-w.closing:
			w.drainAll(&b)
			return
		}
	}
}

// drainAll sends what is queued, a batch at a time, until nothing is left
// or a write fails.
func (w *socketWriter) drainAll(b *batch) {
	for {
		if !w.send(w.gather(b)) || len(w.pieces) == 0 {
			return
		}
	}
}

// batch is what one write sends, and who waits for it.
type batch struct {
	bytes   []byte
	waiters []chan error
}

func (b *batch) add(p piece) {
	b.bytes = append(b.bytes, p.b...)
	if p.written != nil {
		b.waiters = append(b.waiters, p.written)
	}
}

// gather adds to b the pieces queued now, up to socketBatch.
func (w *socketWriter) gather(b *batch) *batch {
	for len(b.bytes) < socketBatch {
		select {
		case p := <-w.pieces:
			b.add(p)
		default:
			return b
		}
	}
	return b
}

// send writes b, answers its waiters and empties it; on failure it records
// why, closes the socket and reports false.
func (w *socketWriter) send(b *batch) bool {
	var err error
	if len(b.bytes) > 0 {
		_, err = w.countedConn.Write(b.bytes)
	}
	for _, waiter := range b.waiters {
		waiter <- err
	}
	b.bytes, b.waiters = b.bytes[:0], b.waiters[:0]
	if err != nil {
		w.err = err
		close(w.broken)
		_ = w.countedConn.Close()
		return false
	}
	return true
}
