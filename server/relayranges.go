package server

import (
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Range locks on a cluster node: a RANGE frame goes to the owner of its
// key, as a claim goes to the owner of its name, and is relayed on the
// session's upstream when another node owns it; anything else (warm-up,
// moving, no quorum contact, a key not owned here) is RangeUnavailable.
// Range locks are handed over at a planned change (rangemove.go) but not
// re-asserted after a failure: the session whose upstream ends is ended
// with ERROR 0x03, so its client stops believing in them.
// User docs: docs/cluster.md, "Range locks"; design:
// docs/design/2026-12-02-cluster-range-locks.md#serverrelayrangesgo.

// routeRange routes RANGE frame f of session s on a cluster node: it
// returns done when f was relayed or answered here, false when this
// node serves it from its own range table. Called by the reader with
// srv.mu held.
func (s *session) routeRange(now time.Time, f protocol.Frame) (done bool) {
	srv := s.srv
	if f.Op == protocol.RangeCancel {
		return s.relayRangeCancel(f)
	}
	if s.rangeMoving(now, f) {
		return true
	}
	rt := srv.Router.Route(f.Name, 0, s.forwarded)
	switch clustercore.RouteRange(moveRoute(rt), srv.ranges.gatedLocked(f.Name, now), s.forwarded) {
	case clustercore.RangeServe:
		return false
	case clustercore.RangeRelay:
		s.relayRange(now, f, rt.Addr)
		return true
	}
	s.rangeUnavailable(f)
	return true
}

// relayRange sends RANGE f to the owner at addr through the session's
// upstream there, and leaves a place for its answer in the outbox.
func (s *session) relayRange(now time.Time, f protocol.Frame, addr string) {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	if s.closing.Load() || v.ending {
		return
	}
	rel := v.relayLocked()
	if rel.closed {
		return
	}
	at := rel.box.Relaying(now)
	u := s.upstreamLocked(rel, addr)
	holds := clustercore.RangeHolds(f)
	if holds {
		if u.rangeOwners == nil {
			u.rangeOwners = map[rangeOwner]bool{}
		}
		o := clustercore.RangeOwnerOf(f)
		u.rangeOwners[rangeOwner{key: o.Key, flock: o.Flock, owner: o.Owner}] = true
	}
	slot := &outEntry{Pending: true, At: at, Up: u}
	rel.add(v, slot)
	if clustercore.RangeWaits(f) && rel.rangeWaits[f.Claim] == nil {
		// (A req that names a waiting set already is the owner's to
		// refuse, 0x0b; the set keeps its place here.)
		if rel.rangeWaits == nil {
			rel.rangeWaits = map[uint32]*upstream{}
		}
		rel.rangeWaits[f.Claim] = u
	}
	if holds && u.mirror == nil {
		u.mirror = rangemirror.New()
	}
	u.send(protocol.AppendRange(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRange, At: time.Now(), ID: f.Claim}, slot: slot, f: f})
}

