package server

import (
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Cluster routing of version 2 claims, the client's side on the relaying
// node R: each CLAIM whose name another node owns goes to that owner on an
// upstream session (one per client session and owner, opened with a hop
// header), and the owner's answers and pushes reach the client unchanged.
// The session's frames wait in an ordered outbox until every upstream that
// protects its claims is confirmed after the request each answers was read
// (the pessimism rule, clustercore's Outbox). Where each claim goes and
// what a RELEASE does are decided in clustercore (relay2_route.go,
// relay2_session.go). The upstreams are in relay2upstream.go, held claims
// in relay2hold.go.
// Design: "Relaying a version 2 session" and #serverrelay2go in
// docs/design/2026-12-07-cluster-relay.md.

// relayState is the relaying part of a version 2 session, from its first
// relayed claim on. Its fields are guarded by the session's omu, except
// held, holding and rerouted, which are guarded by srv.mu (a retry
// enters held claims in the table, other sessions' too, enterGated, and
// the table's pushes take omu), and the outbox's read time, which only
// the session's reader touches.
type relayState struct {
	// box holds the frames not yet released to out, in the order
	// decided, and the read time of the reader's batch.
	box clustercore.Outbox[*upstream]
	// ups are the live upstream sessions, by owner address.
	ups map[string]*upstream
	// claims are the relayed claim ids in use, for RELEASE and the check
	// of CLAIM ids.
	claims map[uint32]*relayedClaim
	// closed is set when the session has ended: no upstream opens again.
	closed bool
	// finishing is set when the session's client hung up while claims
	// moved (releaseMoving): their adoption and release go on.
	finishing bool
	// held are the claims held back because Route said hold, or their
	// upstream could not be opened, in arrival order, and holding says a
	// retry is scheduled (relay2hold.go). Guarded by srv.mu, not omu.
	held    []protocol.Frame
	holding bool
	// rerouted are the held claims that an owner revoked because their
	// name moved (rehold), by id: the owner's address and until when this
	// node, whose ring may still name that owner, waits for its ring
	// rather than ask that owner again. Guarded by srv.mu, not omu.
	rerouted map[uint32]clustercore.Relay2Reroute
	// openFails counts the upstreams that could not be opened since one
	// last opened, for the log (clustercore.UpstreamEnd.Log).
	openFails clustercore.UpstreamOpenFails
	// noTickets are the owners, by address, that refused an upstream
	// HELLO asking for queue tickets (ERROR 0x1e: the earlier revision):
	// this session's upstreams to them open without asking.
	noTickets clustercore.UpstreamRefusals
	// Claims moving to a new owner (move_host.go): how many are not adopted
	// yet (while any is not, no answer is released), the ones the client
	// released meanwhile (their ids are free), whether a retry is
	// scheduled, and the secret that adopts them at the new owner.
	moving        int
	released      []*relayedClaim
	moveTimer     bool
	hasMoveSecret bool
	moveSecret    [protocol.SecretLen]byte
	moveHash      [secretHashLen]byte
	// rangeWaits are the relayed RANGE sets that wait (or may) at their
	// owner, by req, with the upstream that carries them: a cancel goes
	// there (relayranges.go).
	rangeWaits map[uint32]*upstream
	// rangeMoves are the keys whose range locks a planned change handed
	// to their new owner, not adopted there yet (rangemove.go): while
	// any is, no answer is released; rangeTimer says a retry is due.
	rangeMoves map[string]*rangeMove
	rangeTimer bool
}

// outEntry is one frame of the ordered outbox.
type outEntry = clustercore.Entry[*upstream]

// relayedClaim is one relayed claim (one use of a claim id): what the
// relaying node decides about it (clustercore.Claim), its upstream, and
// its move to a new owner (move_host.go).
type relayedClaim struct {
	clustercore.Claim
	up   *upstream
	move *moveInfo
}

// relayOpen reports whether the session relays on: neither it nor its
// relaying has ended. Called with omu held.
func (s *session) relayOpen(rel *relayState) bool {
	return !rel.closed && !s.closing.Load() && !s.v2.ending
}

// relayLocked returns the session's relay state, creating it.
func (v *v2conn) relayLocked() *relayState {
	rel := v.rel.Load()
	if rel == nil {
		rel = &relayState{ups: map[string]*upstream{}, claims: map[uint32]*relayedClaim{}}
		v.rel.Store(rel)
	}
	return rel
}

// answerAt is the time an answer built now must be confirmed after
// (clustercore.Outbox.AnswerAt).
func (rel *relayState) answerAt() time.Time { return rel.box.AnswerAt(time.Now()) }

// confirmation is how far the upstreams that protect the session's
// claims have been confirmed: one with a claim or range locks protects
// them, and a claim or key moving is an upstream not confirmed yet.
func (rel *relayState) confirmation() clustercore.Confirmation {
	return clustercore.Relay2Confirmation(rel.moving > 0 || len(rel.rangeMoves) > 0, rel.ups, upstreamProtects)
}

// upstreamProtects is u's confirmation, and whether it protects any of
// the session's claims or range locks.
func upstreamProtects(u *upstream) (time.Time, bool) {
	return u.led.Confirmed(), len(u.claims) > 0 || u.ranges
}

// add appends e to the outbox; what may leave at once goes to out.
func (rel *relayState) add(v *v2conn, e *outEntry) {
	v.out = rel.box.Add(v.out, e, rel.confirmation())
}

// place leaves a place in the outbox for the answer to a request about
// claim id relayed on u, read at at, and returns it.
func (rel *relayState) place(v *v2conn, at time.Time, u *upstream, id uint32) *outEntry {
	slot := &outEntry{Pending: true, At: at, Up: u, Claim: id}
	rel.add(v, slot)
	return slot
}

// pump releases the outbox's prefix that may leave, and sends a PING on
// each upstream that needs one to be confirmed after the latest answer.
func (rel *relayState) pump(v *v2conn) {
	v.out = rel.box.Release(v.out, rel.confirmation())
	var now time.Time
	for _, u := range rel.ups {
		if seq, ok := u.led.Ping(rel.box.LastAt()); ok {
			if now.IsZero() {
				now = time.Now()
			}
			u.send(protocol.AppendPing(nil, seq), upReq{Sent: clustercore.Sent{Kind: protocol.TypePing, At: now}})
		}
	}
}

// kickAll wakes the writer of every upstream with frames to send.
func (rel *relayState) kickAll() {
	for _, u := range rel.ups {
		if len(u.wbuf) > 0 {
			select {
			case u.kick <- struct{}{}:
			default:
			}
		}
	}
}

// routeClaim asks the Router, on a cluster node, who serves CLAIM f
// (clustercore.Relay2ClaimWay). It returns false when this node does;
// otherwise it has relayed the claim to its owner, held it (QUEUED,
// relay2hold.go), or answered it REFUSED 0x03. Called by the reader with
// srv.mu held.
func (s *session) routeClaim(now time.Time, f protocol.Frame) bool {
	r := s.srv.Router
	if r == nil {
		return false
	}
	rt := r.Route(f.Name, 0, s.forwarded)
	idBusy := func() bool { return s.releasedMoving(f.Claim) }
	nameHeld := func() bool { return s.v2.rel.Load().holdsName(f.Name) }
	switch clustercore.Relay2ClaimWay(claimRoute(rt), s.forwarded, idBusy, nameHeld) {
	case clustercore.Relay2Serve:
		return false
	case clustercore.Relay2HoldGated:
		s.holdGated(f) // entered with the re-asserted ones (tickets.go)
	case clustercore.Relay2Hold:
		s.holdClaim(f)
	case clustercore.Relay2Relay:
		s.relayClaim(now, f, rt.Addr)
	default:
		s.refuse(f, protocol.CodeNotOwner)
	}
	return true
}

// claimRoute is what Route rt says of a claim's name
// (clustercore.Relay2Route).
func claimRoute(rt Route) clustercore.Relay2Route {
	switch rt.Action {
	case RouteServe:
		return clustercore.Relay2RouteHere
	case RouteForward:
		return clustercore.Relay2RouteThere
	case RouteHold:
		if rt.Gated {
			return clustercore.Relay2RouteWarming
		}
		return clustercore.Relay2RouteHold
	case RouteMoving:
		return clustercore.Relay2RouteMoving
	}
	return clustercore.Relay2RouteNotOwner
}

// relayClaim sends CLAIM f to the owner at addr through the session's
// upstream there, and leaves a place for its answer in the outbox. now
// is when its batch was read.
func (s *session) relayClaim(now time.Time, f protocol.Frame, addr string) {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	if s.closing.Load() || v.ending {
		return // nothing more is sent
	}
	rel := v.relayLocked()
	if rel.closed {
		return
	}
	at := rel.box.Relaying(now)
	u := s.upstreamLocked(rel, addr)
	rc := u.attach(rel, f.Claim, clustercore.ClaimPending)
	u.sendClaim(f, rel.place(v, at, u, f.Claim), rc)
}

// relayInUse reports whether claim id is relayed or held, and in use.
// Called with srv.mu held.
func (s *session) relayInUse(id uint32) bool {
	v := s.v2
	rel := v.rel.Load()
	if rel == nil {
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	return rel.claims[id] != nil || rel.heldIndex(id) >= 0
}

// relayRelease forwards RELEASE(id) when id is a relayed claim in use and
// reports whether it did. The id is free at once, as on the owner. A held
// claim is dropped, and answered by the caller as a claim not in use.
// Called with srv.mu held.
func (s *session) relayRelease(id uint32) bool {
	v := s.v2
	rel := v.rel.Load()
	if rel == nil {
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	i, rc := rel.heldIndex(id), rel.claims[id]
	live := !s.closing.Load() && !v.ending
	switch clustercore.Relay2ReleaseOf(i >= 0, claimOf(rc)) {
	case clustercore.Relay2ReleaseHere:
		return false
	case clustercore.Relay2ReleaseHeld:
		s.srv.forgetGatedLocked(s, id, rel.held[i].Name)
		rel.held = append(rel.held[:i], rel.held[i+1:]...)
		delete(rel.rerouted, id)
		return false
	case clustercore.Relay2ReleaseAfterAdoption: // move_host.go
		delete(rel.claims, id)
		if live {
			rc.move.release = rel.place(v, rel.answerAt(), rc.up, id)
		}
		rel.released = append(rel.released, rc)
		return true
	}
	delete(rel.claims, id)
	if live {
		slot := rel.place(v, rel.answerAt(), rc.up, id)
		rc.up.send(protocol.AppendRelease(nil, id), upReq{Sent: clustercore.Sent{Kind: protocol.TypeRelease, At: time.Now()}, slot: slot, rc: rc})
	}
	return true
}

// relayPump releases what the outbox can release after a batch, and
// writes what the batch queued for the upstreams (the session's reader
// writes them itself: a hop less on the way to the owner).
func (s *session) relayPump() {
	v := s.v2
	var ups []*upstream
	v.omu.Lock()
	if rel := v.rel.Load(); rel != nil && !s.closing.Load() && !v.ending {
		rel.pump(v)
		for _, u := range rel.ups {
			if len(u.wbuf) > 0 {
				ups = append(ups, u)
			}
		}
	}
	v.omu.Unlock()
	for _, u := range ups {
		u.flush()
	}
}

// dropUpstreams closes every upstream of a session that has ended. Each
// owner keeps the claims it relayed until their lease has passed (hop
// header version 3: it cannot tell this node's death from the client's
// hang-up), unless release is set: the client hung up or broke the
// protocol (clustercore.SessionEnd.ReleasesRelayed), and the claims are
// released first (RELEASE for each, written before the close), so each
// owner ends them at once, as it would a direct client's.
func (s *session) dropUpstreams(release bool) {
	v := s.v2
	if v == nil || v.rel.Load() == nil {
		return
	}
	if release {
		s.releaseMoving()
		s.releaseUpstreams()
	}
	v.omu.Lock()
	rel := v.rel.Load()
	rel.closed = true
	for _, rc := range slices.Concat(mapValues(rel.claims), rel.released) {
		if rc.State == clustercore.ClaimMoving && rc.up == nil {
			rel.moved(rc)
			rel.endMoved(s, rc)
		}
	}
	ups := make([]*upstream, 0, len(rel.ups))
	for _, u := range rel.ups {
		ups = append(ups, u)
		u.markDead(rel)
		for _, rc := range u.claims {
			u.end(rel, rc)
		}
		for _, r := range u.led.Drain() {
			if r.rc != nil {
				u.end(rel, r.rc)
			}
		}
	}
	rel.box.Clear()
	v.omu.Unlock()
	for _, u := range ups {
		u.shutdown()
	}
}

// releaseUpstreams writes RELEASE for every claim relayed on each open
// upstream of an ended session, and waits (at most io-timeout) until it
// has been written.
func (s *session) releaseUpstreams() {
	v := s.v2
	var ups []*upstream
	v.omu.Lock()
	for _, u := range v.rel.Load().ups {
		if u.conn == nil || u.dead {
			continue // not open: its frames never reach the owner
		}
		n := len(u.wbuf)
		u.wbuf = clustercore.UpstreamAppendReleases(u.wbuf, u.claims, claimOf)
		u.wbuf = u.appendRangeReleases(u.wbuf)
		if len(u.wbuf) > n {
			ups = append(ups, u)
		}
	}
	v.omu.Unlock()
	until := time.Now().Add(s.srv.IOTimeout)
	for _, u := range ups {
		u.flush() // or the goroutine writing now writes them
		for {
			v.omu.Lock()
			written := u.dead || !u.writing && len(u.wbuf) == 0
			v.omu.Unlock()
			if written || time.Now().After(until) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// attachRelayed records that claim of version 2 session sid, which is
// not (or no longer) in this node's table, is from now on served by the
// owner at addr, through the session's upstream session there (opened
// if need be): the client's RELEASE of it goes there, the owner's pushes
// about it come back, and the loss of the upstream revokes it. It sends
// nothing: it is for a planned hand-off that has moved the claim's state
// to the owner under the upstream session (identified there by
// relayedSession). The relay uses the same path for each claim it
// relays. It returns locktable.ErrNoSession when sid is not an open
// version 2 session, locktable.ErrClaimExists when the id is in use.
func (srv *Server) attachRelayed(sid locktable.SessionID, claim uint32, addr string) error {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	s := srv.claims[sid]
	if s == nil || s.v2 == nil {
		return locktable.ErrNoSession
	}
	_, err := srv.table.ClaimStatus(locktable.Key{Session: sid, Claim: locktable.ClaimID(claim)})
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.relayLocked()
	if err := clustercore.Relay2Attach(s.relayOpen(rel), err == nil, rel.claims[claim] != nil); err != nil {
		return err
	}
	s.upstreamLocked(rel, addr).attach(rel, claim, clustercore.ClaimLive)
	return nil
}

// detachRelayed forgets that claim of version 2 session sid is relayed,
// without a frame to the client or the owner, and returns the owner's
// address: for a planned hand-off that has moved the claim's state away
// from that owner (to this node, or to another, then attachRelayed). It
// returns locktable.ErrNoSession or locktable.ErrNoClaim.
func (srv *Server) detachRelayed(sid locktable.SessionID, claim uint32) (string, error) {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	s := srv.claims[sid]
	if s == nil || s.v2 == nil {
		return "", locktable.ErrNoSession
	}
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.rel.Load()
	if rel == nil || rel.claims[claim] == nil {
		return "", locktable.ErrNoClaim
	}
	rc := rel.claims[claim]
	rc.up.end(rel, rc)
	return rc.up.addr, nil
}

// relayedSession returns the session of this node that node origin opened
// to relay the claims of its client session clientSession (a version 2
// hop header), if it is open.
func (srv *Server) relayedSession(origin string, clientSession uint64) (locktable.SessionID, bool) {
	srv.init()
	via := hopVia(protocol.Hop{Version: protocol.HopVersion2, Origin: origin, Session: clientSession})
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for id, s := range srv.claims {
		if s.v2 != nil && s.forwarded && s.peer.Via == via {
			return id, true
		}
	}
	return 0, false
}

// relayedClaimCount returns the number of version 2 claims this node relays
// to their owners now, and of the upstream sessions that carry them.
func (srv *Server) relayedClaimCount() (claims, upstreams int64) {
	return srv.relayedClaims.Load(), srv.upstreams.Load()
}
