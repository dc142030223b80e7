package baton

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// A scripted version 2 fake server, like fake_test.go's for version 1:
// the test reads the client's frames one by one and writes the answers
// it chooses, split or coalesced as it likes.

type fakeV2 struct {
	t     *testing.T
	ln    net.Listener
	conns chan *fakeV2Conn
	wg    sync.WaitGroup
}

func newFakeV2(t *testing.T) *fakeV2 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeV2{t: t, ln: ln, conns: make(chan *fakeV2Conn, 16)}
	var mu sync.Mutex
	var all []*fakeV2Conn
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeV2Conn{t: t, c: c, frames: make(chan protocol.Frame, 4096), eof: make(chan struct{})}
			mu.Lock()
			all = append(all, fc)
			mu.Unlock()
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

func (s *fakeV2) client() *Client {
	return New(Config{Address: s.ln.Addr().String(), MinHeartbeatInterval: 10 * time.Millisecond})
}

// acceptV2 returns the next connection after reading its preamble and
// HELLO, and starts reading its frames.
func (s *fakeV2) acceptV2() (*fakeV2Conn, protocol.Frame) {
	s.t.Helper()
	fc := s.acceptRaw()
	var pre [protocol.PreambleLen]byte
	if _, err := io.ReadFull(fc.c, pre[:]); err != nil {
		s.t.Fatalf("fake: preamble: %v", err)
	}
	if !bytes.Equal(pre[:], protocol.AppendPreamble(nil)) {
		s.t.Fatalf("fake: preamble % x", pre)
	}
	hello, err := protocol.ReadHello(fc.c)
	if err != nil {
		s.t.Fatalf("fake: HELLO: %v", err)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fc.read() }()
	return fc, hello
}

func (s *fakeV2) acceptRaw() *fakeV2Conn {
	s.t.Helper()
	select {
	case fc := <-s.conns:
		return fc
	case <-time.After(fakeTimeout):
		s.t.Fatal("fake: no connection")
		return nil
	}
}

type fakeV2Conn struct {
	t      *testing.T
	c      net.Conn
	frames chan protocol.Frame
	eof    chan struct{}
	eofAt  time.Time
}

func (fc *fakeV2Conn) read() {
	defer close(fc.eof)
	for {
		f, err := protocol.ReadClientFrame(fc.c)
		if err != nil {
			fc.eofAt = time.Now()
			return
		}
		fc.frames <- f
	}
}

func (fc *fakeV2Conn) next() protocol.Frame {
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
	return protocol.Frame{}
}

// expect returns the next frame that is not a PING, answering PINGs.
func (fc *fakeV2Conn) expect(typ protocol.Type) protocol.Frame {
	fc.t.Helper()
	for range 1000 {
		f := fc.next()
		if f.Type == protocol.TypePing && typ != protocol.TypePing {
			fc.send(protocol.AppendPong(nil, f.Seq))
			continue
		}
		if f.Type != typ {
			fc.t.Fatalf("fake: got %v, want %v", f, typ)
		}
		return f
	}
	fc.t.Fatal("fake: only PINGs")
	return protocol.Frame{}
}

func (fc *fakeV2Conn) send(b []byte) {
	if _, err := fc.c.Write(b); err != nil && !errors.Is(err, net.ErrClosed) {
		fc.t.Logf("fake: write: %v", err)
	}
}

// welcome answers HELLO.
func (fc *fakeV2Conn) welcome() { fc.send(protocol.AppendWelcome(nil, 7)) }

// waitEOF waits until the client closes, answering nothing, and returns
// when the fake saw it.
func (fc *fakeV2Conn) waitEOF() time.Time {
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

func (fc *fakeV2Conn) closed() bool {
	select {
	case <-fc.eof:
		return true
	default:
		return false
	}
}

// serveV2 answers every frame like a lock server with free locks: HELLO
// is WELCOME, every CLAIM GRANTED with the next token, RELEASE RELEASED,
// PING PONG. It stops at EOF.
func (fc *fakeV2Conn) serveGrantAll(tokens *atomic.Uint64) {
	for {
		var f protocol.Frame
		select {
		case f = <-fc.frames:
		case <-fc.eof:
			return
		}
		switch f.Type {
		case protocol.TypePing:
			fc.send(protocol.AppendPong(nil, f.Seq))
		case protocol.TypeClaim:
			fc.send(protocol.AppendGranted(nil, f.Claim, tokens.Add(1)))
		case protocol.TypeRelease:
			fc.send(protocol.AppendReleased(nil, f.Claim))
		}
	}
}
