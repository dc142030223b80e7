package server

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Range locks that continue across a planned change. At the export the
// prior owner P takes the moving keys out of its range table; the held
// ranges of sessions that continue go to the new owner N, which keeps them
// under a stand-in session per origin until the origin's host adopts them
// (RANGE adopt) or a lease passes. Waiters lose their place, and a session
// that does not continue is ended with the key gated at N for its lease.
// A key not adopted within half the lease ends its session (ERROR 0x03).
// User docs: docs/cluster.md, "Range locks"; design:
// docs/design/2026-12-02-cluster-range-locks.md#serverrangemovego.

// standIn holds, at a new owner, the range locks handed over for one
// origin until its host adopts them.
type standIn struct {
	sid   rangelock.SessionID
	timer *time.Timer
	hash  *[secretHashLen]byte // of a resumable session's secret, or nil
}

// rangeMove is a key whose range locks moved to a new owner, as the
// session's host sees it until it has adopted them there: what the core
// decides with (clustercore.RangeMove), and up, the upstream where the
// adoption or re-assertions are in flight.
type rangeMove struct {
	clustercore.RangeMove
	up *upstream
}

// exportRangesLocked takes the moving keys out of the range table and
// returns what clustercore decides of them (PlanHandoffRanges): per new
// owner, the held ranges of the sessions that continue and the gates of
// the keys where a session that does not continue held or waited; with
// the sessions to end (ERROR 0x01) and the deliveries of the answers it
// appended. Called with srv.mu held.
func (srv *Server) exportRangesLocked(now time.Time, newOwner func(name string) string) (
	x *clustercore.HandoffRangeExport, ending []*session, ds []delivery) {
	rs := &srv.ranges
	moving := func(key string) bool { return newOwner(key) != "" }
	on := rs.table.SessionsOn(moving)
	if on == nil {
		return &clustercore.HandoffRangeExport{}, nil, nil
	}
	held, waiting := rs.table.TakeKeys(moving)
	x = clustercore.PlanHandoffRanges(on, held, waiting, newOwner, srv.rangeHandoffSessionLocked)
	for _, m := range x.Moving {
		srv.claims[locktable.SessionID(m.Session)].startRangeMove(now, m.Key, m.Locks)
	}
	flushed := map[*session]bool{}
	for _, a := range x.Answers {
		s := srv.claims[locktable.SessionID(a.Session)]
		s.v2.appendPushOut(s, func(b []byte) []byte {
			return protocol.AppendRangeAnswer(b, a.Tag, a.Status, 0, protocol.Frame{Label: a.Label})
		})
		flushed[s] = true
	}
	for s := range flushed {
		ds = append(ds, delivery{to: s, flush: true})
	}
	for _, sid := range x.Ending {
		ending = append(ending, srv.claims[locktable.SessionID(sid)])
	}
	return x, ending, ds
}

// rangeHandoffSessionLocked is what a range export needs to know of
// session sid (clustercore.PlanHandoffRanges). Called with srv.mu held.
func (srv *Server) rangeHandoffSessionLocked(sid rangelock.SessionID) clustercore.HandoffRangeSession {
	hs := clustercore.HandoffRangeSession{HandoffSessionFacts: srv.handoffFactsLocked(locktable.SessionID(sid)),
		Lease: srv.ranges.leases[sid]}
	if s := srv.claims[locktable.SessionID(sid)]; s != nil {
		hs.Origin, _ = s.origin()
		if s.v2 != nil && s.v2.resume != nil {
			hs.Resume = s.v2.resume.hash[:]
		}
	}
	return hs
}

// installRanges installs the range locks a planned change handed over,
// each origin's under a stand-in (clustercore.PlanHandoffStandIns) that
// its host adopts (adoptRanges) or that is dropped its lease after now.
func (srv *Server) installRanges(from string, ranges []clustercore.HandoffRange) {
	if len(ranges) == 0 {
		return
	}
	srv.mu.Lock()
	rs := &srv.ranges
	failed := 0
	for _, plan := range clustercore.PlanHandoffStandIns(ranges) {
		st := rs.standIns[plan.Origin]
		var cur time.Duration
		if st != nil {
			cur = rs.leases[st.sid]
		}
		lease, reset := clustercore.HandoffStandInLease(st != nil, cur, plan.Lease)
		if st == nil {
			if rs.standIns == nil {
				rs.standIns = map[locktable.Origin]*standIn{}
			}
			rs.lastStandIn++
			st = &standIn{sid: clustercore.StandInID(rs.lastStandIn), hash: plan.Hash}
			rs.standIns[plan.Origin] = st
			rs.labels[st.sid] = plan.Label()
			o := plan.Origin
			st.timer = time.AfterFunc(lease, func() { srv.dropStandIn(o, st) })
		} else if reset {
			st.timer.Reset(lease)
		}
		rs.leases[st.sid] = lease
		for _, kl := range plan.Locks {
			kl.Lock.Owner.Session = st.sid
			if err := rs.table.Install(kl); err != nil {
				failed++
				srv.Logger.Error("planned change: a handed-over range lock cannot be installed", "from", from,
					"key", kl.Key, "origin", fmt.Sprintf("%s/%d", plan.Origin.Node, plan.Origin.Session), "err", err)
			}
		}
	}
	srv.mu.Unlock()
	srv.Logger.Info("planned change: range locks handed over; kept for their sessions to adopt", "from", from,
		"ranges", len(ranges)-failed)
}

