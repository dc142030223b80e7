package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Version 2 claims that continue across a planned change
// (docs/cluster.md, "Continuing version 2 claims across a planned
// change"), for the claims whose session is on the prior owner itself
// (the direct case: the host is the prior owner P).
//
// Export, under srv.mu: the claims on the moving names that do not
// continue are ended as before (version 1: ERROR 0x01; a claim of a
// session relayed by another node, or of a kept session: REVOKED 0x03);
// the others are exported with their session's origin (this node, the
// session id) and taken out of the table without a frame, and each
// session marks them moving, in the same critical section. The new owner
// N installs them detached (locktable.ImportDetached), each origin as a
// kept session (resume.go) that a re-assertion naming it with the right
// secret adopts, and that expires, promoting its queue, a lease after
// the export when nobody adopts it.
//
// The ADOPT of the design is a re-assertion (CLAIM flags bit 1) sent by
// the host on its upstream session to N: it names the origin, the token
// the client was told (0 for a queued claim), the ring version, and a
// move secret the host made for the session, whose hash the hand-off
// carried. N answers it as any re-assertion: GRANTED or QUEUED when it
// adopted the claim (same token, same place), REFUSED 0x03 when it does
// not serve the name yet (its ring is older, or the name is frozen for
// another change): the host asks again after moveRetry; any other answer
// means N has no such claim, and the client is told REVOKED 0x03. A
// resumable session's claims also carry the hash of the client's own
// secret, so that when the host is the node that stops, the client's own
// re-assertion, after it reconnects, adopts them at N.
//
// While a claim moves it counts as an upstream that has not been
// confirmed (relayState.moving): no answer to anything read after the
// export reaches the client before the claim is adopted; a RELEASE of it
// is queued in the session and sent to N after the adoption; a claim not
// adopted within half the lease after it began moving is given up
// (REVOKED 0x03, a queued RELEASE answered RELEASED). The export carries
// an idle time of zero: N's lease of a detached claim runs from the
// install, after every confirmation the client was given (late is safe).

// moveRetry is how often a host asks again to adopt its moving claims.
const moveRetry = 100 * time.Millisecond

// moveState is the state a prior owner hands to one new owner: the locks
// (claims named by the prior owner's session ids) and, per session, its
// origin and the hashes of the secrets that may adopt its claims.
type moveState struct {
	Locks    []locktable.LockState `json:"locks"`
	Sessions []moveSession         `json:"sessions"`
	// RangeGates are the keys that move with range locks or waiting
	// requests on them, which the new owner grants no range lock on for
	// LeaseMS after the install (relayranges.go): the prior owner ends
	// the sessions that held or waited for them, whose clients may
	// believe until their give-up.
	RangeGates []rangeGate `json:"range_gates,omitempty"`
	// Ranges are the range locks held on moving keys by sessions that
	// continue, which the new owner keeps for their hosts to adopt
	// (rangemove.go).
	Ranges []movedRange `json:"ranges,omitempty"`
}

// rangeGate is one key of moveState.RangeGates: the longest lease of the
// sessions that held or waited for range locks on it.
type rangeGate struct {
	Key     string `json:"key"`
	LeaseMS uint32 `json:"lease_ms"`
}

// moveSession is one session of a moveState.
type moveSession struct {
	Session locktable.SessionID `json:"session"` // as in Locks
	Origin  locktable.Origin    `json:"origin"`
	Adopt   []byte              `json:"adopt"`            // SHA-256 of the host's move secret
	Resume  []byte              `json:"resume,omitempty"` // SHA-256 of a resumable session's own secret
}

// moveInfo is what a host keeps of a moving claim to adopt it.
type moveInfo struct {
	name  string
	mode  protocol.Mode
	limit uint32
	token uint64    // the token the client was told; 0 when queued
	since time.Time // when it began moving
	// failover: the claim's upstream failed (its owner died, or stopped
	// serving) and it is re-asserted at the name's next owner (fail),
	// with ticket, a queued claim's queue ticket from its owner (0: none).
	failover bool
	ticket   uint64
	// believed (failover of a held claim): the end of the window in
	// which its client may still believe it holds, and its dead owner
	// cannot yet have expired it: the send time of the latest request
	// its upstream confirmed, plus 0.8 × the lease. It is re-asserted
	// only before then: after it, the old owner may have expired the
	// claim and granted the name to a client who would re-assert a newer
	// token, and be refused while it believes (internal/modelcheck's
	// failover model, -relay).
	believed time.Time
	// release is the slot of the client's RELEASE, queued until the
	// claim is adopted.
	release *outEntry
}

// codeMoved is the claim-level code of MOVED, a hop-only frame
// (docs/protocol.md): REVOKED(claim, 0x06) sent only on an upstream
// session, telling its relaying node that the claim was handed over to
// a new owner and continues there. A relaying node never passes it on.
const codeMoved protocol.Code = 0x06

// continues reports whether the claims of session sid continue across a
// move: an open version 2 session, of a client connected to this node or
// relayed by another (whose origin the hop header named). Called with
// srv.mu held.
func (srv *Server) continues(sid locktable.SessionID) bool {
	s := srv.claims[sid]
	if s == nil || s.v2 == nil || s.closing.Load() || srv.isKeptLocked(sid) || srv.Router == nil {
		return false
	}
	_, ok := s.origin()
	return ok
}

