package clustercore

import (
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// A session's range locks on a key that move to a new owner, as its host
// sees them (docs/cluster.md, "Range locks"), and what an upstream's
// failure decides for the range locks it carried. While a key moves, the
// host releases no answer to the client (Confirmation.Block), answers
// its range requests on the key unavailable, and, once its ring routes
// the key to the new owner, asks it to adopt them (a planned change: the
// new owner keeps them under a stand-in) or re-asserts them one by one
// (a failover). A key not adopted within half the lease after it began
// moving here, or past the window its client may believe in, or that
// the new owner no longer keeps, ends the session (ERROR 0x03): its
// client must stop believing in range locks nobody keeps.

// RangeMove is a key whose range locks move to a new owner, until the
// host has them adopted there.
type RangeMove struct {
	Since time.Time           // when it began moving here
	Locks []rangelock.KeyLock // the session's locks on the key
	// Failover: the key's owner was lost, and Locks are re-asserted at
	// its next owner (RangeReassert, one per lock) rather than adopted,
	// until Believed (Move.Believed). Pending counts the re-assertions
	// in flight, and again says one was answered "not yet".
	Failover bool
	Believed time.Time
	Pending  int
	again    bool
}

// Expired reports whether at now the key has moved for half the lease,
// or, after a failure, past the window its client may believe in: the
// session ends.
func (rm *RangeMove) Expired(now time.Time, lease time.Duration) bool {
	return now.Sub(rm.Since) >= lease/2 || rm.Failover && !now.Before(rm.Believed)
}

// Requests returns what the host sends to the owner the key routes to
// (another node): RANGE adopt(key) after a planned change, else one
// RANGE reassert per lock, whose answers it then counts.
func (rm *RangeMove) Requests(key string) []protocol.Frame {
	if !rm.Failover {
		return []protocol.Frame{{Op: protocol.RangeAdopt, Name: key}}
	}
	fs := make([]protocol.Frame, len(rm.Locks))
	for i, kl := range rm.Locks {
		fs[i] = rangemirror.Frame(protocol.RangeReassert, kl)
	}
	rm.Pending, rm.again = len(fs), false
	return fs
}

// RangeOutcome is what an answer about a moving key leads to.
type RangeOutcome uint8

const (
	// RangeWaiting: more answers are due.
	RangeWaiting RangeOutcome = iota
	// RangeAgain: the owner does not serve the key yet; asked again.
	RangeAgain
	// RangeTaken: the owner holds the locks for the session now: a
	// hang-up releases them there, its upstream's loss ends or
	// re-asserts them.
	RangeTaken
	// RangeLost: the owner no longer keeps them (adopt), or a
	// conflicting lock holds there (reassert): the session ends.
	RangeLost
)

// Answered applies the owner's answer st to one of the Requests.
func (rm *RangeMove) Answered(st protocol.RangeStatus) RangeOutcome {
	if !rm.Failover {
		switch st {
		case protocol.RangeDone:
			return RangeTaken
		case protocol.RangeUnavailable:
			return RangeAgain
		}
		return RangeLost
	}
	rm.Pending--
	switch st {
	case protocol.RangeDone:
	case protocol.RangeUnavailable:
		rm.again = true
	default:
		return RangeLost
	}
	switch {
	case rm.Pending > 0:
		return RangeWaiting
	case rm.again:
		rm.again = false
		return RangeAgain
	}
	return RangeTaken
}

// Unavailable reports whether RANGE f on the moving key is answered
// unavailable (the client asks again once the locks are there). An
// unlock or release of locks re-asserted after a failover is not: it
// applies to what is re-asserted (Drop).
func (rm *RangeMove) Unavailable(f protocol.Frame) bool {
	return !rm.Failover || f.Op != protocol.RangeUnlock && f.Op != protocol.RangeRelease
}

// Drop applies the client's unlock or release f to the locks to
// re-assert, and returns how many are left.
func (rm *RangeMove) Drop(f protocol.Frame) (left int) {
	m := rangemirror.New()
	m.Put(rm.Locks)
	m.Answered(f, protocol.RangeDone)
	rm.Locks = m.Take(f.Name)
	return len(rm.Locks)
}

// RangeFate is what becomes of a RANGE request in flight on an upstream
// that failed (FailedRange).
type RangeFate uint8

const (
	// RangeAskAgain: an adoption or re-assertion of a moving key: asked
	// again (Requests starts afresh).
	RangeAskAgain RangeFate = iota
	// RangeDropped: an unlock or release whose locks are re-asserted
	// without what it drops (the mirror applies it); answered done.
	RangeDropped
	// RangeNotServed: answered unavailable; the client asks again, at
	// the key's next owner.
	RangeNotServed
)

// FailedRange decides what becomes of RANGE request f in flight on an
// upstream that failed: moving says it is about a moving key, reassert
// that the upstream's range locks are re-asserted (RangesFailed) and
// mirrored that it kept them. answer is what the client is told.
func FailedRange(f protocol.Frame, moving, reassert, mirrored bool) (fate RangeFate, answer []byte) {
	switch {
	case moving:
		return RangeAskAgain, nil
	case reassert && mirrored && (f.Op == protocol.RangeUnlock || f.Op == protocol.RangeRelease):
		return RangeDropped, protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeDone, 0, protocol.Frame{})
	}
	return RangeNotServed, protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeUnavailable, 0, protocol.Frame{})
}

// RangeUpstream is what RangesFailed needs of a failed upstream: whether
// it was opened, may hold range locks of the session (Holds), and the
// keys of the locks it kept (its mirror; Mirrored says it has one), and
// when it was last confirmed.
type RangeUpstream struct {
	Opened, Holds, Mirrored bool
	Keys                    int
	Confirmed               time.Time
}

