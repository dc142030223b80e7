package baton

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// This file is a scripted fake server: a raw listener that speaks the
// protocol frame by frame under the test's control, with delays where the
// test asks for them. Tests synchronize on the frames it reads.

const fakeTimeout = 5 * time.Second // bound on any wait for an event

type fakeServer struct {
	t     *testing.T
	ln    net.Listener
	conns chan *fakeConn
	wg    sync.WaitGroup
}

func newFake(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, conns: make(chan *fakeConn, 16)}
	var mu sync.Mutex
	var all []*fakeConn
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{t: t, c: c, frames: make(chan clientFrame, 64), eof: make(chan struct{})}
			mu.Lock()
			all = append(all, fc)
			mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); fc.read() }()
			s.conns <- fc
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, fc := range all {
			fc.c.Close()
		}
		mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) client() *Client {
	return New(Config{Address: s.addr(), MinHeartbeatInterval: 10 * time.Millisecond})
}

// accept returns the next connection; its ACQUIRE has arrived.
func (s *fakeServer) accept() (*fakeConn, clientFrame) {
	s.t.Helper()
	select {
	case fc := <-s.conns:
		return fc, fc.expect(protocol.TypeAcquire)
	case <-time.After(fakeTimeout):
		s.t.Fatal("fake: no connection")
		return nil, clientFrame{}
	}
}

type clientFrame struct {
	typ protocol.Type
	acq protocol.Acquire
	at  time.Time // when the fake read it
}

type fakeConn struct {
	t      *testing.T
	c      net.Conn
	frames chan clientFrame
	eof    chan struct{}
	eofAt  time.Time // valid once eof is closed
}

func (fc *fakeConn) read() {
	defer close(fc.eof)
	var b [1]byte
	for {
		if _, err := io.ReadFull(fc.c, b[:]); err != nil {
			fc.eofAt = time.Now()
			return
		}
		f := clientFrame{typ: protocol.Type(b[0])}
		if f.typ == protocol.TypeAcquire {
			a, err := protocol.ReadAcquireBody(fc.c)
			if err != nil {
				fc.eofAt = time.Now()
				return
			}
			f.acq = a
		}
		f.at = time.Now()
		fc.frames <- f
	}
}

// next returns the next client frame, failing the test on EOF or timeout.
func (fc *fakeConn) next() clientFrame {
	fc.t.Helper()
	select {
	case f := <-fc.frames:
		return f
	case <-fc.eof:
		select {
		case f := <-fc.frames:
			return f
		default:
		}
		fc.t.Fatal("fake: client closed the connection, expected a frame")
	case <-time.After(fakeTimeout):
		fc.t.Fatal("fake: no frame from client")
	}
	return clientFrame{}
}

func (fc *fakeConn) expect(typ protocol.Type) clientFrame {
	fc.t.Helper()
	f := fc.next()
	if f.typ != typ {
		fc.t.Fatalf("fake: got %v, want %v", f.typ, typ)
	}
	return f
}

func (fc *fakeConn) send(b []byte) {
	if _, err := fc.c.Write(b); err != nil && !errors.Is(err, net.ErrClosed) {
		fc.t.Logf("fake: write: %v", err)
	}
}

func (fc *fakeConn) waiting()                { fc.send(protocol.AppendWaiting(nil)) }
func (fc *fakeConn) acquired(token uint64)   { fc.send(protocol.AppendAcquired(nil, token)) }
func (fc *fakeConn) fail(code protocol.Code) { fc.send(protocol.AppendError(nil, code, "scripted")) }

// waitEOF waits until the client closes the connection and returns when
// the fake saw it. Any frame still arriving is discarded.
func (fc *fakeConn) waitEOF() time.Time {
	fc.t.Helper()
	timeout := time.After(fakeTimeout)
	for {
		select {
		case <-fc.frames:
		case <-fc.eof:
			return fc.eofAt
		case <-timeout:
			fc.t.Fatal("fake: client did not close the connection")
		}
	}
}

// closed reports whether the client has closed the connection.
func (fc *fakeConn) closed() bool {
	select {
	case <-fc.eof:
		return true
	default:
		return false
	}
}

// responder answers heartbeats in the background: each reply is sent
// delay after the heartbeat arrived, with the frame from reply. It
// fails the test if a heartbeat arrives while the previous one is still
// unanswered (two in flight). Arrivals are published on beats.
type responder struct {
	fc    *fakeConn
	beats chan time.Time
	stop  chan struct{}
	done  chan struct{}
}

func (fc *fakeConn) respond(delay time.Duration, reply func(n int) []byte) *responder {
	r := &responder{fc: fc, beats: make(chan time.Time, 1024), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var repliedAt time.Time
		for n := 1; ; n++ {
			var f clientFrame
			select {
			case f = <-fc.frames:
			case <-fc.eof:
				return
			case <-r.stop:
				return
			}
			if f.typ != protocol.TypeHeartbeat {
				fc.t.Errorf("fake: got %v, want HEARTBEAT", f.typ)
				return
			}
			if f.at.Before(repliedAt) {
				fc.t.Errorf("fake: heartbeat %d arrived %v before the reply to the previous one was sent: two in flight", n, repliedAt.Sub(f.at))
			}
			r.beats <- f.at
			if delay > 0 {
				select {
				case <-time.After(delay):
				case <-r.stop:
					return
				}
			}
			b := reply(n)
			if b == nil { // silence from now on
				<-r.stop
				return
			}
			repliedAt = time.Now()
			fc.send(b)
		}
	}()
	return r
}

// halt stops the responder and waits for it.
func (r *responder) halt() {
	close(r.stop)
	<-r.done
}

// beat waits for the next heartbeat arrival.
func (r *responder) beat() time.Time {
	r.fc.t.Helper()
	select {
	case at := <-r.beats:
		return at
	case <-time.After(fakeTimeout):
		r.fc.t.Fatal("fake: no heartbeat")
		return time.Time{}
	}
}

func always(b []byte) func(int) []byte { return func(int) []byte { return b } }
