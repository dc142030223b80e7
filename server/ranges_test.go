package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// rangeFrame builds a RANGE frame.
func rangeFrame(req uint32, op protocol.RangeOp, flags, typ uint8, owner, start, end uint64, key string) []byte {
	return protocol.AppendRange(nil, protocol.Frame{Claim: req, Op: op, Flags: flags, LockType: typ,
		Owner: owner, Start: start, End: end, Name: key})
}

// expectRange reads the next frame and requires an ANSWER to req with
// status st.
func (c *v2client) expectRange(req uint32, st protocol.RangeStatus) protocol.Frame {
	c.t.Helper()
	f := c.mustReadV2()
	if f.Type != protocol.TypeRangeAnswer || f.Claim != req || f.Status != st {
		c.t.Fatalf("%s: got %v, want ANSWER(%d %v)", c, f, req, st)
	}
	return f
}

const eof = protocol.MaxRangeEnd

// TestRangeFrames drives every range operation through two sessions over
// TCP: grant, conflict naming the holder and its session's label, query,
// a waiting set promoted by push when the holder unlocks, deadlock
// refusal, cancel, flock, and release-owner.
func TestRangeFrames(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "host-a")
	b := ts.dialV2(t, longLease, "host-b")
	w, r := protocol.LockWrite, protocol.LockRead

	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	t1 := a.expectRange(1, protocol.RangeGranted).Token
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, r, 3, 50, eof, "f"))
	c := b.expectRange(1, protocol.RangeConflict)
	if c.Owner != 7 || c.Session != a.session || c.Label != "host-a" || c.Start != 0 || c.End != 99 || c.LockType != w {
		t.Fatalf("conflict names %v, want a's owner 7 [0,99] write", c)
	}
	b.mustWrite(rangeFrame(2, protocol.RangeQuery, 0, r, 3, 100, eof, "f"))
	b.expectRange(2, protocol.RangeFree)
	b.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeWait, r, 3, 50, eof, "f"))
	b.expectRange(3, protocol.RangeQueued)
	// b's owner 3 waits for a's owner 7; a's owner 7 waiting on b's
	// lock would be a cycle. b holds 200.. first.
	b.mustWrite(rangeFrame(4, protocol.RangeSet, 0, w, 3, 200, 299, "g"))
	b.expectRange(4, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, w, 7, 250, 250, "g"))
	a.expectRange(2, protocol.RangeDeadlock)

	a.mustWrite(rangeFrame(3, protocol.RangeUnlock, 0, 0, 7, 50, 99, "f"))
	a.expectRange(3, protocol.RangeDone)
	if t3 := b.expectRange(3, protocol.RangePromoted).Token; t3 <= t1 {
		t.Errorf("PROMOTED token %d not above the earlier grant's %d", t3, t1)
	}
	// A waiting request withdrawn by cancel; a cancel of nothing has no
	// answer (the PING after it is answered first).
	a.mustWrite(rangeFrame(4, protocol.RangeSet, protocol.RangeWait, w, 8, 60, 60, "f"))
	a.expectRange(4, protocol.RangeQueued)
	a.mustWrite(rangeFrame(4, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"))
	a.expectRange(4, protocol.RangeCancelled)
	a.mustWrite(append(rangeFrame(4, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"), protocol.AppendPing(nil, 9)...))
	if f := a.mustReadV2(); f.Type != protocol.TypePong {
		t.Fatalf("a cancel of nothing answered %v", f)
	}
	// flock is its own namespace: b's fcntl lock does not block it.
	a.mustWrite(rangeFrame(5, protocol.RangeSet, protocol.RangeFlock, w, 1, 0, 0, "f"))
	a.expectRange(5, protocol.RangeGranted)
	b.mustWrite(rangeFrame(5, protocol.RangeSet, protocol.RangeFlock|protocol.RangeWait, r, 1, 0, 0, "f"))
	b.expectRange(5, protocol.RangeQueued)
	a.mustWrite(rangeFrame(6, protocol.RangeRelease, protocol.RangeFlock, 0, 1, 0, 0, "f"))
	a.expectRange(6, protocol.RangeDone)
	b.expectRange(5, protocol.RangePromoted)
	// Invalid requests change nothing.
	a.mustWrite(rangeFrame(7, protocol.RangeSet, 0, 3, 1, 0, 0, "f"))
	a.expectRange(7, protocol.RangeInvalid)
	a.mustWrite(rangeFrame(8, protocol.RangeSet, 0, w, 1, 5, 4, "f"))
	a.expectRange(8, protocol.RangeInvalid)
	a.mustWrite(rangeFrame(9, protocol.RangeSet, 0, w, 1, 0, 0, ""))
	a.expectRange(9, protocol.RangeInvalid)
	// The hop-only ops are not a client's.
	a.mustWrite(rangeFrame(10, protocol.RangeAdopt, 0, 0, 0, 0, 0, "f"))
	a.expectRange(10, protocol.RangeInvalid)
	a.mustWrite(rangeFrame(11, protocol.RangeReassert, 0, w, 1, 0, 0, "f"))
	a.expectRange(11, protocol.RangeInvalid)
	a.mustWrite(rangeFrame(12, protocol.RangeSet, 0, w, 3, 0, 0, "f"))
	a.expectRange(12, protocol.RangeConflict) // b's fcntl lock still holds
}

// TestRangeCloseDropsAll: a session that goes away (its connection
// closed, as when its process is killed) loses every range at once and
// the waiter is promoted; the time is printed.
func TestRangeCloseDropsAll(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	var batch []byte
	for i := uint64(0); i < 100; i++ {
		batch = append(batch, rangeFrame(uint32(i), protocol.RangeSet, 0, protocol.LockWrite, i%3, i*10, i*10+4, "f")...)
	}
	a.mustWrite(batch)
	for i := uint32(0); i < 100; i++ {
		a.expectRange(i, protocol.RangeGranted)
	}
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockRead, 1, 0, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)
	start := time.Now()
	a.conn.Close()
	b.expectRange(1, protocol.RangePromoted)
	took := time.Since(start)
	t.Logf("waiter promoted %v after the holder's connection closed", took)
	if took > 2*time.Second {
		t.Errorf("promotion took %v", took)
	}
}

// TestRangeExpiryDropsAll: a session that falls silent loses its ranges
// when its lease passes.
func TestRangeExpiryDropsAll(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	const lease = 300 * time.Millisecond
	a := ts.dialV2(t, lease, "a")
	b := ts.dialV2(t, longLease, "b")
	start := time.Now()
	a.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 1, 0, 0, "f"))
	a.expectRange(1, protocol.RangeGranted)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeFlock|protocol.RangeWait, protocol.LockWrite, 1, 0, 0, "f"))
	b.expectRange(1, protocol.RangeQueued)
	b.expectRange(1, protocol.RangePromoted)
	if took := time.Since(start); took < lease {
		t.Fatalf("promoted after %v, before the lease %v", took, lease)
	}
	a.expectEOFV2()
}