// dropStandIn drops the range locks of stand-in st that its host has not
// adopted within the lease: the client has stopped believing by now.
func (srv *Server) dropStandIn(o locktable.Origin, st *standIn) {
	srv.mu.Lock()
	rs := &srv.ranges
	if rs.standIns[o] != st {
		srv.mu.Unlock()
		return
	}
	delete(rs.standIns, o)
	delete(rs.labels, st.sid)
	delete(rs.leases, st.sid)
	res := rs.table.CloseSession(time.Now(), st.sid)
	ds := srv.rangePushes(res, nil)
	srv.mu.Unlock()
	srv.deliver(ds)
	srv.Logger.Warn("planned change: handed-over range locks not adopted within their lease; dropped",
		"origin", fmt.Sprintf("%s/%d", o.Node, o.Session))
}

// adoptRangesLocked gives session s the range locks on key that a
// planned change handed over for origin o, and answers as RangeAdopt
// does. Called with srv.mu held.
func (srv *Server) adoptRangesLocked(s *session, o locktable.Origin, key string) protocol.RangeStatus {
	rs := &srv.ranges
	st := rs.standIns[o]
	sid := rangelock.SessionID(s.id)
	moved := 0
	if st != nil {
		moved = rs.table.MoveSession(st.sid, sid, key)
	}
	if status := clustercore.HandoffAdopted(st != nil, moved); status != protocol.RangeDone {
		return status
	}
	if _, ok := rs.labels[sid]; !ok {
		rs.labels[sid] = s.v2.label
		rs.leases[sid] = s.v2.lease
	}
	if !rs.table.HasSession(st.sid) {
		st.timer.Stop()
		delete(rs.standIns, o)
		delete(rs.labels, st.sid)
		delete(rs.leases, st.sid)
	}
	return protocol.RangeDone
}

// adoptRanges answers RANGE adopt f on upstream session s: the node
// serves the key, and the ranges kept for s's origin there become s's.
// Called by the reader with srv.mu held.
func (s *session) adoptRanges(f protocol.Frame) {
	o, hasOrigin := s.origin()
	st, proceed := clustercore.HandoffRangeAsked(s.rangeAsk(f.Name, hasOrigin), true)
	if proceed {
		st = s.srv.adoptRangesLocked(s, o, f.Name)
	}
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRangeAnswer(b, f.Claim, st, 0, protocol.Frame{}) })
}

// rangeAsk is what this node knows when session s asks to take up range
// locks on key (clustercore.HandoffRangeAsked). Called with srv.mu held.
func (s *session) rangeAsk(key string, hasOrigin bool) clustercore.HandoffRangeAsk {
	srv := s.srv
	return clustercore.HandoffRangeAsk{Clustered: srv.Router != nil, Forwarded: s.forwarded, HasOrigin: hasOrigin,
		Owns: func() bool { return moveRoute(srv.Router.Route(key, 0, true)).Owns() }}
}

// startRangeMove marks key moving for session s, whose range locks on
// it (locks) were handed over (exportRangesLocked, or P's push on an
// upstream, rangePushed) or are re-asserted after a failure
// (rangesFailed), and has their adoption tried soon. Called with omu
// held.
func (rel *relayState) startRangeMove(s *session, now time.Time, key string, locks []rangelock.KeyLock) *rangeMove {
	if rel.rangeMoves == nil {
		rel.rangeMoves = map[string]*rangeMove{}
	}
	rm := rel.rangeMoves[key]
	if rm == nil {
		rm = &rangeMove{RangeMove: clustercore.RangeMove{Since: now}}
		rel.rangeMoves[key] = rm
	}
	rm.Locks = append(rm.Locks, locks...)
	if !rel.rangeTimer && !rel.closed {
		rel.rangeTimer = true
		time.AfterFunc(moveRetry, s.retryRangeMoves)
	}
	return rm
}

