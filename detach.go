package baton

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/batonlock/baton/protocol"
)

// A server that knows DETACH ends a resumable session at once when its
// connection closes without one: a killed process says nothing, and its
// locks pass on in a round trip rather than a lease (docs/protocol-v2-resume.md,
// "v2 detach"). So every close this client makes on purpose while it
// means to re-assert the session's claims elsewhere goes through retire.

// detachWait bounds how long retire waits for the server's DETACHED and
// EOF after its own FIN: the server answers and closes in one round
// trip, and a silent link keeps the claims anyway.
const detachWait = time.Second

// retire closes conn, which the session leaves to resume elsewhere. On
// a connection whose server knows DETACH it first says DETACH, shuts its
// side down for writing and reads until the server's EOF, so that
// closing cannot turn into a reset that throws the DETACH away unread.
// When DETACH cannot be written whole after the frames before it (a
// silent link, a write cut mid-frame) it keeps conn open, sending no FIN
// that a link coming back would deliver as a death, until giveUp (the
// claims are re-asserted elsewhere or lost by then) or the session's
// end. It returns at once; the work goes on in the background.
func (s *Session) retire(conn net.Conn, detach bool, giveUp time.Time) {
	if !detach {
		conn.Close()
		return
	}
	go func() {
		// Stop a write in progress: the session's frames go on the new
		// connection.
		conn.SetWriteDeadline(time.Now())
		for wait := time.Now().Add(detachWait); time.Now().Before(wait); time.Sleep(time.Millisecond) {
			s.mu.Lock()
			busy := s.wconn == conn
			s.mu.Unlock()
			if !busy {
				break
			}
		}
		s.mu.Lock()
		torn := s.torn == conn || s.wconn == conn
		if s.torn == conn {
			s.torn = nil
		}
		s.mu.Unlock()
		until := time.Now().Add(detachWait)
		if giveUp.Before(until) {
			until = giveUp
		}
		if !torn {
			if err := sayDetach(conn, until); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
				// Said, or the connection is gone already (nothing
				// more can reach the server on it).
				conn.Close()
				return
			}
		}
		t := time.NewTimer(time.Until(giveUp))
		select {
		case <-t.C:
		case <-s.lost:
			t.Stop()
		}
		conn.Close()
	}()
}

// sayDetach writes DETACH on conn, shuts its writing side down and reads
// until EOF or until. It returns the write's error: nil when DETACH was
// written whole.
func sayDetach(conn net.Conn, until time.Time) error {
	conn.SetWriteDeadline(until)
	if _, err := conn.Write(protocol.AppendDetach(nil)); err != nil {
		return err
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	conn.SetReadDeadline(until)
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			return nil
		}
	}
}