// TestRangeLimits: each range-lock cap refuses the set past it with
// status 0x0e and an EventRangeRefused naming it, and changes nothing:
// the requests queued before it are promoted as usual.
func TestRangeLimits(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(s *server.Server) {
		s.RangeWaitingPerSession, s.RangeWaitingPerOwner, s.RangeOwnersPerSession = 2, 1, 3
	})
	a := ts.dialV2(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	w := protocol.LockWrite
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 9, 0, eof, "f"))
	b.expectRange(1, protocol.RangeGranted)
	refused := func(reason, key string) {
		t.Helper()
		ts.events.wait(t, "EventRangeRefused "+reason, func(e server.Event) bool {
			return e.Kind == server.EventRangeRefused && e.Action == reason && e.Lock == key && e.Session == server.SessionID(a.session) && e.Label == "a"
		})
	}
	a.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 0, 0, "f"))
	a.expectRange(1, protocol.RangeQueued)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, w, 1, 1, 1, "f"))
	a.expectRange(2, protocol.RangeLimit)
	refused("waiting_per_owner", "f")
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeWait, w, 2, 2, 2, "f"))
	a.expectRange(3, protocol.RangeQueued)
	a.mustWrite(rangeFrame(4, protocol.RangeSet, protocol.RangeWait, w, 3, 3, 3, "f"))
	a.expectRange(4, protocol.RangeLimit)
	refused("waiting_per_session", "f")
	// Owners 1 and 2 wait, 3 holds: a fourth owner is one too many,
	// even for a lock it would get at once.
	a.mustWrite(rangeFrame(5, protocol.RangeSet, 0, w, 3, 0, 0, "g"))
	a.expectRange(5, protocol.RangeGranted)
	a.mustWrite(rangeFrame(6, protocol.RangeSet, 0, w, 4, 1, 1, "g"))
	a.expectRange(6, protocol.RangeLimit)
	refused("owners_per_session", "g")
	// The refusals changed nothing: b's unlock promotes both waiters.
	b.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 9, 0, eof, "f"))
	b.expectRange(2, protocol.RangeDone)
	a.expectRange(1, protocol.RangePromoted)
	a.expectRange(3, protocol.RangePromoted)
	if n := ts.events.count(kind(server.EventRangeRefused)); n != 3 {
		t.Fatalf("%d EventRangeRefused, want 3", n)
	}
}
