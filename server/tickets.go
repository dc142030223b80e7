package server

import "github.com/batonlock/baton/protocol"

// Queue tickets (docs/protocol.md, "v2 queue tickets";
// docs/high-availability.md, rule 5). A version 2 session whose HELLO
// sets HelloTickets is answered WELCOME with WelcomeTickets, and every
// QUEUED it is sent carries the claim's queue ticket when the claim has
// one in this node's table (or came with one): a claim queued here, one
// adopted from a kept session, one re-asserted with a ticket. A claim
// held out of the table (a name warming up, an owner out of reach) that
// came without a ticket is told QUEUED without one. Sessions that did not
// ask get the plain QUEUED of the earlier revision.
//
// A re-assertion of a queued claim with its ticket (CLAIM with
// ClaimReassert and ClaimTicket) on a name this node took over is held
// for the warm-up like any claim there (resume.go, takeOver), keeping its
// ticket; when the name is served, the table puts it at its old place:
// ahead of the claims that arrived without a prior owner's ticket, in
// ticket order among those that did (locktable.ClaimRequest.Ticket).

// appendQueued appends the QUEUED of claim, with its ticket if the
// session asked for tickets.
func (v *v2conn) appendQueued(b []byte, claim uint32, ticket uint64) []byte {
	if !v.tickets {
		ticket = 0
	}
	return protocol.AppendQueuedTicket(b, claim, ticket)
}
