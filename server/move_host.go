package server

import (
	"slices"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The host's side of a planned change (docs/design/2026-12-02-cluster-handoff.md, "Continuing
// version 2 claims across a planned change"): the node the client's
// session is on, the prior owner itself or a relaying node. Its session
// marks the claims that left their owner moving (startMoving, or MOVED
// read on an upstream: movedFrame), holds back every answer until they
// are adopted, and sends each one's adoption (a re-assertion with the
// move secret) to the name's new owner once its ring routes the name
// there, or adopts it in its own table when that owner is this node; a
// claim not adopted in time, or refused, is revoked. The same path
// re-asserts claims whose owner died (failOver). The prior owner's side
// is in move_export.go, the new owner's in move_install.go.

// moveRetry is how often a host asks again to adopt its moving claims
// and keys (clustercore.MoveRetry).
const moveRetry = clustercore.MoveRetry

// moveInfo is what a host keeps of a moving claim to adopt it: what
// the core decides with (clustercore.Move), and the slot of the client's
// RELEASE, queued until the claim is adopted.
type moveInfo struct {
	clustercore.Move
	release *outEntry
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
		rc := &relayedClaim{Claim: clustercore.Claim{ID: uint32(c.cs.Claim), State: clustercore.ClaimMoving},
			move: &moveInfo{Move: clustercore.Move{Name: c.name, Mode: protocol.Mode(c.cs.Mode), Limit: c.limit, Token: c.cs.Token, Since: now}}}
		rel.claims[rc.ID] = rc
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
	if rel := v.rel.Load(); rel != nil {
		rel.scheduleMoving(s)
	}
}

// scheduleMoving has the session's moving claims retried after
// moveRetry, unless a retry is already due (clustercore.HostRetryDue).
// Called with omu held.
func (rel *relayState) scheduleMoving(s *session) {
	if clustercore.HostRetryDue(rel.moving > 0, rel.moveTimer, rel.closed) {
		rel.moveTimer = true
		time.AfterFunc(moveRetry, s.retryMoving)
	}
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
	rel.scheduleMoving(s)
	v.omu.Unlock()
	srv.mu.Unlock()
	srv.deliverAll(ds)
	if gaveUp > 0 {
		srv.Logger.Warn("moving claims not adopted by their new owner in half their lease; given up", "session", s.id, "claims", gaveUp)
	}
	srv.deliver([]delivery{{to: s, flush: true}})
}

// movingOver reports whether the moving claims of s are no longer
// retried (clustercore.HostMovingOver). Called with omu held.
func (rel *relayState) movingOver(s *session) bool {
	return clustercore.HostMovingOver(rel.closed, s.closing.Load() || s.v2.ending, rel.finishing)
}

// unsentMovingNames returns the names of the moving claims (released or
// not) whose adoption is not in flight. Called with omu held.
func (rel *relayState) unsentMovingNames() []string {
	var names []string
	for _, rc := range slices.Concat(mapValues(rel.claims), rel.released) {
		if clustercore.HostAwaits(rc.State, rc.up != nil) {
			names = append(names, rc.move.Name)
		}
	}
	return names
}

// movingRoutes is where this node routes the names of moving claims now.
type movingRoutes struct {
	routes map[string]Route
	ring   uint64 // this node's ring version
}

// routeMoving asks the Router about each name, without a lock held.
func (srv *Server) routeMoving(names []string) movingRoutes {
	r := movingRoutes{routes: map[string]Route{}}
	if rv, ok := srv.Router.(ringVersioner); ok {
		r.ring = rv.RingVersion()
	}
	for _, name := range names {
		r.routes[name] = srv.Router.Route(name, 0, false)
	}
	return r
}

// moveRoute is what Route rt says of a moving name or key
// (clustercore.HostMoveRoute).
func moveRoute(rt Route) clustercore.MoveRoute {
	return clustercore.HostMoveRoute(clustercore.HostRoute{Forward: rt.Action == RouteForward,
		Serve: rt.Action == RouteServe, Gated: rt.Action == RouteHold && rt.Gated})
}

// sendAdoptionsLocked takes the next step (clustercore.Move.Step) for
// each moving claim whose adoption is not in flight: it gives it up,
// sends its adoption on an upstream to the owner there, or returns it
// to be adopted here (here: the name moved to this node; takeHere: a
// failed-over claim whose name this node took over). Called with srv.mu
// and omu held.
func (s *session) sendAdoptionsLocked(rel *relayState, now time.Time, routes movingRoutes) (here, takeHere []*relayedClaim, gaveUp int) {
	for _, rc := range slices.Concat(mapValues(rel.claims), rel.released) {
		if !clustercore.HostAwaits(rc.State, rc.up != nil) {
			continue
		}
		rt, routed := routes.routes[rc.move.Name]
		route := clustercore.MoveRouteNowhere
		if routed {
			route = moveRoute(rt)
		}
		switch rc.move.Step(now, s.v2.lease, route) {
		case clustercore.MoveGiveUp:
			rel.giveUp(s, rc)
			gaveUp++
		case clustercore.MoveTakeOver:
			takeHere = append(takeHere, rc)
		case clustercore.MoveAdoptHere:
			here = append(here, rc)
		case clustercore.MoveSend:
			s.sendAdoptLocked(rel, rc, rt.Addr, routes.ring)
		}
	}
	return here, takeHere, gaveUp
}

// sendAdoptLocked sends the adoption of moving claim rc to the owner at
// addr on the session's upstream there. Called with srv.mu and omu held.
func (s *session) sendAdoptLocked(rel *relayState, rc *relayedClaim, addr string, ring uint64) {
	u := s.upstreamLocked(rel, addr)
	rc.up = u
	u.claims[rc.ID] = rc
	o := clustercore.MoveOrigin{Session: uint64(s.id), Node: s.srv.NodeID, Secret: rel.moveSecret, Ring: ring}
	u.sendClaim(rc.move.Adoption(&rc.Claim, o, u.values, u.tickets), nil, rc)
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
	slices.SortFunc(out, func(a, b *relayedClaim) int { return int(a.ID) - int(b.ID) })
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
	var since []time.Time
	for _, rc := range mapValues(rel.claims) {
		if rc.State == clustercore.ClaimMoving {
			moving = append(moving, rc)
			since = append(since, rc.move.Since)
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
		s.relayRelease(rc.ID)
	}
	srv.mu.Unlock()
	s.retryMoving() // it goes on by its timer while claims move
	until := clustercore.HostFinishUntil(since, v.lease)
	for {
		v.omu.Lock()
		left := 0
		for _, rc := range moving {
			if rc.State != clustercore.ClaimEnded {
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

// giveUp ends moving claim rc with what the client is told
// (clustercore.GiveUpAnswer). The REVOKED goes right after the last
// frame about the claim still in the outbox, else first, as fail places
// the REVOKED of a lost upstream: the answers waiting there were held
// back because this claim was not confirmed after their requests were
// read, and the client must hear of its loss before they move its
// anchor. Called with omu held.
func (rel *relayState) giveUp(s *session, rc *relayedClaim) {
	rel.moved(rc)
	b := clustercore.GiveUpAnswer(rc.ID, rc.move.release != nil)
	if rc.move.release != nil {
		rc.move.release.B, rc.move.release.Pending = b, false
	} else {
		s.v2.out = rel.box.GiveUp(s.v2.out, &outEntry{B: b, Claim: rc.ID}, rel.confirmation())
	}
	rel.endMoved(s, rc)
}

// failOver marks live claim rc, whose upstream failed (fail), moving
// (clustercore.Claim.FailOver): it is re-asserted at the name's next
// owner by retryMoving, with the current ring and this node's origin;
// the owner that took the name over installs it when no conflicting
// claim holds (resume.go, takeOver). Until then it counts as an upstream
// not confirmed. Called by fail with omu held, rc taken off its dead
// upstream.
func (rel *relayState) failOver(rc *relayedClaim, now time.Time, lease time.Duration) {
	if !rel.hasMoveSecret {
		rel.moveSecret, rel.moveHash = newSecret()
		rel.hasMoveSecret = true
	}
	var confirmed time.Time
	if u := rc.up; u != nil {
		confirmed = u.led.Confirmed()
		if u.claims[rc.ID] == rc {
			delete(u.claims, rc.ID)
		}
	}
	rc.up = nil
	rc.move = &moveInfo{Move: rc.FailOver(now, lease, confirmed)}
	rel.moving++
}

// moved records that rc no longer moves. Called with omu held.
func (rel *relayState) moved(rc *relayedClaim) {
	if rc.State == clustercore.ClaimMoving {
		rel.moving--
	}
}

// endMoved forgets rc after its move ended. Called with omu held.
func (rel *relayState) endMoved(s *session, rc *relayedClaim) {
	if rc.State == clustercore.ClaimEnded {
		return
	}
	if rc.up != nil {
		rc.up.end(rel, rc)
	} else {
		rc.State = clustercore.ClaimEnded
		if rel.claims[rc.ID] == rc {
			delete(rel.claims, rc.ID)
		}
		s.srv.relayedClaims.Add(-1)
	}
	if i := slices.Index(rel.released, rc); i >= 0 {
		rel.released = slices.Delete(rel.released, i, i+1)
	}
}

// adoptAnswer applies N's answer f to the adoption r of moving claim
// r.rc (clustercore.Move.AdoptAnswer). Called with omu held.
func (u *upstream) adoptAnswer(rel *relayState, v *v2conn, r upReq, f protocol.Frame) {
	rc := r.rc
	switch rc.move.AdoptAnswer(f) {
	case clustercore.Adopted:
		rel.moved(rc)
		slot := rc.move.release
		push, release := rc.move.HostAdopted(&rc.Claim, f, slot != nil)
		if push != nil {
			u.push(rel, v, &outEntry{B: push, Up: u, Claim: rc.ID})
		}
		if release != nil {
			if i := slices.Index(rel.released, rc); i >= 0 {
				rel.released = slices.Delete(rel.released, i, i+1)
			}
			slot.Up = u
			u.send(release, upReq{Sent: clustercore.Sent{Kind: protocol.TypeRelease, At: time.Now()}, slot: slot, rc: rc})
		}
	case clustercore.AdoptNotYet: // asked again by retryMoving
		delete(u.claims, rc.ID)
		rc.up = nil
		rel.scheduleMoving(u.s)
	default:
		rel.giveUp(u.s, rc)
	}
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
		if rc.ID == id && rc.State == clustercore.ClaimMoving {
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
	if r, ok := u.led.Head(); ok && r.rc != nil && clustercore.HostMovedAnswers(r.Kind, &r.rc.Claim, f.Claim) {
		u.led.Pop()
		return true
	}
	rc := u.claims[f.Claim]
	if rc == nil {
		return true // a claim already ended here: nothing to do
	}
	switch fate, revoke := rc.Moved(); fate {
	case clustercore.MovedStray:
		return false
	case clustercore.MovedLost:
		if revoke != nil {
			u.push(rel, v, &outEntry{B: revoke, Up: u, Claim: rc.ID})
		}
		u.end(rel, rc)
		return true
	}
	m, keepRelease := rc.HostStartMove(time.Now())
	mi := &moveInfo{Move: m}
	if keepRelease {
		inFlight := u.led.InFlight()
		for i := range inFlight {
			if r := &inFlight[i]; r.Kind == protocol.TypeRelease && r.rc == rc && r.slot != nil {
				mi.release, r.slot = r.slot, nil
				mi.release.Up = nil
				rc.HostKeptRelease()
				break
			}
		}
		rel.released = append(rel.released, rc)
	}
	delete(u.claims, rc.ID)
	rc.up, rc.move = nil, mi
	rel.moving++
	rel.scheduleMoving(u.s)
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
// design's new owner is the relaying node itself. It does what the core
// decides (clustercore.Move.TakeOverHere): a held claim enters this
// session's own table entry with its old token; a queued one is held
// for the warm-up (retryHeld). Called with srv.mu held, not omu.
func (s *session) takeOverHereLocked(now time.Time, rc *relayedClaim) takenHere {
	srv, mi := s.srv, rc.move
	switch how, f := mi.TakeOverHere(rc.ID, mi.release != nil); how {
	case clustercore.HereNothing:
		return takenHere{err: locktable.ErrNoClaim} // released meanwhile: nothing to continue
	case clustercore.HereHold:
		rel := s.v2.rel.Load()
		rel.hold(f)
		srv.recordGatedLocked(s, f)
		if !rel.holding {
			rel.holding = true
			time.AfterFunc(holdRetry, s.retryHeld)
		}
		return takenHere{}
	}
	_, res, err := srv.table.Reassert(now, s.id, locktable.ClaimID(rc.ID), locktable.ClaimRequest{
		Name: mi.Name, Mode: locktable.Mode(mi.Mode), Limit: mi.Limit, Value: rc.Req.Value}, mi.Token)
	if err != nil {
		return takenHere{err: err}
	}
	return takenHere{ds: srv.commit(now, res)}
}

// takenHere updates the session after takeOverHereLocked: the claim is
// no longer relayed (it is in this node's table, or held), or it is
// given up. Called with omu held.
func (rel *relayState) takenHere(s *session, rc *relayedClaim, t takenHere) {
	if rc.State != clustercore.ClaimMoving {
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
	st, err := srv.table.Adopt(now, o, locktable.ClaimID(rc.ID), s.id)
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
		res, _ := srv.table.Release(now, locktable.Key{Session: s.id, Claim: locktable.ClaimID(rc.ID)})
		ds = srv.commit(now, res)
	}
	return adoptedHere{st: st, ds: ds}
}

// adoptedHere updates the session after adoptHereLocked: the claim is no
// longer relayed; a queued RELEASE is answered, a grant the client has
// not been told is pushed, and a claim the table did not have is
// revoked. Called with omu held.
func (rel *relayState) adoptedHere(s *session, rc *relayedClaim, a adoptedHere) {
	if rc.State != clustercore.ClaimMoving {
		return // ended meanwhile
	}
	if a.err != nil {
		rel.giveUp(s, rc)
		return
	}
	rel.moved(rc)
	mi := rc.move
	rel.endMoved(s, rc)
	answer, push := mi.AdoptedHere(rc.ID, mi.release != nil, a.st.State == locktable.Owner, a.st.Token)
	if answer != nil {
		mi.release.B, mi.release.Pending, mi.release.Up = answer, false, nil
	}
	if push != nil {
		rel.add(s.v2, &outEntry{B: push, Claim: rc.ID})
	}
}