// movesOn reports whether the claims of session sid are handed over in
// a planned change rather than ended: those of a session that continues,
// and those of a kept session (resume.go, or claims a planned change
// installed here that nobody adopted yet). A kept session's client
// cannot be told, so its claims go to the new owner as they are, still
// kept for the session's origin, expiring a lease after it was last
// heard (the continuation model hands abandoned records over the same
// way; its mutation export-drops-abandoned ends them instead). Called
// with srv.mu held.
func (srv *Server) movesOn(sid locktable.SessionID) bool {
	return srv.Router != nil && (srv.isKeptLocked(sid) || srv.continues(sid))
}

// origin returns the origin a session stands for: this node and its id,
// or, for a relayed session, the relaying node and the client's session
// there (from the hop header).
func (s *session) origin() (locktable.Origin, bool) {
	if !s.forwarded {
		return locktable.Origin{Node: s.srv.NodeID, Session: uint64(s.id)}, true
	}
	via := s.peer.Via
	i := strings.LastIndexByte(via, '/')
	if i <= 0 {
		return locktable.Origin{}, false
	}
	n, err := strconv.ParseUint(via[i+1:], 10, 64)
	if err != nil {
		return locktable.Origin{}, false
	}
	return locktable.Origin{Node: via[:i], Session: n}, true
}

// relaysFor reports whether s is the upstream session that origin o's
// node opened for o's client session.
func (s *session) relaysFor(o locktable.Origin) bool {
	if !s.forwarded {
		return false
	}
	so, ok := s.origin()
	return ok && so == o
}

// sendMovedLocked tells the relaying node of upstream session s that its
// claims ids moved (MOVED, in order with everything else s is sent), and
// remembers them: a RELEASE of one read later is answered MOVED too.
// Called with srv.mu held, in the critical section of the export.
func (s *session) sendMovedLocked(ids []locktable.ClaimID) {
	v := s.v2
	if v.movedIDs == nil {
		v.movedIDs = map[uint32]bool{}
	}
	for _, id := range ids {
		v.movedIDs[uint32(id)] = true
		v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, uint32(id), codeMoved, "moved") })
	}
}

// answerMoved answers RELEASE(id) MOVED when claim id of this upstream
// session was handed over: the claim lives on at the new owner, where
// the relaying node sends the RELEASE next. Called by the reader with
// srv.mu held.
func (s *session) answerMoved(id uint32) bool {
	v := s.v2
	if !v.movedIDs[id] {
		return false
	}
	delete(v.movedIDs, id)
	v.appendOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, id, codeMoved, "moved") })
	return true
}

// claimUses forgets that id was handed over: a CLAIM uses it again.
func (s *session) claimUses(id uint32) {
	if v := s.v2; v.movedIDs != nil {
		delete(v.movedIDs, id)
	}
}

// Export hands over the claims on the names newOwner maps to another
// node ("" for a name that stays): the version 2 claims of this node's
// own sessions continue (they are exported and their sessions adopt them
// at the new owner); the others are ended for the reason "moved", as
// before: version 1 sessions get ERROR 0x01 and are closed, other
// version 2 claims REVOKED(claim, 0x03). It returns the state to install
// on each new owner.
func (srv *Server) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	srv.init()
	moving := func(name string) bool { return newOwner(name) != "" }
	if n := srv.tellMoving(moving); n > 0 {
		return nil, exportLater{holders: n}
	}
	srv.mu.Lock()
	now := time.Now()
	handedRanges, gates, rangeSessions, rangeDs := srv.exportRangesLocked(now, newOwner)
	res := srv.table.EvictExcept(now, moving, srv.movesOn, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	ended := len(res.Events)
	ds := srv.commit(now, res)
	locks := srv.table.Export(now, moving)
	ds = append(ds, srv.commit(now, srv.table.Evict(now, moving, 0, 0))...)
	plan := srv.planExportLocked(locks, newOwner)
	hashes, delivered, keptDs := srv.handOverSessionsLocked(now, plan.perSession)
	ds = append(ds, keptDs...)
	out, err := plan.encode(hashes, gates, handedRanges)
	srv.mu.Unlock()
	if err != nil {
		return nil, err
	}
	srv.deliverAll(ds)
	srv.deliver(delivered)
	srv.deliver(rangeDs)
	for _, s := range rangeSessions {
		s.closeWithError(protocol.CodeShuttingDown)
	}
	for sid := range plan.perSession {
		if s := srv.session(sid); s != nil && !s.forwarded {
			s.kickMoving()
		}
	}
	if ended > 0 || plan.claims > 0 {
		srv.Logger.Info("planned change: claims on names moving to another node handed over", "continuing", plan.claims, "ended", ended)
	}
	return out, nil
}

// exportPlan is what Export hands over: the state for each new owner,
// and the exported claims of each session.
type exportPlan struct {
	states     map[string]*moveState // by new owner
	perSession map[locktable.SessionID][]moveClaim
	sessionsOf map[string]map[locktable.SessionID]bool // by new owner
	claims     int                                     // the claims exported
}

