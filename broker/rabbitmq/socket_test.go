package rabbitmq

import (
	"io"
	"net"
	"testing"
)

// countedConn counts a big write as its pieces go, not once it is all
// sent: guard reads the count to tell a slow network from a stopped one.
func TestCountedConnCountsABigWriteAsItGoes(t *testing.T) {
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
