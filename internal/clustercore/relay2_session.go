package clustercore

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// The relaying part of a version 2 session (docs/design/2026-12-07-cluster-relay.md,
// "Relaying a version 2 session"): what becomes of a RELEASE, how far
// the session's upstreams protect its claims, which owners are asked
// for queue tickets and values, and when a planned hand-off may attach
// a claim to an upstream.

// Relay2Release is what becomes of a RELEASE on a relaying session
// (Relay2ReleaseOf).
type Relay2Release uint8

const (
	// Relay2ReleaseHere: not a relayed claim; this node's table answers.
	Relay2ReleaseHere Relay2Release = iota
	// Relay2ReleaseHeld: a held claim is dropped, and answered as a
	// claim not in use (nothing was granted anywhere).
	Relay2ReleaseHeld
	// Relay2ReleaseAfterAdoption: the claim moves to a new owner; its
	// RELEASE, and its answer, wait until the new owner has adopted it.
	Relay2ReleaseAfterAdoption
	// Relay2ReleaseRelayed: RELEASE goes on the claim's upstream, whose
	// RELEASED answers it.
	Relay2ReleaseRelayed
)

// Relay2ReleaseOf decides what becomes of the RELEASE of a claim that
// is held (held) or relayed (c, nil if not). The id is free at once, as
// on the owner.
func Relay2ReleaseOf(held bool, c *Claim) Relay2Release {
	switch {
	case held:
		return Relay2ReleaseHeld
	case c == nil:
		return Relay2ReleaseHere
	case c.State == ClaimMoving:
		return Relay2ReleaseAfterAdoption
	}
	c.State = ClaimReleasing
	return Relay2ReleaseRelayed
}

// Relay2Confirmation is how far the upstreams that protect a session's
// claims have been confirmed (Confirmation): one with a claim, or one
// that may hold range locks, protects them; a claim or key moving and
// not adopted yet (blocked) is an upstream not confirmed yet. up gives
// an upstream's confirmation and whether it protects anything.
func Relay2Confirmation[U any](blocked bool, ups map[string]U, up func(U) (confirmed time.Time, protects bool)) Confirmation {
	var c Confirmation
	if blocked {
		c.Block()
	}
	for _, u := range ups {
		c.Upstream(up(u))
	}
	return c
}

// UpstreamRefusals are the owners, by address, that refused an upstream
// HELLO asking for queue tickets or values (UpstreamReopen: a node of the
// earlier revision): a session's later upstreams to them open without
// asking, and the client gets no ticket nor value support there.
type UpstreamRefusals map[string]bool

// Asks says what an upstream to addr asks for: what the client's
// session asked for (it then understands the answers, passed on as the
// owner wrote them), unless the owner refused them before.
func (r UpstreamRefusals) Asks(addr string, tickets, values bool) (asksTickets, asksValues bool) {
	refused := r[addr]
	return tickets && !refused, values && !refused
}

// Refused records that the owner at addr refused the features asked.
func (r *UpstreamRefusals) Refused(addr string) {
	if *r == nil {
		*r = UpstreamRefusals{}
	}
	(*r)[addr] = true
}

// UpstreamReopenBytes returns what goes on the new connection of an
// upstream whose owner refused the features its HELLO asked for: the new
// opening (hello, asking for nothing) and everything sent since the old
// one (unopened, whose first helloLen bytes were the old opening), in
// order; the requests keep their places in the ledger.
func UpstreamReopenBytes(hello, unopened []byte, helloLen int) []byte {
	return append(hello, unopened[helloLen:]...)
}

// Relay2Attach decides whether a planned hand-off may attach claim id
// of a version 2 session to an upstream (the claim's state moved to its
// owner under that upstream): open says the session goes on, inTable
// that this node's table has the id, relayed that the session relays it
// already.
func Relay2Attach(open, inTable, relayed bool) error {
	switch {
	case inTable:
		return locktable.ErrClaimExists
	case !open:
		return locktable.ErrNoSession
	case relayed:
		return locktable.ErrClaimExists
	}
	return nil
}

// Relay2HeldEntry is what the client of a held claim, told QUEUED, hears
// when this node's table takes the claim (Relay2HeldEntered).
type Relay2HeldEntry uint8

const (
	// Relay2HeldQuiet: nothing (queued here; or the session is ending).
	Relay2HeldQuiet Relay2HeldEntry = iota
	// Relay2HeldPromoted: PROMOTED with the grant's token.
	Relay2HeldPromoted
	// Relay2HeldRevoked: REVOKED with the refusal's code.
	Relay2HeldRevoked
)

// Relay2HeldEntered decides what the client hears when this node's table
// answers held claim's Claim with owner (granted) or err: a refusal is
// pushed as REVOKED, except when the session or table is ending
// (ErrNoSession, ErrShutdown), whose end tells it, and when the table
// has the claim already (ErrClaimExists).
func Relay2HeldEntered(owner bool, err error) Relay2HeldEntry {
	switch {
	case errors.Is(err, locktable.ErrShutdown) || errors.Is(err, locktable.ErrNoSession):
		return Relay2HeldQuiet
	case errors.Is(err, locktable.ErrClaimExists):
		// A second copy of a claim the table has (Relay2HeldAgain): its
		// client heard the table's answers; a REVOKED would make it stop
		// believing in a claim the table keeps.
		return Relay2HeldQuiet
	case err != nil:
		return Relay2HeldRevoked
	case owner:
		return Relay2HeldPromoted
	}
	return Relay2HeldQuiet
}
