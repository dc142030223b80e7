package server

import (
	"errors"
	"fmt"
	"maps"
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
// held ranges of sessions that continue (srv.continues: an open version
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

// standInBit marks the range-table session ids of stand-ins: the real
// sessions' ids count up from 1 and never reach it.
const standInBit = 1 << 63

// movedRange is one held range of a moveState (Export, Install).
type movedRange struct {
	Key     string           `json:"key"`
	Flock   bool             `json:"flock,omitempty"`
	Origin  locktable.Origin `json:"origin"`
	Owner   uint64           `json:"owner"`
	Type    uint8            `json:"type"`
	Start   uint64           `json:"start"`
	End     uint64           `json:"end"`
	LeaseMS uint32           `json:"lease_ms"`
	// Hash is the secret hash of a resumable session: its client may
	// re-assert the ranges through another node (rangeresume.go).
	Hash []byte `json:"hash,omitempty"`
}

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
// returns, per new owner, the held ranges of the sessions that continue
// and the gates of the keys where a session that does not continue held
// or waited, with the sessions to end (ERROR 0x01) and the deliveries of
// the answers it appended. A gate lasts the longest lease of those
// sessions: each such client stops believing within 0.8 of it after the
// send time of its last request answered here, which came before the
// export, so before the install. The waiters count too, although this
// node grants nothing on the key after the export: a session's lease
// is as long as its belief, whatever it held (cluster-ranges,
// range-gate-holders-only). Called with srv.mu held.
func (srv *Server) exportRangesLocked(now time.Time, newOwner func(name string) string) (
	handed map[string][]movedRange, gates map[string][]rangeGate, ending []*session, ds []delivery) {
	rs := &srv.ranges
	moving := func(key string) bool { return newOwner(key) != "" }
	on := rs.table.SessionsOn(moving)
	if on == nil {
		return nil, nil, nil, nil
	}
	gates, ends := srv.rangeGatesLocked(on, newOwner)
	held, waiting := rs.table.TakeKeys(moving)
	handed, moved := srv.handOverRangesLocked(held, newOwner)
	flushed := map[*session]bool{}
	for _, m := range moved {
		if m.s.forwarded {
			m.s.v2.appendPushOut(m.s, func(b []byte) []byte {
				return protocol.AppendRangeAnswer(b, 0, protocol.RangeMoved, 0, protocol.Frame{Label: m.key})
			})
			flushed[m.s] = true
		} else {
			m.s.startRangeMove(now, m.key, m.locks)
		}
	}
	// The waiting sets after the MOVED of their session's held ranges,
	// before which the relaying node still mirrors the key's locks.
	for _, w := range waiting {
		s := srv.claims[locktable.SessionID(w.Owner.Session)]
		if s == nil || s.v2 == nil || ends[s] {
			continue
		}
		st, l := protocol.RangeUnavailable, protocol.Frame{}
		if s.forwarded {
			st, l.Label = protocol.RangeMoved, w.Key // the relaying node answers unavailable
		}
		s.v2.appendPushOut(s, func(b []byte) []byte {
			return protocol.AppendRangeAnswer(b, uint32(w.Tag), st, 0, l)
		})
		flushed[s] = true
	}
	for s := range flushed {
		ds = append(ds, delivery{to: s, flush: true})
	}
	for s := range ends {
		ending = append(ending, s)
	}
	return handed, gates, ending, ds
}

// rangeGatesLocked returns, per new owner, the gates of the moving keys
// (on: the sessions on each) where a session that does not continue held
// or waited, and the version 2 sessions among those, which end. Called
// with srv.mu held.
func (srv *Server) rangeGatesLocked(on map[string][]rangelock.SessionID, newOwner func(name string) string) (
	gates map[string][]rangeGate, ends map[*session]bool) {
	rs := &srv.ranges
	ends = map[*session]bool{}
	gates = map[string][]rangeGate{}
	for _, key := range slices.Sorted(maps.Keys(on)) {
		var lease time.Duration
		for _, sid := range on[key] {
			if srv.continues(locktable.SessionID(sid)) {
				continue
			}
			lease = max(lease, rs.leases[sid])
			if s := srv.claims[locktable.SessionID(sid)]; s != nil && s.v2 != nil {
				ends[s] = true
			}
		}
		if lease > 0 {
			to := newOwner(key)
			gates[to] = append(gates[to], rangeGate{Key: key, LeaseMS: protocol.LeaseMS(lease)})
		}
	}
	return gates, ends
}

// sessionRanges are the range locks of one session on one moving key.
type sessionRanges struct {
	s     *session
	key   string
	locks []rangelock.KeyLock
}

// handOverRangesLocked returns, per new owner, the held range locks of
// the sessions that continue, and those locks by session and key, in the
// order of their first lock in held. The others' sessions end, and their
// keys are gated. Called with srv.mu held.
func (srv *Server) handOverRangesLocked(held []rangelock.KeyLock, newOwner func(name string) string) (
	handed map[string][]movedRange, moved []sessionRanges) {
	rs := &srv.ranges
	handed = map[string][]movedRange{}
	type sessionKey struct {
		s   *session
		key string
	}
	at := map[sessionKey]int{} // index in moved
	for _, kl := range held {
		s := srv.claims[locktable.SessionID(kl.Lock.Owner.Session)]
		if s == nil || !srv.continues(s.id) {
			continue // its session ends; the key is gated
		}
		o, _ := s.origin()
		to := newOwner(kl.Key)
		mr := movedRange{Key: kl.Key, Flock: kl.NS == rangelock.Flock, Origin: o,
			Owner: uint64(kl.Lock.Owner.ID), Type: uint8(kl.Lock.Type), Start: kl.Lock.Range.Start, End: kl.Lock.Range.End,
			LeaseMS: protocol.LeaseMS(rs.leases[kl.Lock.Owner.Session])}
		if r := s.v2.resume; r != nil {
			mr.Hash = r.hash[:]
		}
		handed[to] = append(handed[to], mr)
		sk := sessionKey{s, kl.Key}
		i, ok := at[sk]
		if !ok {
			i = len(moved)
			at[sk] = i
			moved = append(moved, sessionRanges{s: s, key: kl.Key})
		}
		moved[i].locks = append(moved[i].locks, kl)
	}
	return handed, moved
}

// installRanges installs the range locks a planned change handed over,
// each origin's under a stand-in that its host adopts (adoptRanges) or
// that is dropped a lease after now.
func (srv *Server) installRanges(from string, ranges []movedRange) {
	if len(ranges) == 0 {
		return
	}
	srv.mu.Lock()
	rs := &srv.ranges
	failed := 0
	for _, mr := range ranges {
		st := rs.standIns[mr.Origin]
		lease := time.Duration(mr.LeaseMS) * time.Millisecond
		if st == nil {
			if rs.standIns == nil {
				rs.standIns = map[locktable.Origin]*standIn{}
			}
			rs.lastStandIn++
			st = &standIn{sid: rangelock.SessionID(standInBit | rs.lastStandIn)}
			if len(mr.Hash) == secretHashLen {
				st.hash = (*[secretHashLen]byte)(mr.Hash)
			}
			rs.standIns[mr.Origin] = st
			rs.labels[st.sid] = fmt.Sprintf("%s/%d (moving)", mr.Origin.Node, mr.Origin.Session)
			o := mr.Origin
			st.timer = time.AfterFunc(lease, func() { srv.dropStandIn(o, st) })
		} else if lease > rs.leases[st.sid] {
			st.timer.Reset(lease)
		}
		rs.leases[st.sid] = max(rs.leases[st.sid], lease)
		ns := rangelock.POSIX
		if mr.Flock {
			ns = rangelock.Flock
		}
		err := rs.table.Install(rangelock.KeyLock{Key: mr.Key, NS: ns, Lock: rangelock.Lock{
			Owner: rangelock.Owner{Session: st.sid, ID: rangelock.OwnerID(mr.Owner)},
			Type:  rangelock.Type(mr.Type), Range: rangelock.Range{Start: mr.Start, End: mr.End}}})
		if err != nil {
			failed++
			srv.Logger.Error("planned change: a handed-over range lock cannot be installed", "from", from,
				"key", mr.Key, "origin", fmt.Sprintf("%s/%d", mr.Origin.Node, mr.Origin.Session), "err", err)
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
		if moveRoute(srv.Router.Route(f.Name, 0, true)).Owns() {
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
// flight, and whether any key expired (clustercore.RangeMove.Expired).
// Called with omu held.
func (rel *relayState) unsentRangeMoves(now time.Time, lease time.Duration) (keys []string, expired bool) {
	for key, rm := range rel.rangeMoves {
		expired = expired || rm.Expired(now, lease)
		if rm.up == nil {
			keys = append(keys, key)
		}
	}
	return keys, expired
}

// moveRangeLocked has the range locks of moving key rm taken up where rt
// routes the key: the core's requests (RANGE adopt after a planned
// change, one RANGE reassert per lock after a failover) on the upstream
// to the owner there, or here (here), from their stand-in or installed
// as the session's own, when this node owns the key. ok is false when
// they are no longer kept here, or one cannot be installed. Called with
// srv.mu and omu held.
func (s *session) moveRangeLocked(rel *relayState, key string, rm *rangeMove, rt Route, now time.Time) (here, ok bool) {
	switch route := moveRoute(rt); {
	case route == clustercore.MoveRouteThere:
		u := s.upstreamLocked(rel, rt.Addr)
		rm.up = u
		at := time.Now()
		for _, f := range rm.Requests(key) {
			u.send(protocol.AppendRange(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRange, At: at}, adopt: key, f: f})
		}
	case route.Owns():
		ok = s.takeRangesHereLocked(key, rm, now)
		if ok || rm.Failover {
			delete(rel.rangeMoves, key)
		}
		return true, ok
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
	st := protocol.RangeInvalid
	if s.forwarded && srv.Router != nil {
		st = protocol.RangeUnavailable
		if moveRoute(srv.Router.Route(f.Name, 0, true)).Owns() {
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
