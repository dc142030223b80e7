package server

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Range locks that continue across a planned change (docs/cluster.md,
// "Range locks"; internal/modelcheck, cluster-ranges -range-handover).
//
// At the export the prior owner P takes every moving key out of its
// range table (rangelock.TakeKeys): it grants nothing there again. The
// held ranges of sessions that continue (clustercore's Continues: an open version
// 2 session, on P or relayed by another node) go to the new owner N in
// the move state, each with its session's origin and lease; a waiting
// set is answered unavailable (the client asks again, at N: range
// waiters lose their place across a planned change); a session that
// does not continue is ended and the key gated at N for its lease, as
// before (exportRangesLocked). N installs the held ranges under a
// stand-in session per origin, which conflicts with everyone as the
// holder did, and which it drops a lease after the install unless the
// origin's host adopts them first.
//
// The host is the node the client is connected to: P itself, which
// marks the key moving in the same critical section as the export, or a
// relaying node R, which P tells with a hop-only push on R's upstream
// session (ANSWER req 0, RangeMoved, the key as label), in order with
// everything else P sends there: R reads it before any answer P gives
// after the export. While a session has a key moving, its host releases
// no answer to the client (a moving key is an upstream not confirmed),
// answers its range requests on the key unavailable, and, once its ring
// routes the key to N, sends RANGE adopt(key) on its upstream session to
// N (or, when the host is N, moves the stand-in's ranges to the session
// itself). N gives the stand-in's ranges on the key to the upstream
// session of the same origin: from then they are that session's, kept
// as a relayed session's are. A key not adopted within half the lease
// after it began moving at the host, or that N no longer keeps for the
// session, ends the session (ERROR 0x03): its client must stop believing
// in range locks nobody keeps.

// standIn holds, at a new owner, the range locks handed over for one
// origin until its host adopts them.
type standIn struct {
	sid   rangelock.SessionID
	timer *time.Timer
	hash  *[secretHashLen]byte // of a resumable session's secret, or nil
}

// rangeMove is a key whose range locks moved to a new owner, as the
// session's host sees it until it has adopted them there.
type rangeMove struct {
	since time.Time           // when it began moving here
	up    *upstream           // where the adoption is in flight
	locks []rangelock.KeyLock // the session's locks on the key
	// failover: the key's owner was lost, and locks are re-asserted at
	// its next owner (RangeReassert, one per lock) rather than adopted,
	// until believed: the end of the window in which the client may
	// still believe and the lost owner cannot yet have expired them
	// (moveInfo.believed). pending counts the re-assertions in flight
	// on up, and retry says one was answered "not yet".
	failover bool
	believed time.Time
	pending  int
	retry    bool
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
		if st == nil {
			if rs.standIns == nil {
				rs.standIns = map[locktable.Origin]*standIn{}
			}
			rs.lastStandIn++
			st = &standIn{sid: clustercore.StandInID(rs.lastStandIn), hash: plan.Hash}
			rs.standIns[plan.Origin] = st
			rs.labels[st.sid] = plan.Label()
			o := plan.Origin
			st.timer = time.AfterFunc(plan.Lease, func() { srv.dropStandIn(o, st) })
		} else if plan.Lease > rs.leases[st.sid] {
			st.timer.Reset(plan.Lease)
		}
		rs.leases[st.sid] = max(rs.leases[st.sid], plan.Lease)
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
	if st == nil {
		return protocol.RangeFree
	}
	sid := rangelock.SessionID(s.id)
	if rs.table.MoveSession(st.sid, sid, key) == 0 {
		return protocol.RangeFree
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
	srv := s.srv
	st := protocol.RangeInvalid
	if o, ok := s.origin(); ok && s.forwarded && srv.Router != nil {
		st = protocol.RangeUnavailable
		if servesOrWarms(srv.Router.Route(f.Name, 0, true)) {
			st = srv.adoptRangesLocked(s, o, f.Name)
		}
	}
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRangeAnswer(b, f.Claim, st, 0, protocol.Frame{}) })
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
		rm = &rangeMove{since: now}
		rel.rangeMoves[key] = rm
	}
	rm.locks = append(rm.locks, locks...)
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
	if rel.closed || s.closing.Load() || v.ending || len(rel.rangeMoves) == 0 {
		v.omu.Unlock()
		return
	}
	now := time.Now()
	keys, expired := rel.unsentRangeMoves(now, v.lease)
	v.omu.Unlock()
	if expired {
		srv.Logger.Warn("range locks handed over to a key's new owner not adopted in half the lease: ending the client's session",
			"session", s.id, "remote_addr", s.peer.Addr)
		s.closeWithError(protocol.CodeNotOwner)
		return
	}
	slices.Sort(keys)
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
		if !rm.failover {
			if !s.adoptRangeMoveLocked(rel, key, rm, routes[key]) {
				lost = key
			}
			continue
		}
		here, ok := s.reassertRangeMoveLocked(rel, key, rm, routes[key], now)
		if !ok {
			lost = key
		}
		if here && lost == "" {
			srv.Logger.Info("range locks re-asserted at the key's next owner, this node", "session", s.id,
				"key", key, "locks", len(rm.locks), "took", now.Sub(rm.since))
		}
	}
	if lost == "" {
		rel.pump(v)
		rel.kickAll()
		if len(rel.rangeMoves) > 0 && !rel.rangeTimer {
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

// unsentRangeMoves returns the moving keys whose adoption is not in
// flight, and whether any key has moved for half the lease or, after a
// failure, past the window its client may believe in. Called with omu
// held.
func (rel *relayState) unsentRangeMoves(now time.Time, lease time.Duration) (keys []string, expired bool) {
	for key, rm := range rel.rangeMoves {
		expired = expired || now.Sub(rm.since) >= lease/2 || rm.failover && !now.Before(rm.believed)
		if rm.up == nil {
			keys = append(keys, key)
		}
	}
	return keys, expired
}

// adoptRangeMoveLocked has the range locks of key, handed over by a
// planned change (rm), adopted where rt routes the key: RANGE adopt on
// the upstream to its new owner, or here, from their stand-in, when this
// node is that owner. It reports false when they are no longer kept
// here. Called with srv.mu and omu held.
func (s *session) adoptRangeMoveLocked(rel *relayState, key string, rm *rangeMove, rt Route) bool {
	srv := s.srv
	switch {
	case rt.Action == RouteForward:
		u := s.upstreamLocked(rel, rt.Addr)
		rm.up = u
		f := protocol.Frame{Op: protocol.RangeAdopt, Name: key}
		u.send(protocol.AppendRange(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRange, At: time.Now()}, adopt: key, f: f})
	case servesOrWarms(rt):
		o := locktable.Origin{Node: srv.NodeID, Session: uint64(s.id)}
		if st := srv.adoptRangesLocked(s, o, key); st != protocol.RangeDone {
			return false
		}
		delete(rel.rangeMoves, key)
	}
	return true
}

// reassertRangeMoveLocked re-asserts the range locks of key, whose owner
// was lost (rm.failover), where rt routes the key: one RANGE re-assert a
// lock on the upstream to its next owner, or, when this node took the key
// over (here), installed as the session's own. ok is false when one of
// them cannot be installed here. Called with srv.mu and omu held.
func (s *session) reassertRangeMoveLocked(rel *relayState, key string, rm *rangeMove, rt Route, now time.Time) (here, ok bool) {
	switch {
	case rt.Action == RouteForward:
		u := s.upstreamLocked(rel, rt.Addr)
		rm.up, rm.pending, rm.retry = u, len(rm.locks), false
		at := time.Now()
		for _, kl := range rm.locks {
			f := rangemirror.Frame(protocol.RangeReassert, kl)
			u.send(protocol.AppendRange(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRange, At: at}, adopt: key, f: f})
		}
	case servesOrWarms(rt):
		ok = true
		for _, kl := range rm.locks {
			if s.srv.installRangeLocked(s, kl, now) != protocol.RangeDone {
				ok = false
				break
			}
		}
		delete(rel.rangeMoves, key)
		return true, ok
	}
	return false, true
}