// planExportLocked sorts the exported locks by new owner and their
// claims by session. A continuing session is heard from by its host
// until its claims are adopted, so their idle time becomes zero; a kept
// one keeps the time it was last heard. Called with srv.mu held.
func (srv *Server) planExportLocked(locks []locktable.LockState, newOwner func(name string) string) *exportPlan {
	p := &exportPlan{
		states:     map[string]*moveState{},
		perSession: map[locktable.SessionID][]moveClaim{},
		sessionsOf: map[string]map[locktable.SessionID]bool{},
	}
	for _, ls := range locks {
		to := newOwner(ls.Name)
		st := p.states[to]
		if st == nil {
			st = &moveState{}
			p.states[to] = st
			p.sessionsOf[to] = map[locktable.SessionID]bool{}
		}
		for _, claims := range [][]locktable.ClaimState{ls.Holders, ls.Waiters} {
			for i := range claims {
				if !srv.isKeptLocked(claims[i].Session) {
					claims[i].Idle = 0
				}
				cs := claims[i]
				p.perSession[cs.Session] = append(p.perSession[cs.Session], moveClaim{cs, ls.Name, ls.Limit})
				p.sessionsOf[to][cs.Session] = true
			}
		}
		p.claims += len(ls.Holders) + len(ls.Waiters)
		st.Locks = append(st.Locks, ls)
	}
	return p
}

// handOverSessionsLocked marks the exported claims of each session as
// handed over, and returns what the new owners install for each: a kept
// session's origin and hashes (the session ends here when it has no
// claim left, with the deliveries kept), a relayed session's (its
// relaying node is told MOVED, delivered), and those of a session on
// this node, whose claims start moving (startMoving). Called with srv.mu
// held.
func (srv *Server) handOverSessionsLocked(now time.Time, perSession map[locktable.SessionID][]moveClaim) (
	hashes map[locktable.SessionID]moveSession, delivered, kept []delivery) {
	hashes = map[locktable.SessionID]moveSession{}
	for sid, cs := range perSession {
		if k := srv.resume.byID[sid]; k != nil {
			hashes[sid] = k.handedOver()
			if len(srv.table.SessionClaims(sid)) == 0 {
				kept = append(kept, srv.endKeptLocked(now, k, locktable.ReasonMoved)...)
			}
			continue
		}
		s := srv.claims[sid]
		o, _ := s.origin()
		ms := moveSession{Session: sid, Origin: o}
		if s.forwarded {
			ids := make([]locktable.ClaimID, len(cs))
			for i, c := range cs {
				ids[i] = c.cs.Claim
			}
			s.sendMovedLocked(ids)
			delivered = append(delivered, delivery{to: s, flush: true})
		} else {
			hash := s.startMoving(now, cs)
			ms.Adopt = hash[:]
		}
		if r := s.v2.resume; r != nil {
			ms.Resume = r.hash[:]
		}
		hashes[sid] = ms
	}
	return hashes, delivered, kept
}

// encode adds the sessions (by id), the range gates and the handed-over
// ranges to the state of each new owner, and encodes it.
func (p *exportPlan) encode(hashes map[locktable.SessionID]moveSession, gates map[string][]rangeGate,
	ranges map[string][]movedRange) (map[string]json.RawMessage, error) {
	stateFor := func(to string) *moveState {
		if p.states[to] == nil {
			p.states[to] = &moveState{}
		}
		return p.states[to]
	}
	for to, gs := range gates {
		stateFor(to).RangeGates = gs
	}
	for to, rs := range ranges {
		stateFor(to).Ranges = rs
	}
	out := map[string]json.RawMessage{}
	for to, st := range p.states {
		for _, sid := range slices.Sorted(maps.Keys(p.sessionsOf[to])) {
			st.Sessions = append(st.Sessions, hashes[sid])
		}
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		out[to] = b
	}
	return out, nil
}

// gateRanges gates the range locks of the keys a planned change moved
// here (Install).
func (srv *Server) gateRanges(gates []rangeGate) {
	if len(gates) == 0 {
		return
	}
	srv.mu.Lock()
	now := time.Now()
	for _, g := range gates {
		srv.ranges.gateLocked(g.Key, now.Add(time.Duration(g.LeaseMS)*time.Millisecond))
	}
	srv.mu.Unlock()
	srv.Logger.Info("planned change: range locks of keys moved here are gated for their holders' lease", "keys", len(gates))
}

