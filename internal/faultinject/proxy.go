//go:build linux

package faultinject

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy with faults, put between one client and the
// server. It forwards each accepted connection to Target and can
//
//   - delay: hold every chunk of bytes, in each direction, for an added
//     delay before forwarding it (order is kept);
//   - blackhole: drop everything in both directions and close nothing, as
//     a network partition does, until Heal; then reset the connections
//     that were cut, as a healed network does with connections whose
//     peers have long given up;
//   - reset: abort every current connection with a TCP reset to both
//     sides.
//
// A close on one side is passed on as a half-close to the other, except
// during a blackhole.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration, each way

	mu         sync.Mutex
	blackholed bool
	links      map[*link]struct{}
	closed     bool
	wg         sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 (port 0) and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay added to each direction; zero forwards at once.
// It applies to the bytes read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Blackhole starts dropping all traffic of the current connections and of
// those accepted from now on, without closing anything.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackholed = true
	for l := range p.links {
		l.blackholed.Store(true)
	}
}

// Heal ends a blackhole: the connections it cut are reset on both sides;
// new connections are forwarded again. It returns how many were reset.
func (p *Proxy) Heal() int {
	p.mu.Lock()
	p.blackholed = false
	var cut []*link
	for l := range p.links {
		if l.blackholed.Load() {
			cut = append(cut, l)
		}
	}
	p.mu.Unlock()
	for _, l := range cut {
		l.abort()
	}
	return len(cut)
}

// Reset aborts every current connection with a TCP reset to both sides,
// the client's first. It returns how many connections it reset.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.abort()
	}
	return len(ls)
}

// Close stops accepting, aborts every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	sc, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// As a refused connection would: the client sees a reset.
		client.SetLinger(0)
		client.Close()
		return
	}
	l := &link{client: client, server: sc.(*net.TCPConn), p: p}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.abort()
		return
	}
	l.blackholed.Store(p.blackholed)
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { l.pump(l.client, l.server) })
	wg.Go(func() { l.pump(l.server, l.client) })
	wg.Wait()
	l.client.Close()
	l.server.Close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection.
type link struct {
	client, server *net.TCPConn
	p              *Proxy
	blackholed     atomic.Bool
	abortOnce      sync.Once
}

// abort resets both sides (SO_LINGER 0), the client's first.
func (l *link) abort() {
	l.abortOnce.Do(func() {
		l.client.SetLinger(0)
		l.client.Close()
		l.server.SetLinger(0)
		l.server.Close()
	})
}

// chunk is bytes read at a time, or the end of the stream (data nil).
type chunk struct {
	data []byte
	due  time.Time
	err  error // the read error that ended the stream, with data nil
}

// pump copies src to dst: a reader that stamps each chunk with its due
// time, and a writer that forwards it then, so that a delay holds the
// bytes back without reordering them or slowing the reader.
func (l *link) pump(src, dst *net.TCPConn) {
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 16<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(l.p.delay.Load()))}
			}
			if err != nil {
				ch <- chunk{err: err, due: time.Now().Add(time.Duration(l.p.delay.Load()))}
				return
			}
		}
	}()
	for c := range ch {
		if l.blackholed.Load() {
			continue // dropped; a close is not passed on either
		}
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
			if l.blackholed.Load() {
				continue
			}
		}
		if c.data == nil {
			if errors.Is(c.err, io.EOF) {
				dst.CloseWrite()
			} else {
				l.abort() // a reset (or our own abort) is passed on as a reset
			}
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			l.abort()
		}
	}
}
