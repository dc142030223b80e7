package server

import (
	"errors"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Held version 2 claims (docs/design/2026-12-07-cluster-relay.md, "Relaying a version 2
// session"). When Route says hold (the name's owner is warming up, has no
// epoch for it yet, or there is no ring), a waiting CLAIM is answered
// QUEUED and kept out of every table; so is one whose upstream to the
// owner cannot be opened (holdUnopened). Every holdRetry the node asks Route
// again, in arrival order: serve enters the claim in this node's table (a
// grant is pushed as PROMOTED), forward relays it to the owner (whose
// GRANTED is pushed as PROMOTED, whose QUEUED says nothing new, whose
// refusal is pushed as REVOKED), anything else revokes it with 0x03. A
// no-wait CLAIM on a held name is answered BUSY. Nothing is granted
// anywhere while the name is held. A queued claim that its owner revokes
// because the name moved is held again here (rehold). The rules are
// clustercore's (relay2_route.go); this file holds the timer and the
// locks.

// holdClaim answers CLAIM f QUEUED and holds it. Called by the reader
// with srv.mu held; rel.held, rel.holding and rel.rerouted are guarded
// by srv.mu (relayState).
func (s *session) holdClaim(f protocol.Frame) {
	v := s.v2
	v.omu.Lock()
	rel := v.relayLocked()
	closed := !s.relayOpen(rel)
	v.omu.Unlock()
	if closed {
		return
	}
	if !clustercore.Relay2Holds(f) {
		v.appendOut(s, func(b []byte) []byte { return protocol.AppendBusy(b, f.Claim) })
		return
	}
	rel.held = append(rel.held, f)
	v.appendOut(s, func(b []byte) []byte { return v.appendQueued(b, f.Claim, heldTicket(f)) })
	s.scheduleHeld(rel, 1)
}

// scheduleHeld starts the timer that asks again for the held claims
// when n were held and it does not run (clustercore.Relay2Retry). Called
// with srv.mu held.
func (s *session) scheduleHeld(rel *relayState, n int) {
	if hold, _, _ := (clustercore.Relay2Retry{Held: n, Holding: rel.holding}).Start(); hold {
		rel.holding = true
		time.AfterFunc(holdRetry, s.retryHeld)
	}
}

// hold holds claim f, once: an id held already keeps its place (a failed
// upstream may hand back a claim a retry holds again).
func (rel *relayState) hold(f protocol.Frame) bool {
	if rel.heldIndex(f.Claim) >= 0 {
		return false
	}
	rel.held = append(rel.held, f)
	return true
}

// unhold drops held claim id, every copy, and returns the held claims.
func (rel *relayState) unhold(id uint32) []protocol.Frame {
	return slices.DeleteFunc(rel.held, func(f protocol.Frame) bool { return f.Claim == id })
}

// holdsName reports whether a claim on name is held (rel may be nil: a
// session that never relayed holds none). Called with srv.mu held.
func (rel *relayState) holdsName(name string) bool {
	return rel != nil && slices.ContainsFunc(rel.held, func(f protocol.Frame) bool { return f.Name == name })
}

// heldIndex returns the index of held claim id, or -1.
func (rel *relayState) heldIndex(id uint32) int {
	for i, f := range rel.held {
		if f.Claim == id {
			return i
		}
	}
	return -1
}

// retryHeld asks Route again for every held claim of the session.
func (s *session) retryHeld() {
	srv, v := s.srv, s.v2
	rel := v.rel.Load()
	srv.mu.Lock()
	v.omu.Lock()
	closed := !s.relayOpen(rel)
	v.omu.Unlock()
	if closed {
		for _, f := range rel.held {
			srv.forgetGatedLocked(s, f.Claim, f.Name)
		}
		rel.held, rel.holding, rel.rerouted = nil, false, nil
		srv.mu.Unlock()
		return
	}
	ds, others := s.routeHeldLocked(rel, time.Now())
	if len(rel.held) > 0 {
		time.AfterFunc(holdRetry, s.retryHeld)
	} else {
		rel.holding = false
	}
	srv.mu.Unlock()
	v.omu.Lock()
	rel.kickAll()
	v.omu.Unlock()
	for _, o := range others {
		if orel := o.v2.rel.Load(); orel != nil {
			o.v2.omu.Lock()
			orel.kickAll()
			o.v2.omu.Unlock()
		}
		ds = append(ds, delivery{to: o, flush: true})
	}
	srv.deliver(append(ds, delivery{to: s, flush: true}))
}

// routeHeldLocked routes the held claims again: entered into this
// node's table (with their name's gated claims of other sessions,
// others, when a warm-up ends), relayed, kept held, or revoked. Called
// with srv.mu held.
func (s *session) routeHeldLocked(rel *relayState, now time.Time) (ds []delivery, others []*session) {
	srv, v := s.srv, s.v2
	var entered map[uint32]bool
	keep := rel.held[:0]
	for _, f := range rel.held {
		if entered[f.Claim] {
			continue // entered the table with its name's gated claims
		}
		rt := srv.Router.Route(f.Name, 0, s.forwarded)
		route := claimRoute(rt)
		if rr, ok := rel.rerouted[f.Claim]; ok {
			if rr.Waits(route, rt.Addr, now) {
				keep = append(keep, f) // this node's ring is behind the owner's
				continue
			}
			delete(rel.rerouted, f.Claim)
		}
		if refs, ok := srv.gatedHeld[f.Name]; ok && rt.Action != RouteHold {
			// The warm-up of f's name is over: every claim held during
			// it, on any session, enters now, in ticket order (tickets.go).
			delete(srv.gatedHeld, f.Name)
			if rt.Action == RouteServe {
				var eds []delivery
				eds, others, entered = s.enterGated(now, f.Name, refs, others, entered)
				ds = append(ds, eds...)
				if entered[f.Claim] {
					continue
				}
			}
		}
		switch clustercore.Relay2ClaimWay(route, s.forwarded, nil, nil) {
		case clustercore.Relay2Serve:
			ds = append(ds, s.claimHeld(now, f)...)
		case clustercore.Relay2Relay:
			s.relayHeld(f, rt.Addr)
		case clustercore.Relay2HoldGated:
			// Held for another reason first (an owner out of reach
			// that was removed since): it enters with the others.
			srv.recordGatedLocked(s, f)
			keep = append(keep, f)
		case clustercore.Relay2Hold:
			keep = append(keep, f)
		default:
			v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, f.Claim, protocol.CodeNotOwner, "") })
		}
	}
	clear(rel.held[len(keep):])
	rel.held = keep
	for id := range rel.rerouted {
		if rel.heldIndex(id) < 0 {
			delete(rel.rerouted, id) // entered, relayed or revoked
		}
	}
	return ds, others
}