// startRangeMove is relayState.startRangeMove for a session on this
// node, the prior owner, at the export. Called with srv.mu held.
func (s *session) startRangeMove(now time.Time, key string, locks []rangelock.KeyLock) {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	v.relayLocked().startRangeMove(s, now, key, locks)
}

// retryRangeMoves sends the adoption of each moving key that has none in
// flight to the key's new owner once this node routes the key there, or
// adopts it here when this node is that owner; a key that has moved for
// half the lease ends the session.
func (s *session) retryRangeMoves() {
	srv, v := s.srv, s.v2
	v.omu.Lock()
	rel := v.rel.Load()
	rel.rangeTimer = false
	if clustercore.HostMovingOver(rel.closed, s.closing.Load() || v.ending, false) || len(rel.rangeMoves) == 0 {
		v.omu.Unlock()
		return
	}
	now := time.Now()
	r := clustercore.HostRangeRetryFor(rel.rangeMoves, func(rm *rangeMove) (*clustercore.RangeMove, bool) {
		return &rm.RangeMove, rm.up != nil
	}, now, v.lease)
	v.omu.Unlock()
	if r.End {
		srv.Logger.Warn("range locks handed over to a key's new owner not adopted in half the lease: ending the client's session",
			"session", s.id, "remote_addr", s.peer.Addr)
		s.closeWithError(protocol.CodeNotOwner)
		return
	}
	keys := r.Keys
	routes := map[string]Route{}
	for _, key := range keys {
		routes[key] = srv.Router.Route(key, 0, false)
	}
	var lost string
	srv.mu.Lock() // before omu: an adoption here changes the table
	v.omu.Lock()
	for _, key := range keys {
		rm := rel.rangeMoves[key]
		if rm == nil || rm.up != nil || rel.closed {
			continue
		}
		here, ok := s.moveRangeLocked(rel, key, rm, routes[key], now)
		if !ok {
			lost = key
		}
		if here && rm.Failover && lost == "" {
			srv.Logger.Info("range locks re-asserted at the key's next owner, this node", "session", s.id,
				"key", key, "locks", len(rm.Locks), "took", now.Sub(rm.Since))
		}
	}
	if lost == "" {
		rel.pump(v)
		rel.kickAll()
		if clustercore.HostRetryDue(len(rel.rangeMoves) > 0, rel.rangeTimer, rel.closed) {
			rel.rangeTimer = true
			time.AfterFunc(moveRetry, s.retryRangeMoves)
		}
	}
	v.omu.Unlock()
	srv.mu.Unlock()
	if lost != "" {
		srv.Logger.Warn("range locks handed over here are no longer kept for the session: ending the client's session",
			"session", s.id, "remote_addr", s.peer.Addr, "key", lost)
		s.closeWithError(protocol.CodeNotOwner)
		return
	}
	srv.deliver([]delivery{{to: s, flush: true}})
}

// moveRangeLocked has the range locks of moving key rm taken up where rt
// routes the key: the core's requests (RANGE adopt after a planned
// change, one RANGE reassert per lock after a failover) on the upstream
// to the owner there, or here (here), from their stand-in or installed
// as the session's own, when this node owns the key. ok is false when
// they are no longer kept here, or one cannot be installed. Called with
// srv.mu and omu held.
func (s *session) moveRangeLocked(rel *relayState, key string, rm *rangeMove, rt Route, now time.Time) (here, ok bool) {
	switch rm.HostStep(moveRoute(rt)) {
	case clustercore.HostRangeSend:
		u := s.upstreamLocked(rel, rt.Addr)
		rm.up = u
		at := time.Now()
		for _, f := range rm.Requests(key) {
			u.send(protocol.AppendRange(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRange, At: at}, adopt: key, f: f})
		}
	case clustercore.HostRangeHere:
		done, end := rm.HostTakenHere(s.takeRangesHereLocked(key, rm, now))
		if done {
			delete(rel.rangeMoves, key)
		}
		return true, !end
	}
	return false, true
}

// takeRangesHereLocked takes the range locks of moving key rm into this
// node's range table for the session: a planned change's from their
// stand-in, a failover's installed as the session's own. It reports
// false when they are no longer kept, or one cannot be installed.
// Called with srv.mu and omu held.
func (s *session) takeRangesHereLocked(key string, rm *rangeMove, now time.Time) bool {
	srv := s.srv
	if !rm.Failover {
		o := locktable.Origin{Node: srv.NodeID, Session: uint64(s.id)}
		return srv.adoptRangesLocked(s, o, key) == protocol.RangeDone
	}
	for _, kl := range rm.Locks {
		if srv.installRangeLocked(s, kl, now) != protocol.RangeDone {
			return false
		}
	}
	return true
}