// RangesFate is what an upstream's failure does to the session's range
// locks at its owner.
type RangesFate uint8

const (
	// RangesNone: nothing to do (none held, or the session ends anyway).
	RangesNone RangesFate = iota
	// RangesEnd: nobody keeps them: the session ends (ERROR 0x03), so
	// that its client stops believing in them, as a client of a single
	// server whose server goes.
	RangesEnd
	// RangesReassert: each key's locks move (a failover RangeMove, with
	// the window believed) and are re-asserted at its next owner.
	RangesReassert
)

// RangesFailed decides what u's failure does to the session's range
// locks there (live: the session goes on). They are re-asserted when
// reassert says the owner may have died or stopped serving, and the
// client may still believe in them and the owner cannot yet have expired
// them: before 0.8 × the lease after the send time of the latest request
// u's owner answered (Move.Believed; internal/modelcheck's failover
// model). Otherwise, when the owner may hold range locks of the
// session, the session ends.
func RangesFailed(u RangeUpstream, live, reassert bool, now time.Time, lease time.Duration) (fate RangesFate, believed time.Time) {
	switch {
	case !live || !u.Opened || !u.Holds:
		return RangesNone, time.Time{}
	case !reassert:
		return RangesEnd, time.Time{}
	case !u.Mirrored:
		return RangesNone, time.Time{} // it granted nothing
	}
	believed = u.Confirmed.Add(clientrule.GiveUpAfter(lease))
	if u.Keys > 0 && !now.Before(believed) {
		return RangesEnd, time.Time{}
	}
	return RangesReassert, believed
}

// RangeWay is where a client session's RANGE request goes on a cluster
// node (RouteRange).
type RangeWay uint8

const (
	// RangeServe: this node's own range table serves it.
	RangeServe RangeWay = iota
	// RangeRelay: relayed on the session's upstream to the key's owner.
	RangeRelay
	// RangeNotNow: answered unavailable: nothing changed, ask again
	// later (the key held in a warm-up, gated by a planned change, an
	// owner out of quorum contact, or a relayed session asking for a key
	// this node does not own).
	RangeNotNow
)

// RouteRange decides where a RANGE request on a key goes, as a claim
// goes to its name's owner: served here when this node serves the key
// and no planned change gates its range locks (gated), relayed when
// another node serves it and the session is a client's own (not
// forwarded: a relayed session is never relayed on).
func RouteRange(route MoveRoute, gated, forwarded bool) RangeWay {
	switch {
	case route == MoveRouteHere && !gated:
		return RangeServe
	case route == MoveRouteThere && !forwarded:
		return RangeRelay
	}
	return RangeNotNow
}

// RangeHolds reports whether a relayed RANGE request f may hold a lock
// at the owner (a set, or a resume): its lock owner is released there
// when the client hangs up, and its upstream keeps a mirror.
func RangeHolds(f protocol.Frame) bool {
	return f.Op == protocol.RangeSet || f.Op == protocol.RangeResume
}

// RangeWaits reports whether relayed RANGE request f may wait at the
// owner: a cancel of it goes there.
func RangeWaits(f protocol.Frame) bool {
	return f.Op == protocol.RangeSet && f.Flags&protocol.RangeWait != 0
}

// RangeIsPush reports whether ANSWER f is a push: the final answer of a
// set that waited (PROMOTED, CANCELLED), or the hop-only MOVED, not the
// answer of a request.
func RangeIsPush(f protocol.Frame) bool {
	return f.Status == protocol.RangePromoted || f.Status == protocol.RangeCancelled || f.Status == protocol.RangeMoved
}

// RangeAnswerHolds reports whether the owner's answer st to relayed
// RANGE request f leaves the session holding (or waiting for) a range
// lock there: its upstream then protects the session's range locks.
func RangeAnswerHolds(f protocol.Frame, st protocol.RangeStatus) bool {
	return st == protocol.RangeGranted || st == protocol.RangeQueued ||
		st == protocol.RangeDone && f.Op == protocol.RangeResume
}

// RangeWaitEnds reports whether answer st ends the wait of the set that
// asked: it did not queue (a req that names a waiting set already is
// the owner's to refuse, 0x0b, and the set keeps its place).
func RangeWaitEnds(st protocol.RangeStatus) bool {
	return st != protocol.RangeQueued && st != protocol.RangeReqInUse
}

// RangePushFate is what the owner's range push does (RangePushed).
type RangePushFate uint8

const (
	// RangePassOn: the client hears it as it is.
	RangePassOn RangePushFate = iota
	// RangeKeyMoved: MOVED with req 0, the owner's news that the
	// session's range locks on key f.Label moved to the key's new owner
	// (a planned change): the key moves here; the client hears nothing.
	RangeKeyMoved
	// RangeSetMoved: MOVED of a set waiting on key f.Label, which has no
	// state of the session at the owner any more: the set is answered
	// unavailable (the client asks again, at the new owner).
	RangeSetMoved
)

// RangePushed decides what the owner's push f about a relayed range
// lock does, and what the client is told in its place (RangeSetMoved).
// holds says the session holds a range lock there now (PROMOTED).
func RangePushed(f protocol.Frame) (fate RangePushFate, tell []byte, holds bool) {
	switch {
	case f.Status == protocol.RangeMoved && f.Claim == 0:
		return RangeKeyMoved, nil, false
	case f.Status == protocol.RangeMoved:
		return RangeSetMoved, protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeUnavailable, 0, protocol.Frame{}), false
	}
	return RangePassOn, nil, f.Status == protocol.RangePromoted
}
