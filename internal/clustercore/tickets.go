package clustercore

import "slices"

// The claims held during their names' warm-up (docs/protocol-v2-tickets.md, "v2
// queue tickets"; docs/design/2026-12-01-ha-failover-design.md, rule 5). Each session asks
// about its held claims on its own timer, so the first to ask once the
// name is served would be granted, whatever its place; instead every
// claim held during a name's warm-up is recorded under the name, and the
// first session to find the name served enters them all at once
// (locktable.Enter), which puts each at its place: the ticketed ones
// ahead of those that arrived without a prior owner's ticket, in ticket
// order, before it grants anyone. Package server (server/tickets.go)
// reads the sessions' held claims and makes the table call.

// TicketRef is a claim held during the warm-up of its name: its session
// (an opaque handle S of the caller's), its id, and the queue ticket it
// came with (0: none).
type TicketRef[S comparable] struct {
	Session S
	Claim   uint32
	Ticket  uint64
}

// TicketGates are the claims held during their names' warm-up, by name.
// The caller takes a name's claims out (delete) when the first of its
// sessions finds the name no longer held, to enter them together.
type TicketGates[S comparable] map[string][]TicketRef[S]

// Record records r under name, once per session and claim id.
func (g *TicketGates[S]) Record(name string, r TicketRef[S]) {
	refs := (*g)[name]
	if slices.ContainsFunc(refs, r.same) {
		return
	}
	if *g == nil {
		*g = TicketGates[S]{}
	}
	(*g)[name] = append(refs, r)
}

// Forget drops claim id of session s, held no more, from the claims
// recorded under name: the entry would skip it anyway (TicketRef.Enters),
// but a name whose warm-up no session sees end must not keep its
// sessions.
func (g TicketGates[S]) Forget(name string, s S, claim uint32) {
	refs, ok := g[name]
	if !ok {
		return
	}
	gone := TicketRef[S]{Session: s, Claim: claim}
	refs = slices.DeleteFunc(refs, gone.same)
	if len(refs) == 0 {
		delete(g, name)
	} else {
		g[name] = refs
	}
}

func (r TicketRef[S]) same(o TicketRef[S]) bool { return r.Session == o.Session && r.Claim == o.Claim }

// Enters reports whether r still stands for a claim to enter for name:
// its session is open, and holds a claim with r's id (held) on that name
// (heldName) with r's ticket (heldTicket); not one ended, released, or
// another claim with its id.
func (r TicketRef[S]) Enters(name string, open, held bool, heldName string, heldTicket uint64) bool {
	return open && held && heldName == name && heldTicket == r.Ticket
}