// rangeMoveAnswered applies the new owner's answer st to a RANGE adopt or
// reassert of key on u (clustercore.RangeMove.Answered): once the locks
// are held there they are u's; "not yet" has them asked again by
// retryRangeMoves; lost reports true: the session must end. Called with
// omu held.
func (u *upstream) rangeMoveAnswered(rel *relayState, key string, st protocol.RangeStatus) (lost bool) {
	rm := rel.rangeMoves[key]
	if rm == nil || rm.up != u {
		return false
	}
	switch rm.Answered(st) {
	case clustercore.RangeLost:
		return true
	case clustercore.RangeWaiting:
		return false
	case clustercore.RangeAgain:
		rm.up = nil
		return false
	}
	rm.up = nil
	u.tookOver(rel, key, rm)
	if rm.Failover {
		u.s.srv.Logger.Info("range locks re-asserted at the key's next owner", "owner_addr", u.addr, "session", u.s.id,
			"key", key, "locks", len(rm.Locks), "took", time.Since(rm.Since))
	}
	return false
}

// tookOver records that u's owner holds the range locks of moving key
// rm for the session now: a hang-up releases them there, u's loss ends
// or re-asserts them. Called with omu held.
func (u *upstream) tookOver(rel *relayState, key string, rm *rangeMove) {
	delete(rel.rangeMoves, key)
	u.ranges = true
	if u.rangeOwners == nil {
		u.rangeOwners = map[rangeOwner]bool{}
	}
	for _, kl := range rm.Locks {
		u.rangeOwners[rangeOwner{key: kl.Key, flock: kl.NS == rangelock.Flock, owner: uint64(kl.Lock.Owner.ID)}] = true
	}
	if u.mirror == nil {
		u.mirror = rangemirror.New()
	}
	u.mirror.Put(rm.Locks)
}

// reassertRange answers RANGE reassert f on upstream session s: the
// range lock its relaying node re-asserts after the key's owner was
// lost is held here for s when this node serves the key, or took it over
// and warms up, and no other session holds a conflicting lock. Called
// by the reader with srv.mu held.
func (s *session) reassertRange(now time.Time, f protocol.Frame) {
	srv := s.srv
	origin, hasOrigin := s.origin()
	st, proceed := clustercore.HandoffRangeAsked(s.rangeAsk(f.Name, hasOrigin), false)
	if proceed {
		if hasOrigin {
			// A break of the link to a live owner: the ranges it
			// kept for the upstream session of the same origin.
			srv.takeKeptRangesLocked(origin, rangelock.SessionID(s.id), f.Name)
		}
		ns, o, r := rangemirror.Target(f, rangelock.SessionID(s.id))
		st = srv.installRangeLocked(s, rangelock.KeyLock{Key: f.Name, NS: ns,
			Lock: rangelock.Lock{Owner: o, Type: rangelock.Type(f.LockType), Range: r}}, now)
	}
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRangeAnswer(b, f.Claim, st, 0, protocol.Frame{}) })
}

// installRangeLocked installs re-asserted lock kl for session s, whose
// id it takes, unless a planned change gates the key. Called with srv.mu
// held.
func (srv *Server) installRangeLocked(s *session, kl rangelock.KeyLock, now time.Time) protocol.RangeStatus {
	rs := &srv.ranges
	if rs.gatedLocked(kl.Key, now) {
		return clustercore.HandoffInstalled(true, nil)
	}
	sid := rangelock.SessionID(s.id)
	kl.Lock.Owner.Session = sid
	if st := clustercore.HandoffInstalled(false, rs.table.Install(kl)); st != protocol.RangeDone {
		return st
	}
	if _, ok := rs.labels[sid]; !ok {
		rs.labels[sid] = s.v2.label
		rs.leases[sid] = s.v2.lease
	}
	return protocol.RangeDone
}

// rangesMovedAway handles P's push that the session's range locks on key
// moved to the key's new owner: the key moves here (the host) from u,
// with the locks u's owner held for the session there (its mirror).
// Called with omu held.
func (u *upstream) rangesMovedAway(rel *relayState, key string) {
	var locks []rangelock.KeyLock
	if u.mirror != nil {
		locks = u.mirror.Take(key)
	}
	u.forgetRangeKey(key)
	rel.startRangeMove(u.s, time.Now(), key, locks)
}

// forgetRangeKey forgets the lock owners relayed on u on key, which has
// no state of the session at u's owner any more: u protects the
// session's range locks (its loss ends the session) only while it may
// hold some. Called with omu held.
func (u *upstream) forgetRangeKey(key string) {
	for o := range u.rangeOwners {
		if o.key == key {
			delete(u.rangeOwners, o)
		}
	}
	u.ranges = len(u.rangeOwners) > 0
}
