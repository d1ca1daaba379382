package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// StallProxy is a TCP proxy in front of a server. Once stranded it passes
// no byte either way and closes nothing, and the connections made to it
// from then on are accepted and never read: every connection through it
// is half-open, as after a network fault that drops everything and resets
// nothing. The kernels on both sides still acknowledge what they are
// sent, so neither TCP keepalives nor TCP_USER_TIMEOUT notice it: only
// deadlines, a driver's own liveness checks and bounded closes end a wait
// on it.
type StallProxy struct {
	ln       net.Listener
	target   string
	stranded chan struct{}
	strand   func()
	dropped  atomic.Int64
	// ended is closed at the end of the test: the held connections close.
	ended chan struct{}
	mu    sync.Mutex
	conns []net.Conn
}

// NewStallProxy listens on a free port of 127.0.0.1 and forwards to target
// until stranded; it closes everything when the test ends.
func NewStallProxy(t testing.TB, target string) *StallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &StallProxy{ln: ln, target: target, stranded: make(chan struct{}), ended: make(chan struct{})}
	p.strand = sync.OnceFunc(func() { close(p.stranded) })
	go p.serve()
	t.Cleanup(func() {
		close(p.ended)
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

// Addr is the proxy's host:port.
func (p *StallProxy) Addr() string { return p.ln.Addr().String() }

// Strand stops passing bytes, for good.
func (p *StallProxy) Strand() { p.strand() }

// Dropped counts the bytes read since the proxy was stranded and never
// passed on: the client's attempts to talk to the server.
func (p *StallProxy) Dropped() int64 { return p.dropped.Load() }

// hold keeps c until the test ends.
func (p *StallProxy) hold(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *StallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.hold(c)
		select {
		case <-p.stranded:
			continue // accepted by the kernel, never read
		default:
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.hold(server)
		go p.pipe(server, c)
		go p.pipe(c, server)
	}
}

// pipe copies src to dst until either ends, which then ends the other, or
// until the proxy is stranded: from then on it reads no more and closes
// nothing.
func (p *StallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.stranded:
			p.dropped.Add(int64(n))
			<-p.ended
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}
