package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Sessions opened with the detach flag over real TCP (docs/protocol-v2-resume.md,
// "v2 detach"): the connection's end without DETACH is the client's
// death and releases at once; with DETACH, or silence, the claims are
// kept for a re-assertion.

// dialDetach opens a resumable session with the detach flag and returns
// it with its WELCOME.
func (ts *testServer) dialDetach(t *testing.T, lease time.Duration, label string) (*v2client, protocol.Frame) {
	t.Helper()
	c := ts.dialV2Raw(t)
	c.mustWrite(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(lease), Flags: protocol.HelloResumable | protocol.HelloDetach, Label: label}))
	w := c.mustReadV2()
	if w.Type != protocol.TypeWelcome || w.Flags&protocol.WelcomeDetach == 0 || w.Flags&protocol.WelcomeResumable == 0 {
		t.Fatalf("%s: detach opening answered %v, want WELCOME with the resumable and detach flags", c, w)
	}
	c.session = w.Session
	return c, w
}

// detach says DETACH, expects DETACHED, and closes as the Go client
// does: its side first, then, after the server's EOF, the connection.
func (c *v2client) detach() {
	c.t.Helper()
	c.mustWrite(protocol.AppendDetach(nil))
	if f := c.mustReadV2(); f.Type != protocol.TypeDetached {
		c.t.Fatalf("%s: DETACH answered %v, want DETACHED", c, f)
	}
	c.conn.CloseWrite()
	c.expectEOFV2()
	c.conn.Close()
}

// A killed holder's kernel sends FIN or a reset, and nothing else: the
// waiter is promoted at once, and the claim cannot be re-asserted.
func TestDetachUnannouncedCloseReleases(t *testing.T) {
	for _, reset := range []bool{false, true} {
		ts := startServer(t)
		a, w := ts.dialDetach(t, longLease, "a")
		tok := a.mustHold(1, excl2, 0, "job")
		waiter := ts.dialV2(t, longLease, "w")
		waiter.mustQueue(1, excl2, 0, "job")
		start := time.Now()
		if reset {
			a.breakConn()
		} else {
			a.close()
		}
		if got := waiter.expectPromoted(1); got <= tok {
			t.Errorf("reset=%v: waiter promoted with %d, want above %d", reset, got, tok)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("reset=%v: waiter promoted %v after the holder's connection ended", reset, d)
		}
		if n := ts.KeptSessions(); n != 0 {
			t.Errorf("reset=%v: KeptSessions = %d, want 0", reset, n)
		}
		a2, _ := ts.dialDetach(t, longLease, "a")
		if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeRefused || f.Code != protocol.CodeReassertRefused {
			t.Errorf("reset=%v: re-assertion after an unannounced close answered %v, want REFUSED 0x04", reset, f)
		}
	}
}

// A client that said DETACH keeps its claims through the close, and
// re-asserts them with their tokens on a new session.
func TestDetachAnnouncedCloseKeeps(t *testing.T) {
	ts := startServer(t)
	a, w := ts.dialDetach(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	waiter := ts.dialV2(t, longLease, "w")
	waiter.mustQueue(1, excl2, 0, "job")
	a.detach()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	waiter.expectSilenceV2(300 * time.Millisecond)

	a2, _ := ts.dialDetach(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion after DETACH answered %v, want GRANTED(%d)", f, tok)
	}
	// The new session has the detach flag too: killed now, it releases.
	a2.breakConn()
	waiter.expectPromoted(1)
}

// A silent connection (a frame not completed within the io-timeout: the
// link died mid-frame) keeps the claims, as without the flag.
func TestDetachSilentConnectionKeeps(t *testing.T) {
	ts := startServer(t, withIOTimeout(ioTimeout))
	a, w := ts.dialDetach(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	waiter := ts.dialV2(t, longLease, "w")
	waiter.mustQueue(1, excl2, 0, "job")
	a.mustWrite(claimFrame(2, excl2, 0, "other")[:5])
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	waiter.expectSilenceV2(200 * time.Millisecond)
	a2, _ := ts.dialDetach(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion after a silent connection answered %v, want GRANTED(%d)", f, tok)
	}
}

// Through a relaying node: a client that hangs up without DETACH has its
// claims released at the owner at once; one that detaches has them kept
// there, and re-asserts them through another node.
func TestDetachRelayed(t *testing.T) {
	owner, r1, r2 := startRelayTrio(t)
	a, _ := r1.dialDetach(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "x")
	waitRelayed(t, r1, 1, 1)
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	start := time.Now()
	a.breakConn()
	tok2 := b.expectPromoted(1)
	if tok2 <= tok {
		t.Errorf("b promoted with %d, want above %d", tok2, tok)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("promoted %v after the relayed holder was killed", d)
	}

	c, w := r1.dialDetach(t, longLease, "c")
	c.mustQueue(1, excl2, 0, "x")
	b.release(1)
	ctok := c.expectPromoted(1)
	d := owner.dialV2(t, longLease, "d")
	d.mustQueue(1, excl2, 0, "x")
	c.detach()
	owner.events.wait(t, "relayed session kept", func(e server.Event) bool {
		return e.Kind == server.EventSessionKept && strings.HasPrefix(e.Peer.Via, "r1/")
	})
	d.expectSilenceV2(300 * time.Millisecond)
	c2, _ := r2.dialDetach(t, longLease, "c")
	if f := c2.reassert(1, excl2, "x", ctok, w); f.Type != protocol.TypeGranted || f.Token != ctok {
		t.Fatalf("re-assertion through r2 after DETACH answered %v, want GRANTED(%d)", f, ctok)
	}
}

// Range locks follow the claims: a killed detach session's range lock
// is released at once, directly and through a relaying node; after
// DETACH it is kept for a re-assertion.
func TestDetachRangeLocks(t *testing.T) {
	w := protocol.LockWrite
	for _, relayed := range []bool{false, true} {
		owner, r1, _ := startRelayTrio(t)
		via := owner
		if relayed {
			via = r1
		}
		a, _ := via.dialDetach(t, longLease, "a")
		a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
		a.expectRange(1, protocol.RangeGranted)
		c := owner.dialV2(t, longLease, "c")
		c.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 0, 9, "f"))
		c.expectRange(1, protocol.RangeQueued)
		start := time.Now()
		a.breakConn()
		c.expectRange(1, protocol.RangePromoted)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("relayed=%v: the waiter promoted %v after the holder was killed", relayed, d)
		}

		b, wel := via.dialDetach(t, longLease, "b")
		b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 3, 20, 29, "f"))
		b.expectRange(1, protocol.RangeGranted)
		b.detach()
		c.mustWrite(rangeFrame(2, protocol.RangeSet, 0, w, 1, 25, 25, "f"))
		c.expectRange(2, protocol.RangeConflict)
		b2, _ := via.dialDetach(t, longLease, "b")
		b2.mustWrite(resumeRangeFrame(1, 0, w, 3, 20, 29, "f", wel))
		b2.expectRange(1, protocol.RangeDone)
	}
}
