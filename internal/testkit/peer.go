package testkit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/batonlock/baton/protocol"
)

// adapterError: the adapter reported an error before its client
// connected.
type adapterError struct{ msg string }

func (e adapterError) Error() string {
	return "the adapter reported an error before its client connected: " + e.msg
}

// rx is one frame the fake server read, stamped on arrival, or the end
// of the connection (err set: io.EOF for the client's close).
type rx struct {
	f   protocol.Frame
	at  time.Time
	err error
}

// peer is the fake server's side of one client connection. A reader
// goroutine stamps every frame as it arrives, whether or not the script
// reads it yet, so arrival times and the client's close are observed
// while the script stays silent.
type peer struct {
	k     *kit
	conn  net.Conn
	hello protocol.Frame
	// v1: a version 1 connection, opened with acquire.
	v1      bool
	acquire protocol.Acquire
	in      chan rx

	wmu sync.Mutex

	mu       sync.Mutex
	closedAt time.Time     // when the reader saw the end of the connection
	gone     chan struct{} // closed then
}

// accept waits for the adapter's client to connect and reads its opening
// (the version 2 preamble and HELLO), without answering it.
func (k *kit) accept(deadline time.Time) (*peer, error) {
	return k.acceptAs(deadline, false)
}

// acceptV1 plays a server that speaks version 1 only: it refuses every
// version 2 opening with the version 1 ERROR 0x10, as such a server
// does, and returns the first version 1 connection, its ACQUIRE read and
// not answered.
func (k *kit) acceptV1(deadline time.Time) (*peer, error) {
	return k.acceptAs(deadline, true)
}

func (k *kit) acceptAs(deadline time.Time, v1 bool) (*peer, error) {
	for {
		c, err := k.acceptConn(deadline)
		if err != nil {
			return nil, err
		}
		p, err := k.opening(c, deadline, v1)
		if p != nil || err != nil {
			return p, err
		}
	}
}

// acceptConn waits for a connection, or for the adapter to say it will
// not make one.
func (k *kit) acceptConn(deadline time.Time) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := k.ln.Accept()
		ch <- res{c, err}
	}()
	var c net.Conn
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for c == nil {
		k.mu.Lock()
		changed, done := k.evAdded, k.evDone
		k.mu.Unlock()
		// An adapter that says its client lacks what the scenario
		// asks for, or that fails before it connects, ends the wait.
		if e, ok := k.find("unsupported"); ok {
			k.ln.Close()
			return nil, errSkip{feature: e.Feature}
		}
		if e, ok := k.find("lost"); ok {
			k.ln.Close()
			return nil, adapterError{"lost: " + e.Reason}
		}
		if e, ok := k.find("error"); ok {
			k.ln.Close()
			return nil, adapterError{e.Message}
		}
		if e, ok := k.find("bad"); ok {
			k.ln.Close()
			return nil, fmt.Errorf("the adapter printed a line that is not an event: %q", e.raw)
		}
		if done {
			k.ln.Close()
			return nil, errors.New("the adapter ended its output before its client connected")
		}
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			c = r.c
		case <-changed:
		case <-timer.C:
			k.ln.Close() // ends the Accept
			return nil, fmt.Errorf("the client did not connect by %s", k.at(deadline))
		case <-k.ctx.Done():
			k.ln.Close()
			return nil, fmt.Errorf("the client did not connect: %w", k.ctx.Err())
		}
	}
	return c, nil
}

