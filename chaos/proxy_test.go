package chaos_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// faultProxy forwards a loopback port to the broker. Blackhole stops
// forwarding in both directions but keeps every socket open (a half-open
// path: bytes are neither delivered nor refused), and holds connections
// accepted meanwhile without dialing the broker; Heal forwards again.
// Tarpit makes connections accepted from then on hang for good: accepted,
// never answered, never closed (a peer that takes TCP and never speaks
// AMQP).
type faultProxy struct {
	t      *testing.T
	addr   string
	target string
	l      net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	cond    *sync.Cond
	holding bool // blackholed
	tarpit  bool
	closed  bool
	conns   []net.Conn
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, addr: l.Addr().String(), target: target, l: l}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns = append(p.conns, c)
		tarpit := p.tarpit
		p.mu.Unlock()
		if tarpit {
			continue // held open, never answered, until the proxy closes
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve connects c to the broker once the proxy forwards, and copies both
// ways through the gate.
func (p *faultProxy) serve(c net.Conn) {
	if !p.wait() {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, up)
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { p.copy(up, c) })
	both.Go(func() { p.copy(c, up) })
	both.Wait()
}

// copy forwards src to dst, holding each chunk while the proxy blackholes.
func (p *faultProxy) copy(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// wait blocks while the proxy blackholes; false once it is closed.
func (p *faultProxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.holding && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

func (p *faultProxy) blackhole() {
	p.mu.Lock()
	p.holding = true
	p.mu.Unlock()
}

func (p *faultProxy) heal() {
	p.mu.Lock()
	p.holding, p.tarpit = false, false
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *faultProxy) setTarpit(on bool) {
	p.mu.Lock()
	p.tarpit = on
	p.mu.Unlock()
}

func (p *faultProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.cond.Broadcast()
	_ = p.l.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