// tellMoving tells the version 1 holders on the moving names that the
// name moves (ERROR 0x01), once, and reports how many holders of moving
// names that are not handed over are still there. Export hands nothing
// on while any is: a holder learns of its loss only when the ERROR
// arrives, so a claim granted at once (here, to a continuing claim, or
// at the new owner) could overlap it. Each told holder ends when its
// client hangs up (about one round trip) or its lease runs out. Kept
// sessions (resume.go) are not waited for: their claims are handed over
// as they are (movesOn). Names that move are frozen meanwhile, so no new
// claim enters.
func (srv *Server) tellMoving(moving func(name string) bool) (left int) {
	srv.mu.Lock()
	now := time.Now()
	res, told := srv.table.TellMoving(now, moving, srv.movesOn, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	for _, sid := range told {
		if s := srv.claims[sid]; s != nil && !s.gone.Load() {
			left++
			if !s.movedOut.Swap(true) {
				srv.Logger.Debug("planned change: version 1 holder told; waiting for it to hang up", "remote_addr", s.peer.Addr)
			}
		}
	}
	var ds []delivery
	for _, d := range srv.commit(now, res) {
		if d.to.movedOut.Load() && d.to.closing.Load() {
			continue // told before
		}
		ds = append(ds, d)
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	return left
}

// exportLater is Export's error while holders of moving names that do
// not continue are still there (tellMoving): the hand-off is tried again
// after RetryAfter, and meanwhile whatever else a node must do (end the
// claims on names it no longer owns once the change commits without its
// hand-off) is not held up.
type exportLater struct{ holders int }

func (e exportLater) Error() string {
	return fmt.Sprintf("server: %d holders of moving names told, not gone yet", e.holders)
}

// RetryAfter is how soon Export may be called again. Each call scans
// the table for the moving names under srv.mu, so not too often: a told
// holder hangs up in about a round trip, and the move waits at most this
// much longer.
func (exportLater) RetryAfter() time.Duration { return 20 * time.Millisecond }

// session returns open session sid, or nil.
func (srv *Server) session(sid locktable.SessionID) *session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.claims[sid]
}

// moveClaim is one exported claim of a session, with its lock's name and
// limit.
type moveClaim struct {
	cs    locktable.ClaimState
	name  string
	limit uint32
}

// startMoving marks claims of s moving and returns the hash of the
// session's move secret. Called with srv.mu held, in the critical
// section of the export.
func (s *session) startMoving(now time.Time, cs []moveClaim) [secretHashLen]byte {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.relayLocked()
	if !rel.hasMoveSecret {
		rel.moveSecret, rel.moveHash = newSecret()
		rel.hasMoveSecret = true
	}
	for _, c := range cs {
		rc := &relayedClaim{id: uint32(c.cs.Claim), state: rcMoving,
			move: &moveInfo{name: c.name, mode: protocol.Mode(c.cs.Mode), limit: c.limit, token: c.cs.Token, since: now}}
		rel.claims[rc.id] = rc
		rel.moving++
		s.srv.relayedClaims.Add(1)
	}
	return rel.moveHash
}

// kickMoving has the session's moving claims retried soon, unless a
// retry is already due.
func (s *session) kickMoving() {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.rel.Load()
	if rel == nil || rel.moveTimer || rel.moving == 0 || rel.closed {
		return
	}
	rel.moveTimer = true
	time.AfterFunc(moveRetry, s.retryMoving)
}

// retryMoving sends the adoption of each moving claim that has none in
// flight to the name's owner, once this node routes the name there, and
// gives up the claims that have moved for half their lease.
func (s *session) retryMoving() {
	srv, v := s.srv, s.v2
	v.omu.Lock()
	rel := v.rel.Load()
	rel.moveTimer = false
	if rel.movingOver(s) {
		v.omu.Unlock()
		return
	}
	now := time.Now()
	names := rel.unsentMovingNames()
	v.omu.Unlock()
	routes := srv.routeMoving(names)
	srv.mu.Lock() // before omu: an adoption here changes the table
	v.omu.Lock()
	if rel.movingOver(s) {
		v.omu.Unlock()
		srv.mu.Unlock()
		return
	}
	here, takeHere, gaveUp := s.sendAdoptionsLocked(rel, now, routes)
	ds := hereLocked(&v.omu, here,
		func(rc *relayedClaim) adoptedHere { return s.adoptHereLocked(now, rc) },
		func(rc *relayedClaim, a adoptedHere) { rel.adoptedHere(s, rc, a) })
	ds = append(ds, hereLocked(&v.omu, takeHere,
		func(rc *relayedClaim) takenHere { return s.takeOverHereLocked(now, rc) },
		func(rc *relayedClaim, t takenHere) { rel.takenHere(s, rc, t) })...)
	rel.pump(v)
	rel.kickAll()
	if rel.moving > 0 && !rel.moveTimer && !rel.closed {
		rel.moveTimer = true
		time.AfterFunc(moveRetry, s.retryMoving)
	}
	v.omu.Unlock()
	srv.mu.Unlock()
	srv.deliverAll(ds)
	if gaveUp > 0 {
		srv.Logger.Warn("moving claims not adopted by their new owner in half their lease; given up", "session", s.id, "claims", gaveUp)
	}
	srv.deliver([]delivery{{to: s, flush: true}})
}

// movingOver reports whether the moving claims of s are no longer
// retried: the session has ended, or is ending without its client
// having hung up while they moved (finishing). Called with omu held.
func (rel *relayState) movingOver(s *session) bool {
	return rel.closed || (s.closing.Load() || s.v2.ending) && !rel.finishing
}

// unsentMovingNames returns the names of the moving claims (released or
// not) whose adoption is not in flight. Called with omu held.
func (rel *relayState) unsentMovingNames() []string {
	var names []string
	for _, rc := range rel.claims {
		if rc.state == rcMoving && rc.up == nil {
			names = append(names, rc.move.name)
		}
	}
	for _, rc := range rel.released {
		if rc.state == rcMoving && rc.up == nil {
			names = append(names, rc.move.name)
		}
	}
	return names
}

// movingRoutes is where this node routes the names of moving claims now.
type movingRoutes struct {
	addrs     map[string]string // by name: the owner's address; "" for this node
	gatedHere map[string]bool   // names this node took over and warms up
	ring      uint64            // this node's ring version
}

// routeMoving asks the Router about each name, without a lock held.
func (srv *Server) routeMoving(names []string) movingRoutes {
	r := movingRoutes{addrs: map[string]string{}, gatedHere: map[string]bool{}}
	if rv, ok := srv.Router.(ringVersioner); ok {
		r.ring = rv.RingVersion()
	}
	for _, name := range names {
		switch rt := srv.Router.Route(name, 0, false); {
		case rt.Action == RouteForward:
			r.addrs[name] = rt.Addr
		case rt.Action == RouteServe:
			r.addrs[name] = "" // this node is the new owner
		case rt.Action == RouteHold && rt.Gated:
			r.gatedHere[name] = true
		}
	}
	return r
}

// sendAdoptionsLocked gives up each moving claim whose adoption is not
// in flight and that has moved for half its lease (or past the window
// its client may believe in), and sends the adoption of the others whose
// name routes to another node on an upstream to it. It returns the
// claims this node adopts itself: here, whose name moved to this node;
// takeHere, failed-over claims whose name this node took over. Called
// with srv.mu and omu held.
func (s *session) sendAdoptionsLocked(rel *relayState, now time.Time, routes movingRoutes) (here, takeHere []*relayedClaim, gaveUp int) {
	for _, rc := range slices.Concat(mapValues(rel.claims), rel.released) {
		if rc.state != rcMoving || rc.up != nil {
			continue
		}
		if now.Sub(rc.move.since) >= s.v2.lease/2 || !rc.move.believed.IsZero() && !now.Before(rc.move.believed) {
			rel.giveUp(s, rc)
			gaveUp++
			continue
		}
		if rc.move.failover && routes.gatedHere[rc.move.name] {
			takeHere = append(takeHere, rc)
			continue
		}
		addr, ok := routes.addrs[rc.move.name]
		if !ok {
			continue
		}
		if addr == "" {
			here = append(here, rc)
			continue
		}
		s.sendAdoptLocked(rel, rc, addr, routes.ring)
	}
	return here, takeHere, gaveUp
}

// sendAdoptLocked sends the adoption of moving claim rc to the owner at
// addr: a re-assertion on the session's upstream there, naming the
// session as its origin, with the move secret. Called with srv.mu and
// omu held.
func (s *session) sendAdoptLocked(rel *relayState, rc *relayedClaim, addr string, ring uint64) {
	u := s.upstreamLocked(rel, addr)
	rc.up = u
	u.claims[rc.id] = rc
	f := protocol.Frame{Type: protocol.TypeClaim, Claim: rc.id, Mode: rc.move.mode, Limit: rc.move.limit,
		Flags: protocol.ClaimReassert, Name: rc.move.name, Token: rc.move.token, Ring: ring,
		Session: uint64(s.id), Secret: rel.moveSecret, Node: s.srv.NodeID}
	if rc.move.failover && rc.req.HasValue() && u.values {
		// The next owner took the name without its state: the claim's
		// latest value goes with it (relayvalues.go).
		f.Flags |= protocol.ClaimValue
		f.Value = rc.req.Value
	}
	if rc.move.token == 0 && rc.move.ticket != 0 && u.tickets {
		// A queued claim keeps its place at a new owner that took
		// the name over (tickets.go).
		f.Flags |= protocol.ClaimTicket
		f.Ticket = rc.move.ticket
	}
	u.sendClaim(f, nil, rc)
}

// hereLocked adopts claims cs into this node's own table (do), and then
// records each adoption in the session (done). do runs without omu,
// since the table's pushes take it, under srv.mu, which keeps the
// session's reader out of the table meanwhile. Called with srv.mu and
// omu held; it returns do's deliveries.
func hereLocked[R interface{ deliveries() []delivery }](omu *sync.Mutex, cs []*relayedClaim,
	do func(*relayedClaim) R, done func(*relayedClaim, R)) (ds []delivery) {
	if len(cs) == 0 {
		return nil
	}
	omu.Unlock()
	rs := make([]R, len(cs))
	for i, rc := range cs {
		rs[i] = do(rc)
		ds = append(ds, rs[i].deliveries()...)
	}
	omu.Lock()
	for i, rc := range cs {
		done(rc, rs[i])
	}
	return ds
}

func mapValues(m map[uint32]*relayedClaim) []*relayedClaim {
	out := make([]*relayedClaim, 0, len(m))
	for _, rc := range m {
		out = append(out, rc)
	}
	slices.SortFunc(out, func(a, b *relayedClaim) int { return int(a.id) - int(b.id) })
	return out
}

// releaseMoving releases the claims of a session whose client hung up
// while they moved to their new owner: each is adopted there and then
// released, as the client's own RELEASE would have been, so the new
// owner ends it at once rather than a lease later. It waits for that, at
// most until the move would have been given up (half the lease).
func (s *session) releaseMoving() {
	srv, v := s.srv, s.v2
	v.omu.Lock()
	rel := v.rel.Load()
	var moving []*relayedClaim
	var since time.Time
	for _, rc := range mapValues(rel.claims) {
		if rc.state == rcMoving {
			moving = append(moving, rc)
			if rc.move.since.After(since) {
				since = rc.move.since
			}
		}
	}
	if len(moving) == 0 {
		v.omu.Unlock()
		return
	}
	rel.finishing = true
	v.omu.Unlock()
	srv.mu.Lock()
	for _, rc := range moving {
		s.relayRelease(rc.id)
	}
	srv.mu.Unlock()
	s.retryMoving()                             // it goes on by its timer while claims move
	until := since.Add(v.lease/2 + 2*moveRetry) // retryMoving gives them up by then
	for {
		v.omu.Lock()
		left := 0
		for _, rc := range moving {
			if rc.state != rcEnded {
				left++
			}
		}
		rel.kickAll()
		v.omu.Unlock()
		if left == 0 || time.Now().After(until) || srv.inShutdown.Load() {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// giveUp ends moving claim rc: the client is told REVOKED 0x03 (unless
// it released it: its RELEASE is answered RELEASED). The REVOKED goes
// right after the last frame about the claim still in the outbox, else
// first, as fail places the REVOKED of a lost upstream: the answers
// waiting there were held back because this claim was not confirmed
// after their requests were read, and the client must hear of its loss
// before they move its anchor. Called with omu held.
func (rel *relayState) giveUp(s *session, rc *relayedClaim) {
	rel.moved(rc)
	if rc.move.release != nil {
		rc.move.release.b, rc.move.release.pending = protocol.AppendReleased(nil, rc.id), false
	} else {
		e := &outEntry{b: protocol.AppendRevoked(nil, rc.id, protocol.CodeNotOwner, ""), claim: rc.id}
		at := 0
		for i := len(rel.q) - 1; i >= 0; i-- {
			// About the claim: an owner's frame, or a push (this node's
			// own answers, such as a PONG, carry claim 0).
			if x := rel.q[i]; x.claim == rc.id && (x.up != nil || x.at.IsZero()) {
				at = i + 1
				break
			}
		}
		if len(rel.q) == 0 {
			rel.add(s.v2, e)
		} else {
			rel.insert(at, e)
		}
	}
	rel.endMoved(s, rc)
}

// failOver marks live claim rc, whose upstream failed (fail), moving:
// it is re-asserted at the name's next owner by retryMoving, as a moving
// claim is adopted, with its token (a held claim) or its queue ticket (a
// queued one), the current ring and this node's origin; the owner that
// took the name over installs it when no conflicting claim holds
// (resume.go, takeOver). Until then it counts as an upstream not
// confirmed, and it is given up half a lease after now, a held claim
// earlier if its client's belief may end first (moveInfo.believed).
// Called by fail with omu held, rc taken off its dead upstream.
func (rel *relayState) failOver(rc *relayedClaim, now time.Time, lease time.Duration) {
	if !rel.hasMoveSecret {
		rel.moveSecret, rel.moveHash = newSecret()
		rel.hasMoveSecret = true
	}
	var confirmed time.Time
	if u := rc.up; u != nil {
		confirmed = u.confirmed
		if u.claims[rc.id] == rc {
			delete(u.claims, rc.id)
		}
	}
	rc.up, rc.state = nil, rcMoving
	rc.move = &moveInfo{name: rc.req.Name, mode: rc.req.Mode, limit: rc.req.Limit, token: rc.token,
		since: now, failover: true, ticket: rc.ticket}
	if rc.token != 0 && !confirmed.IsZero() {
		rc.move.believed = confirmed.Add(clientrule.GiveUpAfter(lease))
	}
	rel.moving++
}

// moved records that rc no longer moves. Called with omu held.
func (rel *relayState) moved(rc *relayedClaim) {
	if rc.state == rcMoving {
		rel.moving--
	}
}

// endMoved forgets rc after its move ended. Called with omu held.
func (rel *relayState) endMoved(s *session, rc *relayedClaim) {
	if rc.state == rcEnded {
		return
	}
	if rc.up != nil {
		rc.up.end(rel, rc)
	} else {
		rc.state = rcEnded
		if rel.claims[rc.id] == rc {
			delete(rel.claims, rc.id)
		}
		s.srv.relayedClaims.Add(-1)
	}
	if i := slices.Index(rel.released, rc); i >= 0 {
		rel.released = slices.Delete(rel.released, i, i+1)
	}
}

// adoptAnswer applies N's answer f to the adoption r of moving claim
// r.rc. Called with omu held.
func (u *upstream) adoptAnswer(rel *relayState, v *v2conn, r upReq, f protocol.Frame) {
	rc := r.rc
	switch {
	case f.Type == protocol.TypeGranted, f.Type == protocol.TypeQueued:
		rel.moved(rc)
		rc.state = rcLive
		if f.Type == protocol.TypeGranted {
			rc.token = f.Token
		} else {
			rc.ticket = f.Ticket
		}
		if f.Type == protocol.TypeGranted && rc.move.token == 0 && rc.move.release == nil {
			u.push(rel, v, &outEntry{b: protocol.AppendPromoted(nil, rc.id, f.Token), up: u, claim: rc.id})
		}
		if slot := rc.move.release; slot != nil {
			// The client released it while it moved: on to N now.
			if i := slices.Index(rel.released, rc); i >= 0 {
				rel.released = slices.Delete(rel.released, i, i+1)
			}
			rc.state = rcReleasing
			slot.up = u
			u.send(protocol.AppendRelease(nil, rc.id), upReq{kind: protocol.TypeRelease, at: time.Now(), slot: slot, rc: rc})
		}
	case f.Type == protocol.TypeRefused && (f.Code == protocol.CodeNotOwner ||
		f.Code == protocol.CodeStaleRing && rc.move.failover):
		// Not yet: N does not serve the name (its ring is older, or the
		// name is frozen again). Asked again by retryMoving. A
		// re-assertion after a failure (fail) whose ring was older than
		// N's take-over is sent again too, with the ring this node has
		// then: it read its ring before routing the name.
		delete(u.claims, rc.id)
		rc.up = nil
		if !rel.moveTimer && !rel.closed {
			rel.moveTimer = true
			time.AfterFunc(moveRetry, u.s.retryMoving)
		}
	default:
		// N has no such claim: it expired, or N lost it.
		rel.giveUp(u.s, rc)
	}
}

// installMoved installs a moveState from another node: every claim
// detached, each origin a kept session that a re-assertion with one of
// the state's secrets adopts.
func (srv *Server) installMoved(from string, ms *moveState) error {
	srv.mu.Lock()
	now := time.Now()
	ids := map[locktable.SessionID]locktable.SessionID{}
	origins := map[locktable.SessionID]locktable.Origin{}
	for _, m := range ms.Sessions {
		if len(m.Adopt) != 0 && len(m.Adopt) != secretHashLen || len(m.Resume) != 0 && len(m.Resume) != secretHashLen {
			srv.mu.Unlock()
			return fmt.Errorf("server: hand-off from %s: bad secret hash for %+v", from, m.Origin)
		}
		sid, ok := srv.table.DetachedSession(m.Origin)
		if !ok {
			srv.nextID++
			sid = locktable.SessionID(srv.nextID)
		}
		ids[m.Session] = sid
		origins[sid] = m.Origin
	}
	locks := make([]locktable.LockState, len(ms.Locks))
	for i, ls := range ms.Locks {
		ls.Holders, ls.Waiters = slices.Clone(ls.Holders), slices.Clone(ls.Waiters)
		for j := range ls.Holders {
			ls.Holders[j].Session = ids[ls.Holders[j].Session]
		}
		for j := range ls.Waiters {
			ls.Waiters[j].Session = ids[ls.Waiters[j].Session]
		}
		locks[i] = ls
	}
	res, err := srv.table.ImportDetached(now, locks, origins)
	if err != nil {
		srv.mu.Unlock()
		return fmt.Errorf("server: hand-off from %s: %w", from, err)
	}
	ds := srv.commit(now, res)
	if srv.resume.kept == nil {
		srv.resume.kept = map[locktable.Origin]*keptSession{}
		srv.resume.byID = map[locktable.SessionID]*keptSession{}
	}
	for _, m := range ms.Sessions {
		sid := ids[m.Session]
		if _, ok := srv.table.DetachedSession(m.Origin); !ok {
			continue // it had no claim in these locks
		}
		k := srv.resume.kept[m.Origin]
		if k == nil {
			k = &keptSession{resumeKey: resumeKey{origin: m.Origin}, id: sid}
			if len(m.Resume) == secretHashLen {
				copy(k.hash[:], m.Resume)
			}
			srv.resume.kept[k.origin] = k
			srv.resume.byID[k.id] = k
		}
		if len(m.Adopt) == secretHashLen {
			var h [secretHashLen]byte
			copy(h[:], m.Adopt)
			k.moveHash = &h
		}
		srv.armKeptLocked(k)
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	n := 0
	for _, ls := range ms.Locks {
		n += len(ls.Holders) + len(ls.Waiters)
	}
	srv.Logger.Info("planned change: claims handed over installed, detached until their hosts adopt them", "from", from, "claims", n, "sessions", len(ms.Sessions))
	return nil
}

// releasedMoving reports whether claim id was moving when the client
// released it, and its RELEASE has not been sent on yet. Called with
// srv.mu held.
func (s *session) releasedMoving(id uint32) bool {
	v := s.v2
	rel := v.rel.Load()
	if rel == nil {
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	for _, rc := range rel.released {
		if rc.id == id && rc.state == rcMoving {
			return true
		}
	}
	return false
}

// movedFrame applies MOVED(claim) read on upstream u: the first is the
// owner's push at its export (the claim is taken off u and moves: a
// RELEASE of it in flight on u is kept for the new owner), a second one
// answers that RELEASE, which the owner read after its export. Called
// with omu held; it reports false for a frame that fits neither.
func (u *upstream) movedFrame(rel *relayState, v *v2conn, f protocol.Frame) bool {
	if len(u.fifo) > 0 {
		if r := u.fifo[0]; r.kind == protocol.TypeRelease && r.rc.id == f.Claim && r.rc.movedAnswer {
			u.fifo[0] = upReq{}
			u.fifo = u.fifo[1:]
			if r.at.After(u.confirmed) {
				u.confirmed = r.at
			}
			r.rc.movedAnswer = false
			return true
		}
	}
	rc := u.claims[f.Claim]
	if rc == nil || rc.state != rcLive && rc.state != rcReleasing {
		return rc == nil // a claim already ended here: nothing to do
	}
	if rc.req.Name == "" {
		// Attached without its CLAIM (AttachRelayed): it cannot be
		// adopted, so its client is told it lost it.
		if rc.state == rcLive {
			u.push(rel, v, &outEntry{b: protocol.AppendRevoked(nil, rc.id, protocol.CodeNotOwner, ""), up: u, claim: rc.id})
		}
		u.end(rel, rc)
		return true
	}
	mi := &moveInfo{name: rc.req.Name, mode: rc.req.Mode, limit: rc.req.Limit, token: rc.token, since: time.Now()}
	if rc.state == rcReleasing {
		for i := range u.fifo {
			if r := &u.fifo[i]; r.kind == protocol.TypeRelease && r.rc == rc && r.slot != nil {
				mi.release, r.slot = r.slot, nil
				mi.release.up = nil
				rc.movedAnswer = true
				break
			}
		}
		rel.released = append(rel.released, rc)
	}
	delete(u.claims, rc.id)
	rc.up, rc.move, rc.state = nil, mi, rcMoving
	rel.moving++
	if !rel.moveTimer && !rel.closed {
		rel.moveTimer = true
		time.AfterFunc(moveRetry, u.s.retryMoving)
	}
	return true
}

// takenHere is what takeOverHereLocked did.
type takenHere struct {
	err error
	ds  []delivery
}

func (t takenHere) deliveries() []delivery { return t.ds }

// takeOverHereLocked re-asserts failed-over claim rc (fail) at this
// node, which took its name over from the dead owner and warms up: the
// design's new owner is the relaying node itself. It does what takeOver
// does for a re-assertion that reaches it (resume.go): a held claim is
// installed in this session's own table entry with its old token unless
// a conflicting claim holds the lock; a queued one is held for the
// warm-up with its queue ticket (tickets.go) and entered with the others
// when the name is served (retryHeld), the client, told QUEUED long ago,
// told nothing now. Called with srv.mu held, not omu.
func (s *session) takeOverHereLocked(now time.Time, rc *relayedClaim) takenHere {
	srv, mi := s.srv, rc.move
	if mi.release != nil {
		return takenHere{err: locktable.ErrNoClaim} // released meanwhile: nothing to continue
	}
	if mi.token == 0 {
		f := protocol.Frame{Type: protocol.TypeClaim, Claim: rc.id, Mode: mi.mode, Limit: mi.limit, Name: mi.name}
		if mi.ticket != 0 {
			f.Flags, f.Ticket = protocol.ClaimTicket, mi.ticket
		}
		rel := s.v2.rel.Load()
		rel.held = append(rel.held, f)
		srv.recordGatedLocked(s, f)
		if !rel.holding {
			rel.holding = true
			time.AfterFunc(holdRetry, s.retryHeld)
		}
		return takenHere{}
	}
	_, res, err := srv.table.Reassert(now, s.id, locktable.ClaimID(rc.id), locktable.ClaimRequest{
		Name: mi.name, Mode: locktable.Mode(mi.mode), Limit: mi.limit, Value: rc.req.Value}, mi.token)
	if err != nil {
		return takenHere{err: err}
	}
	return takenHere{ds: srv.commit(now, res)}
}

// takenHere updates the session after takeOverHereLocked: the claim is
// no longer relayed (it is in this node's table, or held), or it is
// given up. Called with omu held.
func (rel *relayState) takenHere(s *session, rc *relayedClaim, t takenHere) {
	if rc.state != rcMoving {
		return // ended meanwhile
	}
	if t.err != nil {
		rel.giveUp(s, rc)
		return
	}
	rel.moved(rc)
	rel.endMoved(s, rc)
}

// adoptedHere is what adoptHereLocked did to the table.
type adoptedHere struct {
	st  locktable.Status
	err error
	ds  []delivery
}

func (a adoptedHere) deliveries() []delivery { return a.ds }

// adoptHereLocked adopts moving claim rc into this session's own table
// entry: the name moved to this node, the host (the design's H = N). The
// claim becomes direct, with its token and place; a RELEASE queued for
// it is applied. Called with srv.mu held, not omu (rc's fields it reads
// change only under srv.mu and omu both).
func (s *session) adoptHereLocked(now time.Time, rc *relayedClaim) adoptedHere {
	srv := s.srv
	o := locktable.Origin{Node: srv.NodeID, Session: uint64(s.id)}
	st, err := srv.table.Adopt(now, o, locktable.ClaimID(rc.id), s.id)
	if err != nil {
		return adoptedHere{err: err}
	}
	if _, still := srv.table.DetachedSession(o); !still {
		if k := srv.resume.kept[o]; k != nil {
			srv.forgetKeptLocked(k)
		}
	}
	var ds []delivery
	if rc.move.release != nil {
		res, _ := srv.table.Release(now, locktable.Key{Session: s.id, Claim: locktable.ClaimID(rc.id)})
		ds = srv.commit(now, res)
	}
	return adoptedHere{st: st, ds: ds}
}

// adoptedHere updates the session after adoptHereLocked: the claim is no
// longer relayed; a queued RELEASE is answered, a grant the client has
// not been told is pushed, and a claim the table did not have is
// revoked. Called with omu held.
func (rel *relayState) adoptedHere(s *session, rc *relayedClaim, a adoptedHere) {
	if rc.state != rcMoving {
		return // ended meanwhile
	}
	if a.err != nil {
		rel.giveUp(s, rc)
		return
	}
	rel.moved(rc)
	mi := rc.move
	rel.endMoved(s, rc)
	switch {
	case mi.release != nil:
		mi.release.b, mi.release.pending, mi.release.up = protocol.AppendReleased(nil, rc.id), false, nil
	case a.st.State == locktable.Owner && mi.token == 0:
		rel.add(s.v2, &outEntry{b: protocol.AppendPromoted(nil, rc.id, a.st.Token), claim: rc.id})
	}
}