// rangeAdopted applies the new owner's answer to RANGE adopt(key) on u:
// adopted (the key's ranges are u's from now: a hang-up releases them
// there, and u's loss ends the session), not served yet (asked again),
// or lost (it reports true: the session must end). Called with omu held.
func (u *upstream) rangeAdopted(rel *relayState, key string, st protocol.RangeStatus) (lost bool) {
	rm := rel.rangeMoves[key]
	if rm == nil || rm.up != u {
		return false
	}
	rm.up = nil
	switch st {
	case protocol.RangeDone:
		u.tookOver(rel, key, rm)
		return false
	case protocol.RangeUnavailable:
		return false // retryRangeMoves asks again
	}
	return true
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
	for _, kl := range rm.locks {
		u.rangeOwners[rangeOwner{key: kl.Key, flock: kl.NS == rangelock.Flock, owner: uint64(kl.Lock.Owner.ID)}] = true
	}
	if u.mirror == nil {
		u.mirror = rangemirror.New()
	}
	u.mirror.Put(rm.locks)
}

// rangeReasserted applies the new owner's answer st to one RANGE
// reassert of key's locks on u: once every one is held there, they are
// u's; one answered "not yet" has them all sent again; one refused (a
// conflicting lock holds there) reports true: the session must end.
// Called with omu held.
func (u *upstream) rangeReasserted(rel *relayState, key string, st protocol.RangeStatus) (lost bool) {
	rm := rel.rangeMoves[key]
	if rm == nil || rm.up != u {
		return false
	}
	rm.pending--
	switch st {
	case protocol.RangeDone:
	case protocol.RangeUnavailable:
		rm.retry = true
	default:
		return true
	}
	if rm.pending > 0 {
		return false
	}
	rm.up = nil
	if rm.retry {
		rm.retry = false
		return false // retryRangeMoves asks again
	}
	u.tookOver(rel, key, rm)
	u.s.srv.Logger.Info("range locks re-asserted at the key's next owner", "owner_addr", u.addr, "session", u.s.id,
		"key", key, "locks", len(rm.locks), "took", time.Since(rm.since))
	return false
}

