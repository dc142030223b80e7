package clustercore

import (
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// The host's side of a move (docs/cluster.md, "Continuing version 2
// claims across a planned change" and "When the owner dies"): the node
// the client's session is on, the prior owner itself or a relaying node.
// It holds back every answer while a claim moves (Confirmation.Block),
// sends each moving claim's adoption (a re-assertion with the move
// secret) to the name's new owner once its ring routes the name there,
// or adopts it in its own table when that owner is this node; a claim not
// adopted in time, or refused, is given up. The same path re-asserts the
// claims whose owner died (FailOver).

// Move is what a host keeps of a moving claim to adopt it.
type Move struct {
	Name  string
	Mode  protocol.Mode
	Limit uint32
	Token uint64    // the token the client was told; 0 when queued
	Since time.Time // when it began moving here
	// Failover: the claim's upstream failed (its owner died, or stopped
	// serving) and it is re-asserted at the name's next owner, with
	// Ticket, a queued claim's queue ticket from its owner (0: none).
	Failover bool
	Ticket   uint64
	// Believed (failover of a held claim): the end of the window in
	// which its client may still believe it holds, and its dead owner
	// cannot yet have expired it: the send time of the latest request
	// its upstream confirmed, plus 0.8 × the lease. It is re-asserted
	// only before then: after it, the old owner may have expired the
	// claim and granted the name to a client who would re-assert a newer
	// token, and be refused while it believes (internal/modelcheck's
	// failover model, -relay).
	Believed time.Time
}

// StartMove marks c moving at now, handed over by a planned change, and
// returns its move: the claim its owner exported (the prior owner's own
// session), or the one its owner said MOVED about (c's CLAIM and
// token).
func (c *Claim) StartMove(now time.Time) Move {
	c.State = ClaimMoving
	return Move{Name: c.Req.Name, Mode: c.Req.Mode, Limit: c.Req.Limit, Token: c.Token, Since: now}
}

// FailOver marks live claim c, whose upstream failed, moving at now: it
// is re-asserted at the name's next owner as a moving claim is adopted,
// with its token (a held claim) or its queue ticket (a queued one). A
// held claim's client may believe until 0.8 × lease after confirmed,
// the send time of the latest request its upstream answered (zero:
// none, no window).
func (c *Claim) FailOver(now time.Time, lease time.Duration, confirmed time.Time) Move {
	m := c.StartMove(now)
	m.Failover, m.Ticket = true, c.Ticket
	if c.Token != 0 && !confirmed.IsZero() {
		m.Believed = confirmed.Add(clientrule.GiveUpAfter(lease))
	}
	return m
}

// Expired reports whether at now a moving claim whose adoption is not
// in flight is given up: it has moved for half the lease (its client
// gives up at 0.8 of it), or past the window its client may believe in.
func (m *Move) Expired(now time.Time, lease time.Duration) bool {
	return now.Sub(m.Since) >= lease/2 || !m.Believed.IsZero() && !now.Before(m.Believed)
}

// MoveRoute is where the host's ring routes a moving claim's name (or a
// moving key) now.
type MoveRoute uint8

const (
	// MoveRouteNowhere: no node serves it yet (it is frozen, or the ring
	// has not changed here yet).
	MoveRouteNowhere MoveRoute = iota
	// MoveRouteThere: another node serves it.
	MoveRouteThere
	// MoveRouteHere: this node serves it.
	MoveRouteHere
	// MoveRouteWarming: this node took it over without its state and warms
	// up.
	MoveRouteWarming
)

// Owns reports whether r says this node owns the name: it serves it, or
// warms it up after taking it over without its state. Either way it may
// take up what was held (a hand-over's, a re-assertion's), but grants
// anew only in the first case.
func (r MoveRoute) Owns() bool { return r == MoveRouteHere || r == MoveRouteWarming }

// MoveStep is what the host does next with a moving claim whose
// adoption is not in flight.
type MoveStep uint8

const (
	MoveWait      MoveStep = iota // ask again later
	MoveGiveUp                    // given up (GiveUpAnswer)
	MoveSend                      // send its Adoption to the owner there
	MoveAdoptHere                 // adopt it in this node's table (AdoptedHere)
	MoveTakeOver                  // re-assert it here (TakeOverHere)
)

// Step decides what becomes of m at now, where route says its name goes.
// A claim moved by a planned change is adopted where the name is served;
// a failed-over one is also taken over by a node that warms the name up
// (the design's new owner is the host itself).
func (m *Move) Step(now time.Time, lease time.Duration, route MoveRoute) MoveStep {
	switch {
	case m.Expired(now, lease):
		return MoveGiveUp
	case route == MoveRouteWarming && m.Failover:
		return MoveTakeOver
	case route == MoveRouteThere:
		return MoveSend
	case route == MoveRouteHere:
		return MoveAdoptHere
	}
	return MoveWait
}

// MoveOrigin is what an adoption names: the host's session and node,
// its move secret, and the ring the host routed the name with.
type MoveOrigin struct {
	Session uint64
	Node    string
	Secret  [protocol.SecretLen]byte
	Ring    uint64
}

// Adoption returns the adoption of moving claim c: a re-assertion naming
// the host's session as its origin, with the move secret. values and
// tickets say what the upstream to the new owner asked for in its
// HELLO.
func (m *Move) Adoption(c *Claim, o MoveOrigin, values, tickets bool) protocol.Frame {
	f := protocol.Frame{Type: protocol.TypeClaim, Claim: c.ID, Mode: m.Mode, Limit: m.Limit,
		Flags: protocol.ClaimReassert, Name: m.Name, Token: m.Token, Ring: o.Ring,
		Session: o.Session, Secret: o.Secret, Node: o.Node}
	if m.Failover && c.Req.HasValue() && values {
		// The next owner took the name without its state: the claim's
		// latest value goes with it (relayvalues.go).
		f.Flags |= protocol.ClaimValue
		f.Value = c.Req.Value
	}
	if m.Token == 0 && m.Ticket != 0 && tickets {
		// A queued claim keeps its place at a new owner that took the
		// name over (tickets.go).
		f.Flags |= protocol.ClaimTicket
		f.Ticket = m.Ticket
	}
	return f
}

// AdoptOutcome is what the new owner's answer to an adoption says.
type AdoptOutcome uint8

const (
	// Adopted: granted or queued there (Adopted applies it).
	Adopted AdoptOutcome = iota
	// AdoptNotYet: the owner does not serve the name yet; asked again.
	AdoptNotYet
	// AdoptLost: the owner has no such claim (it expired, or the owner
	// lost it): given up.
	AdoptLost
)

// AdoptAnswer classifies the new owner's answer f to m's adoption.
// REFUSED 0x03 says not yet: the owner's ring is older, or the name is
// frozen again. A re-assertion after a failure whose ring was older than
// the owner's take-over (REFUSED stale ring) is sent again too, with the
// ring the host has then: it read its ring before routing the name.
func (m *Move) AdoptAnswer(f protocol.Frame) AdoptOutcome {
	switch {
	case f.Type == protocol.TypeGranted, f.Type == protocol.TypeQueued:
		return Adopted
	case f.Type == protocol.TypeRefused && (f.Code == protocol.CodeNotOwner ||
		f.Code == protocol.CodeStaleRing && m.Failover):
		return AdoptNotYet
	}
	return AdoptLost
}

// Adopted applies the new owner's GRANTED or QUEUED f to c: it is live
// there, or releasing when the client released it while it moved (its
// RELEASE goes on to the new owner now). push is the PROMOTED the client
// hears when it was told QUEUED and now holds, unless it released it.
func (m *Move) Adopted(c *Claim, f protocol.Frame, released bool) (push []byte) {
	c.State = ClaimLive
	if f.Type == protocol.TypeGranted {
		c.Token = f.Token
	} else {
		c.Ticket = f.Ticket
	}
	if released {
		c.State = ClaimReleasing
		return nil
	}
	if f.Type == protocol.TypeGranted && m.Token == 0 {
		return protocol.AppendPromoted(nil, c.ID, f.Token)
	}
	return nil
}

// GiveUpAnswer is what the client is told of moving claim id given up:
// RELEASED when it released it meanwhile (its RELEASE's answer), else
// REVOKED 0x03. The REVOKED goes right after the last frame about the
// claim still in the outbox, else first (Outbox.GiveUp).
func GiveUpAnswer(id uint32, released bool) []byte {
	if released {
		return protocol.AppendReleased(nil, id)
	}
	return protocol.AppendRevoked(nil, id, protocol.CodeNotOwner, "")
}

// AdoptedHere returns what the client is told after moving claim id was
// adopted into this node's own table (the name moved to the host): its
// RELEASE's answer when it released it meanwhile (the table released
// it), else PROMOTED when it was told QUEUED and now holds (owner, with
// token), else nothing.
func (m *Move) AdoptedHere(id uint32, released, owner bool, token uint64) (answer, push []byte) {
	switch {
	case released:
		return protocol.AppendReleased(nil, id), nil
	case owner && m.Token == 0:
		return nil, protocol.AppendPromoted(nil, id, token)
	}
	return nil, nil
}

// HereStep is how a failed-over claim continues at this node, which took
// its name over and warms up (TakeOverHere).
type HereStep uint8

const (
	// HereNothing: the client released it meanwhile.
	HereNothing HereStep = iota
	// HereHold: a queued claim, held for the warm-up with its queue
	// ticket and entered with the others when the name is served
	// (tickets.go); the client, told QUEUED long ago, is told nothing.
	HereHold
	// HereReassert: a held claim, installed in the session's own
	// table entry with its old token unless a conflicting claim holds.
	HereReassert
)

// TakeOverHere decides how failed-over claim id continues at this node,
// as a re-assertion that reaches a node that took the name over does
// (resume.go, takeOver); hold is the CLAIM held for a queued one.
func (m *Move) TakeOverHere(id uint32, released bool) (how HereStep, hold protocol.Frame) {
	switch {
	case released:
		return HereNothing, protocol.Frame{}
	case m.Token != 0:
		return HereReassert, protocol.Frame{}
	}
	f := protocol.Frame{Type: protocol.TypeClaim, Claim: id, Mode: m.Mode, Limit: m.Limit, Name: m.Name}
	if m.Ticket != 0 {
		f.Flags, f.Ticket = protocol.ClaimTicket, m.Ticket
	}
	return HereHold, f
}

// MovedFate is what the owner's MOVED push does to a claim of the
// upstream it came on.
type MovedFate uint8

const (
	// MovedStray: the claim is neither live nor releasing: the frame
	// fits nothing.
	MovedStray MovedFate = iota
	// MovedLost: attached without its CLAIM (AttachRelayed), it cannot
	// be adopted: the client is told it lost it (revoke, when live).
	MovedLost
	// MovedMoves: it moves (StartMove).
	MovedMoves
)

// Moved decides what the owner's MOVED push does to c.
func (c *Claim) Moved() (fate MovedFate, revoke []byte) {
	switch {
	case c.State != ClaimLive && c.State != ClaimReleasing:
		return MovedStray, nil
	case c.Req.Name != "":
		return MovedMoves, nil
	case c.State == ClaimLive:
		return MovedLost, protocol.AppendRevoked(nil, c.ID, protocol.CodeNotOwner, "")
	}
	return MovedLost, nil
}
