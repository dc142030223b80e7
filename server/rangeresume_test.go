package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
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
	heard := time.Now() // a's last frame is sent after this, and read later
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
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

// A resumable client whose node goes (here: its connection to the
// relaying node r1 breaks, and r1 ends its upstream session to the
// owner) re-asserts its range locks through another node, r2: the owner
// kept them for the upstream session and gives them to r2's, and only
// with the client's secret. Nobody waiting is granted meanwhile; the
// locks then live in the new session (its unlock lets the waiter in).
func TestClusterRangeResumeThroughAnotherNode(t *testing.T) {
	t.Parallel()
	owner, r1 := startRangeRelay(t)
	r2 := startServer(t, func(s *server.Server) {
		s.NodeID = "r2"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} }}
	})
	w := protocol.LockWrite
	a, wel := r1.dialResumable(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, w, 9, 0, 0, "g"))
	a.expectRange(2, protocol.RangeGranted)
	b := owner.dialV2(t, longLease, "host-b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 3, 0, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)

	a.breakConn()
	b.expectSilenceV2(300 * time.Millisecond)

	other, _ := r2.dialResumable(t, longLease, "intruder")
	bad := wel
	bad.Secret[0] ^= 1
	other.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "f", bad))
	other.expectRange(1, protocol.RangeConflict)

	a2, _ := r2.dialResumable(t, longLease, "host-a")
	a2.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "f", wel))
	a2.expectRange(1, protocol.RangeDone)
	a2.mustWrite(resumeRangeFrame(2, protocol.RangeFlock, w, 9, 0, 0, "g", wel))
	a2.expectRange(2, protocol.RangeDone)
	b.expectSilenceV2(100 * time.Millisecond)
	b.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, w, 3, 0, 0, "g"))
	if f := b.expectRange(2, protocol.RangeConflict); f.Label != "host-a" {
		t.Errorf("the flock conflict names %q, want the new session's label host-a", f.Label)
	}
	a2.mustWrite(rangeFrame(3, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a2.expectRange(3, protocol.RangeDone)
	b.expectRange(1, protocol.RangePromoted)
	// A resumable session's hang-up keeps its locks; its release lets
	// the waiter in.
	b.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock|protocol.RangeWait, w, 3, 0, 0, "g"))
	b.expectRange(3, protocol.RangeQueued)
	a2.mustWrite(rangeFrame(4, protocol.RangeRelease, protocol.RangeFlock, 0, 9, 0, 0, "g"))
	a2.expectRange(4, protocol.RangeDone)
	b.expectRange(3, protocol.RangePromoted)
}

// A node warming up on a key it took over from a failed node grants no
// new range lock there, but installs a re-asserted one that conflicts
// with nothing: its holder may still believe in it. A node that neither
// serves nor warms the key answers unavailable.
func TestClusterRangeResumeAtWarmingOwner(t *testing.T) {
	t.Parallel()
	r := &router{route: func(name string, _ bool) server.Route {
		if name == "f" {
			return server.Route{Action: server.RouteHold, Gated: true, Since: 1}
		}
		return server.Route{Action: server.RouteHold}
	}}
	ts := startServer(t, func(s *server.Server) { s.Router = r })
	w := protocol.LockWrite
	gone := protocol.Frame{Session: 4, Node: "dead"}
	a, _ := ts.dialResumable(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 3, 0, 0, "f"))
	b.expectRange(1, protocol.RangeUnavailable)
	a.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "f", gone))
	a.expectRange(1, protocol.RangeDone)
	b.mustWrite(resumeRangeFrame(2, 0, w, 3, 50, 50, "f", gone))
	b.expectRange(2, protocol.RangeConflict)
	a.mustWrite(resumeRangeFrame(2, 0, w, 7, 0, 99, "g", gone))
	a.expectRange(2, protocol.RangeUnavailable)
}

// A planned change hands a resumable session's range locks to the key's
// new owner, and the node that was to adopt them there for the session
// (here the prior owner, its host) goes first: its client re-asserts them
// at the new owner, which gives it the stand-in's locks, and only with
// the secret.
func TestClusterRangeResumeFromStandIn(t *testing.T) {
	t.Parallel()
	mp := startMovePair(t)
	w := protocol.LockWrite
	a, wel := mp.prior.dialResumable(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	moving := only("f")
	mp.move(t, moving)
	mp.prior.Close() // the host goes before it adopts them
	mp.commit(moving)

	d := mp.owner.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 1, 50, 50, "f"))
	d.expectRange(1, protocol.RangeConflict) // the stand-in's
	bad := wel
	bad.Secret[0] ^= 1
	d.mustWrite(resumeRangeFrame(2, 0, w, 7, 0, 99, "f", bad))
	d.expectRange(2, protocol.RangeConflict)

	a2, _ := mp.owner.dialResumable(t, longLease, "host-a")
	a2.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "f", wel))
	a2.expectRange(1, protocol.RangeDone)
	d.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeWait, w, 1, 50, 50, "f"))
	d.expectRange(3, protocol.RangeQueued)
	a2.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a2.expectRange(2, protocol.RangeDone)
	d.expectRange(3, protocol.RangePromoted)
}

// A range lock's re-assertion passes the access check as any RANGE set
// and any CLAIM's re-assertion do: a key the client may no longer lock is
// refused 0x0f, and the kept lock stays kept (nobody else gets it).
func TestRangeResumeNotAuthorized(t *testing.T) {
	t.Parallel()
	authz := &switchAuthz{}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	w := protocol.LockWrite
	a, wel := ts.dialResumable(t, longLease, "a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "secret/f"))
	a.expectRange(1, protocol.RangeGranted)
	a.breakConn()
	b := ts.dialV2(t, longLease, "b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 0, 0, "secret/f"))
	b.expectRange(1, protocol.RangeQueued)
	b.expectSilenceV2(300 * time.Millisecond) // a's lock is kept
	authz.deny.Store(true)

	a2, _ := ts.dialResumable(t, longLease, "a")
	a2.mustWrite(resumeRangeFrame(1, 0, w, 7, 0, 99, "secret/f", wel))
	a2.expectRange(1, protocol.RangeDenied)
	b.expectSilenceV2(300 * time.Millisecond) // still kept: b still waits
}