// relayRangeCancel sends cancel f on the upstream where its set waits,
// and reports whether it did: a cancel of a set waiting here, or of none,
// is this node's own (rangeOp). A cancel has no answer of its own: its
// set's final one (CANCELLED, or PROMOTED if the grant came first) comes
// back as a push.
func (s *session) relayRangeCancel(f protocol.Frame) bool {
	v := s.v2
	rel := v.rel.Load()
	if rel == nil {
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	u := rel.rangeWaits[f.Claim]
	if u == nil {
		return false
	}
	if !s.closing.Load() && !v.ending && !u.dead {
		u.sendUnanswered(protocol.AppendRange(nil, f))
	}
	return true
}

// rangeMoving answers RANGE f, and reports true, when the session's
// range locks on its key are moving to the key's new owner
// (rangemove.go; clustercore.RangeMove.Unavailable). An unlock or
// release of locks re-asserted after a failover applies to what is
// re-asserted (answered done here), and is sent on after the
// re-assertions in flight, if any.
func (s *session) rangeMoving(now time.Time, f protocol.Frame) bool {
	v := s.v2
	rel := v.rel.Load()
	if rel == nil {
		return false
	}
	v.omu.Lock()
	rm := rel.rangeMoves[f.Name]
	if rm == nil {
		v.omu.Unlock()
		return false
	}
	up := rm.up
	step, forget := rm.Request(f, up != nil)
	if forget {
		delete(rel.rangeMoves, f.Name)
	}
	v.omu.Unlock()
	switch step {
	case clustercore.RangeMoveUnavailable:
		s.rangeUnavailable(f)
	case clustercore.RangeMoveRelay:
		s.relayRange(now, f, up.addr)
	default:
		if forget {
			s.srv.Logger.Info("range locks re-asserted no more: the client let them go", "session", s.id, "key", f.Name)
		}
		s.v2.appendOut(s, func(b []byte) []byte {
			return protocol.AppendRangeAnswer(b, f.Claim, protocol.RangeDone, 0, protocol.Frame{})
		})
	}
	return true
}

// rangePushed passes the owner's push about a relayed set to the client,
// before the answers the owner had not sent yet, or does what
// clustercore.RangePushed decides of a MOVED: the key moves here
// (rangemove.go), or the set is answered unavailable. Called with omu
// held.
func (u *upstream) rangePushed(rel *relayState, v *v2conn, fr upFrame) {
	fate, tell, holds := clustercore.RangePushed(fr.f)
	if fate == clustercore.RangeKeyMoved {
		u.rangesMovedAway(rel, fr.f.Label)
		return
	}
	if rel.rangeWaits[fr.f.Claim] == u {
		delete(rel.rangeWaits, fr.f.Claim)
	}
	if fate == clustercore.RangeSetMoved {
		// A range lock the session held there moved first (MOVED(0)
		// before this).
		u.forgetRangeKey(fr.f.Label)
		if u.mirror != nil {
			delete(u.mirror.Waiting, fr.f.Claim)
		}
		u.push(rel, v, &outEntry{B: tell, Up: u})
		return
	}
	if holds {
		u.ranges = true
	}
	if u.mirror != nil {
		u.mirror.Pushed(fr.f.Claim, fr.f.Status)
	}
	u.push(rel, v, &outEntry{B: fr.raw, Up: u})
}

// rangeAnswered fills the outbox place of relayed RANGE r with the
// owner's answer. A set that did not wait is done with it. Called with
// omu held.
func (u *upstream) rangeAnswered(rel *relayState, r upReq, fr upFrame) {
	r.slot.B, r.slot.Pending = fr.raw, false
	if u.mirror != nil {
		u.mirror.Answered(r.f, fr.f.Status)
	}
	if clustercore.RangeAnswerHolds(r.f, fr.f.Status) {
		u.ranges = true
	}
	if clustercore.RangeWaitEnds(fr.f.Status) && rel.rangeWaits[r.ID] == u {
		delete(rel.rangeWaits, r.ID)
	}
}

// rangesFailed handles the range state of u, which has failed, and
// reports whether the session must end. The sets waiting there are
// answered unavailable (the client asks again, at the key's next owner).
// The range locks u's owner held for the session (its mirror) are
// re-asserted at each key's next owner (rangemove.go), or the session
// ends, as clustercore.RangesFailed decides. Called by fail with omu
// held.
func (u *upstream) rangesFailed(rel *relayState, reassert bool, now time.Time) (end bool) {
	v := u.s.v2
	live := !rel.closed && !u.s.closing.Load() && !v.ending
	for _, req := range clustercore.RangeWaitsOn(rel.rangeWaits, u) {
		if live {
			rel.add(v, &outEntry{B: clustercore.RangeUnavailable(req)})
		}
	}
	var keys []string
	if u.mirror != nil {
		keys = u.mirror.Keys()
	}
	ru := clustercore.RangeUpstream{Opened: u.opened, Holds: u.ranges, Mirrored: u.mirror != nil,
		Keys: len(keys), Confirmed: u.led.Confirmed()}
	fate, believed := clustercore.RangesFailed(ru, live, reassert, now, v.lease)
	if fate != clustercore.RangesReassert {
		return fate == clustercore.RangesEnd
	}
	slices.Sort(keys)
	for _, key := range keys {
		u.forgetRangeKey(key)
		rm := rel.startRangeMove(u.s, now, key, u.mirror.Take(key))
		rm.Failover, rm.Believed = true, believed
	}
	if len(keys) > 0 {
		u.s.srv.Logger.Warn("upstream session to the owner ended; re-asserting its range locks at the keys' next owner", "owner_addr", u.addr,
			"session", u.s.id, "keys", len(keys), "until", believed.Sub(now))
	}
	return false
}

// rangeOwner is a lock owner of a session on one key, in one namespace.
type rangeOwner struct {
	key   string
	flock bool
	owner uint64
}

// appendRangeReleases appends the RANGE releases of the lock owners of
// the sets relayed on u (clustercore.AppendRangeReleases), so that the
// owner ends them at once rather than a lease later (the claims'
// RELEASE, in releaseUpstreams). Their answers are not read. Called with
// omu held.
func (u *upstream) appendRangeReleases(b []byte) []byte {
	owners := make([]clustercore.RangeOwner, 0, len(u.rangeOwners))
	for o := range u.rangeOwners {
		owners = append(owners, clustercore.RangeOwner{Key: o.key, Flock: o.flock, Owner: o.owner})
	}
	return clustercore.AppendRangeReleases(b, owners)
}