// opening reads the opening of connection c. With v1 a version 2 opening
// is refused (nil peer, nil error: the client is expected to fall back
// on a new connection).
func (k *kit) opening(c net.Conn, deadline time.Time, v1 bool) (*peer, error) {
	now := time.Now()
	p := &peer{k: k, conn: c, in: make(chan rx, 1024), gone: make(chan struct{})}
	k.mu.Lock()
	n := len(k.peers) + 1
	k.peers = append(k.peers, p)
	k.mu.Unlock()
	k.mark(fmt.Sprintf("server: connection %d accepted", n), now)

	br := bufio.NewReader(c)
	c.SetReadDeadline(deadline)
	var pre [2]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("no opening from the client: %v", err)
	}
	if pre[0] != byte(protocol.TypeAcquire) || (pre[1] != protocol.Version2 && pre[1] != protocol.Version) {
		return nil, fmt.Errorf("the client's opening is % x, neither the version 2 preamble 01 02 nor a version 1 ACQUIRE", pre)
	}
	if pre[1] == protocol.Version {
		if !v1 {
			return nil, errors.New("the client opened with a version 1 ACQUIRE; the kit's server speaks version 2")
		}
		a, err := protocol.ReadAcquireBody(io.MultiReader(bytes.NewReader(pre[1:]), br))
		if err != nil {
			return nil, fmt.Errorf("bad version 1 ACQUIRE: %v", err)
		}
		c.SetReadDeadline(time.Time{})
		p.v1, p.acquire = true, a
		k.mark(fmt.Sprintf("server: read ACQUIRE(v1 %dms %q)", a.LeaseMS, a.Name), time.Now())
		go p.readV1(br)
		return p, nil
	}
	if err := protocol.ReadPreambleTail(br); err != nil {
		return nil, fmt.Errorf("bad preamble: %v", err)
	}
	if v1 {
		// A version 1 server reads the 8-byte header, answers ERROR
		// 0x10 and discards what follows before it closes, so that the
		// ERROR is not lost to a reset.
		p.write(protocol.AppendError(nil, protocol.CodeUnsupportedVersion, ""), whole, "version 1 ERROR 0x10: this server speaks version 1 only")
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		io.Copy(io.Discard, br)
		c.Close()
		return nil, nil
	}
	hello, err := protocol.ReadHello(br)
	if err != nil {
		return nil, fmt.Errorf("bad HELLO: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	p.hello = hello
	k.mark("server: read "+hello.String(), time.Now())
	go p.read(br)
	return p, nil
}

// readV1 is read for a version 1 connection: after ACQUIRE every client
// frame is a one-byte HEARTBEAT.
func (p *peer) readV1(br *bufio.Reader) {
	for {
		b, err := br.ReadByte()
		now := time.Now()
		if err == nil && protocol.Type(b) != protocol.TypeHeartbeat {
			err = fmt.Errorf("a byte 0x%02x that is no version 1 client frame", b)
		}
		if err != nil {
			p.ended(now, err)
			return
		}
		p.k.mark("server: read HEARTBEAT", now)
		if !p.deliver(rx{f: protocol.Frame{Type: protocol.TypeHeartbeat}, at: now}) {
			return
		}
	}
}

func (p *peer) read(br *bufio.Reader) {
	for {
		f, err := protocol.ReadClientFrame(br)
		now := time.Now()
		var ce *protocol.ClaimError
		if err != nil && !errors.As(err, &ce) {
			p.ended(now, err)
			return
		}
		p.k.mark("server: read "+f.String(), now)
		if !p.deliver(rx{f: f, at: now}) {
			return
		}
	}
}

// ended records the end of the connection, seen at now.
func (p *peer) ended(now time.Time, err error) {
	p.mu.Lock()
	p.closedAt = now
	p.mu.Unlock()
	what := "server: client closed the connection"
	switch {
	case errors.Is(err, net.ErrClosed):
		what = "server: connection closed by the kit"
	case !errors.Is(err, io.EOF):
		what = "server: connection ended: " + err.Error()
	}
	p.k.mark(what, now)
	close(p.gone)
	p.deliver(rx{at: now, err: err})
}

// deliver hands r to the script, unless the scenario is over.
func (p *peer) deliver(r rx) bool {
	select {
	case p.in <- r:
		return true
	case <-p.k.ctx.Done():
		return false
	}
}

// next returns the next frame read, or the end of the connection, or
// errTimeout at the deadline.
func (p *peer) next(deadline time.Time) (rx, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r := <-p.in:
		return r, nil
	case <-t.C:
		return rx{}, errTimeout
	case <-p.k.ctx.Done():
		return rx{}, p.k.ctx.Err()
	}
}

