package server

import (
	"maps"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Cluster routing of version 2 claims (docs/cluster.md, "Relaying a
// version 2 session").
//
// A version 2 session stays on the node the client connected to (the
// relaying node, R). Each CLAIM whose name another node owns (Route says
// RouteForward) goes to that owner (O) through an upstream session: one
// per client session and owner, opened on the first claim for that owner
// with a hop header (protocol/hop.go), the version 2 preamble and HELLO
// with the client session's lease and label, asking for queue tickets
// when the client's session did (an owner that refuses them, ERROR 0x1e, gets the
// upstream again without: reopenLocked). The claim keeps the client's claim
// id upstream (one upstream per client session keeps the ids unique).
// CLAIM and RELEASE of relayed claims are forwarded; the owner's answers
// and pushes about them (GRANTED with the owner's token, QUEUED, BUSY,
// REFUSED, PROMOTED, REVOKED, RELEASED) reach the client unchanged. The
// owner sees a forwarded session and never relays it again. A claim on a
// name Route holds waits as QUEUED (relay2hold.go), and so does a claim
// whose upstream cannot be opened (the dial, the hop header or HELLO
// fails): the owner granted nothing on it.
//
// Ending: the client's session ends at R (it hung up, fell silent for its
// lease, an ERROR, a shutdown): R closes every upstream of it and each
// owner releases at once, unless the session is resumable (hop header
// version 3, resume.go): then each owner keeps its claims for a
// re-assertion until the lease passes. An upstream ends without the client once open
// (its owner closed it, died, shut down, or did not answer for half the
// lease): when the owner may have died or stops serving, every claim
// relayed on it is re-asserted at the name's next owner (fail, and
// failOver in move_host.go); otherwise it is lost and the client is told
// REVOKED(claim, 0x03). The session and its other claims live on.
//
// The pessimism rule through a relay. The client's confirmation anchor
// is the send time of its latest request whose answer arrived, and any
// answer moves it, whoever produced it. So R writes the answer to a
// request it read at r only once every upstream of the session has been
// confirmed after r: an upstream request sent at or after r has been
// answered, so the owner read it after r and its lease for the relayed
// claims runs at least until r + L. R sends a PING on an upstream that
// has nothing in flight sent after r (at most maxUpstreamPings at a
// time). The session's frames wait in an ordered outbox (relayState.q):
// an answer leaves when it is known and its condition holds, a push
// (PROMOTED, REVOKED) never overtakes an earlier frame, and a push from
// an owner goes before the answers that owner had not sent yet. A
// session that never relayed a claim keeps the direct path.
//
// This file holds the client's side on R: the outbox, the routing of
// each CLAIM and RELEASE, and the session's end. The upstream sessions
// to the owners are in relay2upstream.go, held claims in relay2hold.go.

// maxUpstreamPings bounds the PINGs in flight on one upstream.
const maxUpstreamPings = 2

// relayState is the relaying part of a version 2 session, from its first
// relayed claim on. Its fields are guarded by the session's omu, except
// held, holding and rerouted, which are guarded by srv.mu (a retry
// enters held claims in the table, other sessions' too, enterGated, and
// the table's pushes take omu), and readAt, which only the session's
// reader touches.
type relayState struct {
	// q holds the frames not yet released to out, in the order decided.
	q []*outEntry
	// ups are the live upstream sessions, by owner address.
	ups map[string]*upstream
	// claims are the relayed claim ids in use, for RELEASE and the check
	// of CLAIM ids.
	claims map[uint32]*relayedClaim
	// lastAt is the latest read time of an answer queued.
	lastAt time.Time
	// closed is set when the session has ended: no upstream opens again.
	closed bool
	// finishing is set when the session's client hung up while claims
	// moved (releaseMoving): their adoption and release go on.
	finishing bool
	// readAt is when the batch being answered was read in full. Owned
	// by the session's reader, which alone builds answers: no lock.
	readAt time.Time
	// held are the claims held back because Route said hold, or their
	// upstream could not be opened, in arrival order, and holding says a
	// retry is scheduled (relay2hold.go). Guarded by srv.mu, not omu.
	held    []protocol.Frame
	holding bool
	// rerouted are the held claims that an owner revoked because their
	// name moved (rehold), by id: the owner's address and until when this
	// node, whose ring may still name that owner, waits for its ring
	// rather than ask that owner again. Guarded by srv.mu, not omu.
	rerouted map[uint32]reroute
	// openFails counts the upstreams that could not be opened since one
	// last opened, to log the first and then one in 50.
	openFails int
	// noTickets are the owners, by address, that refused an upstream
	// HELLO asking for queue tickets (ERROR 0x1e: the earlier revision):
	// this session's upstreams to them open without asking.
	noTickets map[string]bool
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
type outEntry struct {
	b []byte
	// at is when the request it answers was read; zero for a push.
	at time.Time
	// pending: the answer has not come from the upstream yet.
	pending bool
	// up and claim say which upstream and claim id the frame is about
	// (nil for this node's own frames).
	up    *upstream
	claim uint32
}

// claimState is where a relayed claim stands as the relaying node sees it.
type claimState uint8

const (
	rcPending   claimState = iota // CLAIM sent, not answered yet
	rcLive                        // answered GRANTED or QUEUED
	rcReleasing                   // RELEASE sent
	rcEnded
	rcMoving // moving to a new owner, not adopted yet (move_host.go)
)

// relayedClaim is one relayed claim (one use of a claim id).
type relayedClaim struct {
	id    uint32
	up    *upstream
	state claimState
	move  *moveInfo // a claim that moves to a new owner (move_host.go)
	// req is the CLAIM sent for it, and token the owner's grant: what a
	// move needs to adopt it at the new owner.
	req   protocol.Frame
	token uint64
	// ticket is the queue ticket of the owner's QUEUED (0: none), for a
	// re-assertion of a queued claim at a new owner (fail).
	ticket uint64
	// movedAnswer: a RELEASE of it is in flight on its old upstream,
	// which answers it MOVED.
	movedAnswer bool
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

// answerAt is the time an answer built now must be confirmed after: the
// read time of the reader's batch, or now when the batch began before the
// session relayed anything (AttachRelayed meanwhile).
func (rel *relayState) answerAt() time.Time {
	if rel.readAt.IsZero() {
		return time.Now()
	}
	return rel.readAt
}

// add appends e to the outbox; a frame with nothing before it and no
// condition goes straight to out.
func (rel *relayState) add(v *v2conn, e *outEntry) {
	if !e.at.IsZero() && e.at.After(rel.lastAt) {
		rel.lastAt = e.at
	}
	if len(rel.q) == 0 && !e.pending && (e.at.IsZero() || rel.confirmedAfter(e.at)) {
		v.out = append(v.out, e.b...)
		return
	}
	rel.q = append(rel.q, e)
}

// insert puts e at index i of the outbox.
func (rel *relayState) insert(i int, e *outEntry) { rel.q = slices.Insert(rel.q, i, e) }

// confirmedAfter reports whether every upstream with a claim has been
// confirmed at or after at. An upstream with none protects nothing: a
// claim it gets later is answered after its own CLAIM is confirmed.
func (rel *relayState) confirmedAfter(at time.Time) bool {
	if rel.moving > 0 || len(rel.rangeMoves) > 0 {
		return false // a moving claim or key is an upstream not confirmed yet
	}
	for _, u := range rel.ups {
		if (len(u.claims) > 0 || u.ranges) && u.confirmed.Before(at) {
			return false
		}
	}
	return true
}

// pump releases the outbox's prefix whose frames are known and whose
// conditions hold, and sends a PING on each upstream that has not been
// confirmed after the latest answer and has nothing in flight sent late
// enough.
func (rel *relayState) pump(v *v2conn) {
	i := 0
	for ; i < len(rel.q); i++ {
		e := rel.q[i]
		if e.pending || !e.at.IsZero() && !rel.confirmedAfter(e.at) {
			break
		}
		v.out = append(v.out, e.b...)
	}
	if i > 0 {
		n := copy(rel.q, rel.q[i:])
		clear(rel.q[n:])
		rel.q = rel.q[:n]
	}
	// Every upstream, with claims or not, hears from this node when the
	// client has spoken: an idle one stays open as long as the session.
	var now time.Time
	for _, u := range rel.ups {
		if u.confirmed.Before(rel.lastAt) && u.lastSent.Before(rel.lastAt) && u.pings < maxUpstreamPings {
			if now.IsZero() {
				now = time.Now()
			}
			u.seq++
			u.pings++
			u.send(protocol.AppendPing(nil, u.seq), upReq{kind: protocol.TypePing, at: now})
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

// routeClaim asks the Router, on a cluster node, who serves CLAIM f. It
// returns false when this node does; otherwise it has relayed the claim
// to its owner, held it (QUEUED, relay2hold.go), or answered it REFUSED
// 0x03 (a relayed session asks for a name this node does not own).
// Called by the reader with srv.mu held.
func (s *session) routeClaim(now time.Time, f protocol.Frame) bool {
	r := s.srv.Router
	if r == nil {
		return false
	}
	switch rt := r.Route(f.Name, 0, s.forwarded); {
	case rt.Action == RouteServe:
		return false
	case rt.Action == RouteHold && rt.Gated:
		s.holdGated(f) // entered with the re-asserted ones (tickets.go)
		return true
	case rt.Action == RouteHold, rt.Action == RouteMoving:
		s.holdClaim(f)
		return true
	case rt.Action == RouteForward && !s.forwarded:
		if s.releasedMoving(f.Claim) {
			// Its id's earlier claim moved and was released; that RELEASE
			// still waits for the adoption (move_host.go): held until it is
			// sent, so that the owner never sees the id twice.
			s.holdClaim(f)
			return true
		}
		if s.relayClaim(now, f, rt.Addr) {
			return true
		}
	}
	s.refuse(f, protocol.CodeNotOwner)
	return true
}

// relayClaim sends CLAIM f to the owner at addr through the session's
// upstream there, and leaves a place for its answer in the outbox. now
// is when its batch was read.
func (s *session) relayClaim(now time.Time, f protocol.Frame, addr string) bool {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	if s.closing.Load() || v.ending {
		return true // nothing more is sent
	}
	rel := v.relayLocked()
	if rel.closed {
		return true
	}
	if rel.readAt.IsZero() || rel.readAt.Before(now) {
		rel.readAt = now // the session's first relayed claim
	}
	u := s.upstreamLocked(rel, addr)
	rc := u.attach(rel, f.Claim, rcPending)
	slot := &outEntry{pending: true, at: rel.readAt, up: u, claim: f.Claim}
	rel.add(v, slot)
	u.sendClaim(f, slot, rc)
	return true
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
	if i := rel.heldIndex(id); i >= 0 {
		s.srv.forgetGatedLocked(s, id, rel.held[i].Name)
		rel.held = append(rel.held[:i], rel.held[i+1:]...)
		delete(rel.rerouted, id)
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	rc := rel.claims[id]
	if rc == nil {
		return false
	}
	delete(rel.claims, id)
	if rc.state == rcMoving {
		// Queued until the new owner has adopted the claim (move_host.go).
		if !s.closing.Load() && !v.ending {
			slot := &outEntry{pending: true, at: rel.answerAt(), up: rc.up, claim: id}
			rel.add(v, slot)
			rc.move.release = slot
		}
		rel.released = append(rel.released, rc)
		return true
	}
	rc.state = rcReleasing
	if s.closing.Load() || v.ending {
		return true
	}
	now := time.Now()
	slot := &outEntry{pending: true, at: rel.answerAt(), up: rc.up, claim: id}
	rel.add(v, slot)
	rc.up.send(protocol.AppendRelease(nil, id), upReq{kind: protocol.TypeRelease, at: now, slot: slot, rc: rc})
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
// hang-up), unless release is set: the client hung up, and the claims
// are released first (RELEASE for each, written before the close), so
// each owner ends them at once, as it would a direct client's.
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
		if rc.state == rcMoving && rc.up == nil {
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
		for _, r := range u.fifo {
			if r.rc != nil {
				u.end(rel, r.rc)
			}
		}
		u.fifo = nil
	}
	clear(rel.q)
	rel.q = nil
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
		for _, id := range slices.Sorted(maps.Keys(u.claims)) {
			if st := u.claims[id].state; st == rcPending || st == rcLive {
				u.wbuf = protocol.AppendRelease(u.wbuf, id)
			}
		}
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

// AttachRelayed records that claim of version 2 session sid, which is
// not (or no longer) in this node's table, is from now on served by the
// owner at addr, through the session's upstream session there (opened
// if need be): the client's RELEASE of it goes there, the owner's pushes
// about it come back, and the loss of the upstream revokes it. It sends
// nothing: it is for a planned hand-off that has moved the claim's state
// to the owner under the upstream session (identified there by
// RelayedSession). The relay uses the same path for each claim it
// relays. It returns locktable.ErrNoSession when sid is not an open
// version 2 session, locktable.ErrClaimExists when the id is in use.
func (srv *Server) AttachRelayed(sid locktable.SessionID, claim uint32, addr string) error {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	s := srv.claims[sid]
	if s == nil || s.v2 == nil {
		return locktable.ErrNoSession
	}
	if _, err := srv.table.ClaimStatus(locktable.Key{Session: sid, Claim: locktable.ClaimID(claim)}); err == nil {
		return locktable.ErrClaimExists
	}
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.relayLocked()
	switch {
	case s.closing.Load() || v.ending || rel.closed:
		return locktable.ErrNoSession
	case rel.claims[claim] != nil:
		return locktable.ErrClaimExists
	}
	s.upstreamLocked(rel, addr).attach(rel, claim, rcLive)
	return nil
}

// DetachRelayed forgets that claim of version 2 session sid is relayed,
// without a frame to the client or the owner, and returns the owner's
// address: for a planned hand-off that has moved the claim's state away
// from that owner (to this node, or to another, then AttachRelayed). It
// returns locktable.ErrNoSession or locktable.ErrNoClaim.
func (srv *Server) DetachRelayed(sid locktable.SessionID, claim uint32) (string, error) {
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

// RelayedSession returns the session of this node that node origin opened
// to relay the claims of its client session clientSession (a version 2
// hop header), if it is open.
func (srv *Server) RelayedSession(origin string, clientSession uint64) (locktable.SessionID, bool) {
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

// RelayedClaims returns the number of version 2 claims this node relays
// to their owners now, and of the upstream sessions that carry them.
func (srv *Server) RelayedClaims() (claims, upstreams int64) {
	return srv.relayedClaims.Load(), srv.upstreams.Load()
}
