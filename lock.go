package baton

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// v1Lock is the backend of a Claim made on a connection of its own, as
// Client.Acquire makes it (and a Session fallen back to version 1): one
// exclusive claim per version 1 connection, kept alive with heartbeats
// until release or loss. It runs one reader goroutine for the life of its
// connection and a timer for heartbeats; release stops both. Its methods
// are safe for concurrent use.
//
// When it gives up on its own (no confirmed heartbeat within 0.8 of the
// lease, ErrHeartbeatTimeout), it stops believing at once (Lost is
// closed, heartbeats stop) but keeps the connection open until release or
// CloseBy, whichever comes first: the server cannot hand the lock to the
// next waiter while the connection is open and the lease runs, so the
// guarded work has the lease's last fifth to stop. A held lock's ERROR
// 0x01 (server shutting down, or a cluster moving the name to another
// node) does the same: a moving name is handed on only once its holder
// hangs up, so the work stops first. Every other end of the claim (any
// other ERROR frame, a protocol violation, a lost connection) closes the
// connection at once.
type v1Lock struct {
	name       string
	conn       net.Conn
	noWait     bool          // TryAcquire: a first WAITING ends the claim with ErrBusy
	granted    chan struct{} // closed when the claim becomes the owner
	lost       chan struct{} // closed when the claim ends, for any reason
	readerDone chan struct{}
	writers    sync.WaitGroup // heartbeat writes in progress
	closers    sync.WaitGroup // a running callback of closeTimer
	closeOnce  sync.Once

	mu         sync.Mutex
	rule       clientrule.Rule
	timer      *time.Timer                                  // heartbeat timer, created at the first reply
	closeTimer *time.Timer                                  // after a give-up: closes the connection at CloseBy
	done       bool                                         // the claim has ended
	err        error                                        // why it ended; nil for Release
	onLost     func(error)                                  // Do's cancel of fn's context
	lostHook   func(name string, token uint64, cause error) // Config.OnLost
}

// Name, Token, Lost, CloseBy and Err are documented on Claim, which
// hands them on.
func (l *v1Lock) Name() string { return l.name }

func (l *v1Lock) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rule.Token()
}

func (l *v1Lock) Lost() <-chan struct{} { return l.lost }

func (l *v1Lock) CloseBy() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rule.CloseBy()
}

func (l *v1Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// release gives the lock up by closing the connection (the server
// promotes the next waiter at once; after a give-up it closes the
// connection kept open for the work to stop) and waits until the
// goroutines have stopped. It is idempotent and returns the same as Err.
func (l *v1Lock) release() error {
	l.finish(nil)
	l.mu.Lock()
	t := l.closeTimer
	l.closeTimer = nil
	l.mu.Unlock()
	if t != nil && t.Stop() {
		l.closers.Done() // its callback will not run
	}
	l.closeConn()
	l.writers.Wait()
	<-l.readerDone
	l.closers.Wait()
	return l.Err()
}

// finish ends the claim once: records the cause, stops the heartbeat
// timer, cancels Do's function and closes Lost, and only then closes the
// connection, which lets the server promote the next waiter. A give-up on
// timeout (ErrHeartbeatTimeout) leaves the connection open until Release
// or CloseBy (docs/protocol.md, client obligation 3), and so does a held
// lock's ERROR 0x01: a cluster node that moves the name waits for the
// holder to hang up before anyone else may have it (docs/cluster.md), so
// the guarded work, an operation in flight included, ends first. Every
// other cause closes it at once.
func (l *v1Lock) finish(cause error) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done, l.err = true, cause
	l.rule.Close()
	if l.timer != nil {
		l.timer.Stop()
	}
	onLost := l.onLost
	var token uint64
	select {
	case <-l.granted:
		token = l.rule.Token()
	default:
	}
	hold := errors.Is(cause, ErrHeartbeatTimeout) ||
		token != 0 && errors.Is(cause, protocol.ErrShuttingDown)
	if hold {
		l.closers.Add(1)
		l.closeTimer = time.AfterFunc(time.Until(l.rule.CloseBy()), func() {
			defer l.closers.Done()
			l.closeConn()
		})
	}
	l.mu.Unlock()
	// Tell the work before anything can hand the lock on.
	if l.lostHook != nil && cause != nil && token != 0 {
		l.lostHook(l.name, token, cause)
	}
	if onLost != nil && cause != nil {
		onLost(cause)
	}
	close(l.lost)
	if !hold {
		l.closeConn()
	}
}

// closeConn closes the connection once.
func (l *v1Lock) closeConn() { l.closeOnce.Do(func() { l.conn.Close() }) }

// frameReadBuf is the size of a v1Lock's read buffer: a few WAITING and
// ACQUIRED frames (an ERROR's longer reason is read through it).
const frameReadBuf = 64

// read is the permanent reader (docs/protocol.md, client obligation 1). The
// read deadline is the give-up deadline, so the netpoller, not a timer,
// enforces it; only a reply moves the deadline, and only here.
func (l *v1Lock) read() {
	defer close(l.readerDone)
	l.mu.Lock()
	deadline := l.rule.Deadline()
	l.mu.Unlock()
	// Buffered, so that a frame that arrived whole (an ACQUIRED: type
	// and token) takes one read, not one for its type and one for the
	// rest.
	br := bufio.NewReaderSize(l.conn, frameReadBuf)
	for {
		if err := l.conn.SetReadDeadline(deadline); err != nil {
			l.finish(connErr(err))
			return
		}
		f, err := protocol.ReadServerFrame(br)
		now := time.Now()
		if err != nil {
			l.finish(readErr(err))
			return
		}
		if f.Type == protocol.TypeError {
			l.finish(&ServerError{Code: f.Code, Reason: f.Reason})
			return
		}
		if deadline, err = l.received(f, now); err != nil {
			l.finish(err)
			return
		}
	}
}

// received feeds a WAITING or ACQUIRED frame to the rule and acts on the
// outcome. It returns the new give-up deadline, or the cause if the claim
// must end.
func (l *v1Lock) received(f protocol.ServerFrame, now time.Time) (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done { // released meanwhile: the close will end the read loop
		return l.rule.Deadline(), nil
	}
	prev := l.rule.State()
	if err := l.rule.Received(f, now); err != nil {
		if errors.Is(err, clientrule.ErrExpired) {
			return time.Time{}, ErrHeartbeatTimeout
		}
		return time.Time{}, fmt.Errorf("%w: %v", ErrProtocolViolation, err)
	}
	switch state := l.rule.State(); {
	case state == clientrule.Owner && prev != clientrule.Owner:
		close(l.granted)
	case state == clientrule.Waiting && prev == clientrule.Pending && l.noWait:
		return time.Time{}, ErrBusy
	}
	l.scheduleHeartbeat()
	return l.rule.Deadline(), nil
}

// readErr classifies an error from reading a frame.
func readErr(err error) error {
	switch {
	case errors.Is(err, protocol.ErrMalformedFrame):
		return fmt.Errorf("%w: %v", ErrProtocolViolation, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ErrHeartbeatTimeout
	case errors.Is(err, io.EOF):
		return ErrConnectionClosed
	}
	return connErr(err)
}

// connErr classifies a failed I/O call.
func connErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ErrHeartbeatTimeout
	}
	return fmt.Errorf("%w: %w", ErrConnectionClosed, err)
}