// claimHeld enters held claim f into this node's table, which now serves
// its name; the client, told QUEUED, hears PROMOTED when it is granted.
// Called with srv.mu held.
func (s *session) claimHeld(now time.Time, f protocol.Frame) []delivery {
	srv, v := s.srv, s.v2
	st, res, err := srv.table.Claim(now, s.id, locktable.ClaimID(f.Claim), locktable.ClaimRequest{
		Name: f.Name, Mode: locktable.Mode(f.Mode), Limit: f.Limit, Ticket: heldTicket(f), Value: f.Value})
	var ds []delivery
	if err == nil {
		if st.State == locktable.Waiting {
			srv.queued[protocol.Version2]++
		}
		ds = srv.commit(now, res)
	}
	if errors.Is(err, locktable.ErrClaimExists) { // a second copy: a bookkeeping slip to find
		srv.Logger.Warn("a held claim was in the table already; its second copy is dropped",
			"session", s.id, "claim", f.Claim, "lock", f.Name)
	}
	switch clustercore.Relay2HeldEntered(st.State == locktable.Owner, err) {
	case clustercore.Relay2HeldRevoked:
		code := claimErrorCode(err)
		v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, f.Claim, code, "") })
	case clustercore.Relay2HeldPromoted:
		v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendPromoted(b, f.Claim, st.Token) })
	}
	return ds
}

// relayHeld relays held claim f to its owner at addr: the owner's answer
// is not an answer to the client, told QUEUED already (handle).
func (s *session) relayHeld(f protocol.Frame, addr string) {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.rel.Load()
	if !s.relayOpen(rel) {
		return
	}
	u := s.upstreamLocked(rel, addr)
	u.sendClaim(clustercore.Relay2Late(f), nil, u.attach(rel, f.Claim, clustercore.ClaimPending))
}

// heldTicket returns the queue ticket a held claim came with
// (clustercore.Relay2HeldTicket).
func heldTicket(f protocol.Frame) uint64 { return clustercore.Relay2HeldTicket(f) }

// holdUnopened settles CLAIM r of upstream u, which could not be opened:
// the client hears what clustercore.Claim.Unopened says, and a claim
// still wanted is held, as if Route had said hold: retried every
// holdRetry, relayed once its owner can be reached. It returns 1 if it
// held the claim. Called by fail with srv.mu and omu held, u dead.
func (u *upstream) holdUnopened(rel *relayState, r upReq) int {
	s := u.s
	f := r.claim()
	answer, want := r.rc.Unopened(f)
	if r.slot != nil {
		r.slot.B, r.slot.Pending = answer, false
	}
	u.end(rel, r.rc)
	if !want || !s.relayOpen(rel) || !rel.hold(f) {
		return 0
	}
	return 1
}

// heldAnswer applies the owner's answer to a held claim relayed late,
// whose client was told QUEUED (clustercore.Claim.HeldAnswer). Called
// with omu held.
func (u *upstream) heldAnswer(rel *relayState, v *v2conn, r upReq, f protocol.Frame) {
	push, end := r.rc.HeldAnswer(f)
	if push != nil {
		u.push(rel, v, &outEntry{B: push, Up: u, Claim: f.Claim})
	}
	if end {
		u.end(rel, r.rc)
	}
}

// rehold holds again the claims of u that its owner revoked because their
// names moved (a planned change committed while the owner held or queued
// them: it exported the names before they came): retryHeld relays each to
// the name's owner in this node's ring. A claim the client released, or
// that u's end settled, meanwhile is left as it is.
func (u *upstream) rehold(rcs []*relayedClaim) {
	s := u.s
	srv, v := s.srv, s.v2
	srv.mu.Lock()
	defer srv.mu.Unlock()
	v.omu.Lock()
	rel := v.rel.Load()
	closed := !s.relayOpen(rel)
	now := time.Now()
	n := 0
	for _, rc := range rcs {
		if closed || rc.up != u || u.claims[rc.ID] != rc || rc.State != clustercore.ClaimLive {
			continue
		}
		u.end(rel, rc)
		f, why := clustercore.Relay2Rehold(&rc.Claim, u.addr, now)
		if !rel.hold(f) {
			continue
		}
		if rel.rerouted == nil {
			rel.rerouted = map[uint32]clustercore.Relay2Reroute{}
		}
		rel.rerouted[rc.ID] = why
		n++
	}
	v.omu.Unlock()
	s.scheduleHeld(rel, n)
	if n > 0 {
		srv.Logger.Info("queued claims revoked by an owner that no longer owns their names; claiming them at the new owner",
			"owner_addr", u.addr, "session", s.id, "claims", n)
	}
}
