package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Range locks of resumable sessions over real TCP (server/rangeresume.go).

// resumeRangeFrame re-asserts a range lock of the session prior welcomed.
func resumeRangeFrame(req uint32, flags, typ uint8, owner, start, end uint64, key string, prior protocol.Frame) []byte {
	return protocol.AppendRange(nil, protocol.Frame{Claim: req, Op: protocol.RangeResume, Flags: flags, LockType: typ,
		Owner: owner, Start: start, End: end, Name: key, Session: prior.Session, Secret: prior.Secret, Node: prior.Node})
}

// A resumable session whose connection breaks keeps its range locks:
// nobody waiting for them is granted, its own waiting set ends (a grant
// would reach nobody), and a new session that re-asserts them with the
// secret holds them; a re-assertion without it is refused and steals
// nothing.
func TestRangeResumeKeepsAndAdopts(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	w, r := protocol.LockWrite, protocol.LockRead
	a, wel := ts.dialResumable(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	c := ts.dialV2(t, longLease, "c")

	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, w, 1, 0, 0, "g"))
	a.expectRange(2, protocol.RangeGranted)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 1, 0, 0, "h"))
	b.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeWait, w, 7, 0, 0, "h"))
	a.expectRange(3, protocol.RangeQueued)
	c.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, r, 1, 50, 50, "f"))
	c.expectRange(1, protocol.RangeQueued)

	a.breakConn()
	c.expectSilenceV2(300 * time.Millisecond) // a's write on f is kept
	// a's waiting set on h ended: b's unlock lets a newcomer in.
	b.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 1, 0, 0, "h"))
	b.expectRange(2, protocol.RangeDone)
	b.mustWrite(rangeFrame(3, protocol.RangeSet, 0, w, 2, 0, 0, "h"))
	b.expectRange(3, protocol.RangeGranted)

	// Without the secret: refused, and the kept lock stays a's.
	bad := wel
	bad.Secret[0] ^= 1
	b.mustWrite(resumeRangeFrame(4, 0, w, 7, 0, 99, "f", bad))
	b.expectRange(4, protocol.RangeConflict)

	a2, _ := ts.dialResumable(t, longLease, "a")
	a2.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "f", wel))
	a2.expectRange(1, protocol.RangeDone)
	a2.mustWrite(resumeRangeFrame(2, protocol.RangeFlock, w, 1, 0, 0, "g", wel))
	a2.expectRange(2, protocol.RangeDone)
	b.mustWrite(rangeFrame(5, protocol.RangeSet, protocol.RangeFlock, r, 9, 0, 0, "g"))
	b.expectRange(5, protocol.RangeConflict)
	c.expectSilenceV2(100 * time.Millisecond)
	// The locks are a2's now: its unlock grants c.
	a2.mustWrite(rangeFrame(3, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a2.expectRange(3, protocol.RangeDone)
	c.expectRange(1, protocol.RangePromoted)
}

// Kept range locks go once the lease has passed since the session was
// last heard from, and not before: a waiter is granted then.
func TestRangeResumeKeptUntilLease(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	const lease = 1500 * time.Millisecond
	a, _ := ts.dialResumable(t, lease, "a")
	c := ts.dialV2(t, longLease, "c")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	heard := time.Now()
	c.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 1, 0, 0, "f"))
	c.expectRange(1, protocol.RangeQueued)
	a.breakConn()
	c.expectRange(1, protocol.RangePromoted)
	if waited := time.Since(heard); waited < lease {
		t.Fatalf("the kept range lock went %v after the session was last heard from, before its lease %v", waited, lease)
	}
}

// A client that sees its connection break before the server does
// re-asserts on a new session: the open session's locks on the key move,
// and its waiting sets end.
func TestRangeResumeFromOpenSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	w := protocol.LockWrite
	a, wel := ts.dialResumable(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 10, 19, "f"))
	a.expectRange(1, protocol.RangeGranted)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 1, 0, 0, "f"))
	b.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, w, 7, 0, 0, "f"))
	a.expectRange(2, protocol.RangeQueued)

	a2, _ := ts.dialResumable(t, longLease, "a")
	a2.mustWrite(resumeRangeFrame(1, 0, w, 7, 10, 19, "f", wel))
	a2.expectRange(1, protocol.RangeDone)
	// a's waiting set ended: b's unlock grants nobody, and a newcomer
	// gets the byte.
	b.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 1, 0, 0, "f"))
	b.expectRange(2, protocol.RangeDone)
	b.mustWrite(rangeFrame(3, protocol.RangeSet, 0, w, 2, 0, 0, "f"))
	b.expectRange(3, protocol.RangeGranted)
	b.mustWrite(rangeFrame(4, protocol.RangeSet, 0, w, 2, 15, 15, "f"))
	if f := b.expectRange(4, protocol.RangeConflict); f.Session != a2.session {
		t.Fatalf("the conflict is session %d's, want the new session %d's", f.Session, a2.session)
	}
}

// Where nothing is kept for the earlier session (a node that took the
// key over, or the lease passed), the lock is installed unless a
// conflicting one holds; a bad lock is invalid.
func TestRangeResumeInstallsOrRefuses(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	w, r := protocol.LockWrite, protocol.LockRead
	gone := protocol.Frame{Session: 999, Node: "n9"}
	b := ts.dialV2(t, longLease, "b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, r, 1, 0, 9, "f"))
	b.expectRange(1, protocol.RangeGranted)
	a, _ := ts.dialResumable(t, longLease, "a")
	a.mustWrite(resumeRangeFrame(1, 0, r, 7, 0, 99, "f", gone))
	a.expectRange(1, protocol.RangeDone)
	a.mustWrite(resumeRangeFrame(2, 0, w, 8, 5, 5, "f", gone))
	a.expectRange(2, protocol.RangeConflict)
	a.mustWrite(resumeRangeFrame(3, 0, 9, 8, 5, 5, "f", gone))
	a.expectRange(3, protocol.RangeInvalid)
	b.mustWrite(rangeFrame(2, protocol.RangeSet, 0, w, 1, 50, 50, "f"))
	b.expectRange(2, protocol.RangeConflict)
}

// A plain session's range locks go at once when its connection breaks,
// as before: it is not resumable.
func TestRangePlainSessionBreakDropsAtOnce(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "a")
	c := ts.dialV2(t, longLease, "c")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	c.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 1, 0, 0, "f"))
	c.expectRange(1, protocol.RangeQueued)
	a.breakConn()
	start := time.Now()
	c.expectRange(1, protocol.RangePromoted)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("promoted %v after the break", d)
	}
}