// endedAt returns when the reader saw the connection end, and whether it
// has by now.
func (p *peer) endedAt() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closedAt, !p.closedAt.IsZero()
}

// writeMode is how the fake server puts frames on the wire.
type writeMode int

const (
	whole    writeMode = iota // one write per call
	bytewise                  // one write per byte, each flushed
)

// write sends b and records what it sent. In bytewise mode every byte is
// its own TCP segment (Nagle is off on Go's connections), a millisecond
// apart, so the client's reader sees each frame split at every boundary.
func (p *peer) write(b []byte, mode writeMode, what string) (time.Time, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	var err error
	if mode == bytewise {
		for i := range b {
			if _, err = p.conn.Write(b[i : i+1]); err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		_, err = p.conn.Write(b)
	}
	now := time.Now()
	if err != nil {
		p.k.mark("server: write failed: "+err.Error(), now)
		return now, err
	}
	p.k.mark("server: sent "+what, now)
	return now, nil
}

// welcome answers the HELLO: a plain session, or a resumable one with the
// given secret when the HELLO asked for it.
func (p *peer) welcome(session uint64, secret [protocol.SecretLen]byte, mode writeMode) error {
	f := protocol.Frame{Type: protocol.TypeWelcome, Session: session}
	if p.hello.Resumable() {
		f.Flags |= protocol.WelcomeResumable
		f.Secret = secret
	}
	if p.hello.Tickets() {
		f.Flags |= protocol.WelcomeTickets
	}
	_, err := p.write(protocol.AppendFrame(nil, f), mode, f.String())
	return err
}

// answerer answers requests in order as they arrive.
type answerer struct {
	p *peer
	// claim answers a CLAIM; nil answers GRANTED with token.
	claim func(f protocol.Frame) []byte
	token uint64
	mode  writeMode
	// lastAnswered is the arrival of the latest request answered: the
	// client's anchor is that request's send time, which is no later.
	lastAnswered time.Time
}

// answer writes the answer to request r.
func (a *answerer) answer(r rx) error {
	var b []byte
	f := r.f
	switch f.Type {
	case protocol.TypePing:
		b = protocol.AppendPong(nil, f.Seq)
	case protocol.TypeRelease:
		b = protocol.AppendReleased(nil, f.Claim)
	case protocol.TypeRing:
		// A single server's ring: none, never pushed (a client that
		// routes may ask before it claims).
		b = protocol.AppendRingEnd(nil, 0, 0, 0)
	case protocol.TypeClaim:
		if a.claim != nil {
			b = a.claim(f)
		} else {
			b = protocol.AppendGranted(nil, f.Claim, a.token)
		}
	default:
		return fmt.Errorf("the client sent %v, which the kit does not expect", f)
	}
	if _, err := a.p.write(b, a.mode, "answer to "+f.String()); err != nil {
		return err
	}
	a.lastAnswered = r.at
	return nil
}

// serve answers every request as it arrives until the deadline, or
// until stop (called after each answer) says to stop. It returns the
// frame that stopped it, or an error for the connection's end.
func (a *answerer) serve(deadline time.Time, stop func(rx) bool) (rx, error) {
	for {
		r, err := a.p.next(deadline)
		if err != nil {
			return rx{}, err
		}
		if r.err != nil {
			return r, fmt.Errorf("the client closed the connection at %s while the kit was answering", a.p.k.at(r.at))
		}
		if err := a.answer(r); err != nil {
			return r, err
		}
		if stop != nil && stop(r) {
			return r, nil
		}
	}
}
