package server

import (
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Queue tickets: a version 2 session that asks for them (HelloTickets) is
// told each queued claim's ticket in QUEUED, and a queued claim re-asserted
// with its ticket on a name this node took over keeps its place: every
// claim held during the warm-up is entered together, in the order
// internal/clustercore's TicketGates describes.
// Protocol: docs/protocol-v2-tickets.md; design:
// docs/design/2026-12-01-ha-queue-tickets.md#serverticketsgo.

// gatedRef is a claim held during the warm-up of its name (holdGated).
type gatedRef = clustercore.TicketRef[*session]

// holdGated holds claim f on a name that is warming up after a
// take-over, and records it under its name in srv.gatedHeld, for the
// first session to find the name served to enter with the others
// (enterGated). Called with srv.mu held.
func (s *session) holdGated(f protocol.Frame) {
	s.holdClaim(f)
	rel := s.v2.rel.Load()
	if rel == nil || rel.heldIndex(f.Claim) < 0 {
		return // not held: answered BUSY, or the session is closing
	}
	s.srv.recordGatedLocked(s, f)
}

// recordGatedLocked records held claim f of s under its name, once.
// Called with srv.mu held.
func (srv *Server) recordGatedLocked(s *session, f protocol.Frame) {
	srv.gatedHeld.Record(f.Name, gatedRef{Session: s, Claim: f.Claim, Ticket: heldTicket(f)})
}

// forgetGatedLocked drops claim id of s, held no more, from the claims
// recorded under name (holdGated). Called with srv.mu held.
func (srv *Server) forgetGatedLocked(s *session, id uint32, name string) {
	srv.gatedHeld.Forget(name, s, id)
}

// enterGated enters into the table, now that name is served, the
// claims refs recorded while it warmed up that are still held on their
// sessions, all in one step (locktable.Enter): those with a ticket at
// their places, the others behind, and only then is anyone granted. A
// grant is pushed as PROMOTED, a claim-level refusal as REVOKED, as
// claimHeld does. Claims of s (whose retryHeld is running) are reported
// in entered, for it to drop from its held claims; those of other
// sessions are dropped from theirs here, and the sessions added to
// others, to be flushed. Called with srv.mu held.
func (s *session) enterGated(now time.Time, name string, refs []gatedRef, others []*session, entered map[uint32]bool) ([]delivery, []*session, map[uint32]bool) {
	srv := s.srv
	var es []locktable.Entry
	var who []*session
	for _, r := range refs {
		v := r.Session.v2
		rel := v.rel.Load()
		if rel == nil {
			continue
		}
		v.omu.Lock()
		open := !rel.closed && !r.Session.closing.Load() && !v.ending
		v.omu.Unlock()
		i := rel.heldIndex(r.Claim)
		var f protocol.Frame
		if i >= 0 {
			f = rel.held[i]
		}
		if !r.Enters(name, open, i >= 0, f.Name, heldTicket(f)) {
			continue
		}
		if r.Session == s {
			if entered == nil {
				entered = map[uint32]bool{}
			}
			entered[r.Claim] = true
		} else {
			rel.held = rel.unhold(r.Claim)
			if !slices.Contains(others, r.Session) {
				others = append(others, r.Session)
			}
		}
		es = append(es, locktable.Entry{Session: r.Session.id, Claim: locktable.ClaimID(f.Claim), Req: locktable.ClaimRequest{
			Name: f.Name, Mode: locktable.Mode(f.Mode), Limit: f.Limit, Ticket: r.Ticket, Value: f.Value}})
		who = append(who, r.Session)
	}
	res, errs := srv.table.Enter(now, es)
	for i, err := range errs {
		o, claim := who[i], uint32(es[i].Claim)
		switch clustercore.TicketEntryFor(err) {
		case clustercore.TicketEntered:
			srv.queued[protocol.Version2]++ // a grant below counts it out
		case clustercore.TicketRevoked:
			code := claimErrorCode(err)
			o.v2.appendPushOut(o, func(b []byte) []byte { return protocol.AppendRevoked(b, claim, code, "") })
		}
	}
	return srv.commit(now, res), others, entered
}

// appendQueued appends the QUEUED of claim, with its ticket if the
// session asked for tickets.
func (v *v2conn) appendQueued(b []byte, claim uint32, ticket uint64) []byte {
	if !v.tickets {
		ticket = 0
	}
	return protocol.AppendQueuedTicket(b, claim, ticket)
}