// servesOrWarms reports whether rt says this node owns the key: it
// serves it, or warms it up after taking it over without its state
// (Route.Gated). Either way it may take up range locks that were held
// (a hand-over's, a re-assertion's), but grants new ones only in the
// first case.
func servesOrWarms(rt Route) bool {
	return rt.Action == RouteServe || rt.Action == RouteHold && rt.Gated
}

// reassertRange answers RANGE reassert f on upstream session s: the
// range lock its relaying node re-asserts after the key's owner was
// lost is held here for s when this node serves the key, or took it over
// and warms up, and no other session holds a conflicting lock. Called
// by the reader with srv.mu held.
func (s *session) reassertRange(now time.Time, f protocol.Frame) {
	srv := s.srv
	st := protocol.RangeInvalid
	if s.forwarded && srv.Router != nil {
		st = protocol.RangeUnavailable
		if servesOrWarms(srv.Router.Route(f.Name, 0, true)) {
			if origin, ok := s.origin(); ok {
				// A break of the link to a live owner: the ranges it
				// kept for the upstream session of the same origin.
				srv.takeKeptRangesLocked(origin, rangelock.SessionID(s.id), f.Name)
			}
			ns, o, r := rangemirror.Target(f, rangelock.SessionID(s.id))
			st = srv.installRangeLocked(s, rangelock.KeyLock{Key: f.Name, NS: ns,
				Lock: rangelock.Lock{Owner: o, Type: rangelock.Type(f.LockType), Range: r}}, now)
		}
	}
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRangeAnswer(b, f.Claim, st, 0, protocol.Frame{}) })
}

// installRangeLocked installs re-asserted lock kl for session s, whose
// id it takes, unless a planned change gates the key. Called with srv.mu
// held.
func (srv *Server) installRangeLocked(s *session, kl rangelock.KeyLock, now time.Time) protocol.RangeStatus {
	rs := &srv.ranges
	if rs.gatedLocked(kl.Key, now) {
		return protocol.RangeUnavailable
	}
	sid := rangelock.SessionID(s.id)
	kl.Lock.Owner.Session = sid
	switch err := rs.table.Install(kl); {
	case errors.Is(err, rangelock.ErrConflict):
		return protocol.RangeConflict
	case err != nil:
		return protocol.RangeInvalid
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
