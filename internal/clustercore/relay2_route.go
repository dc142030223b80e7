package clustercore

import (
	"time"

	"github.com/batonlock/baton/protocol"
)

// How a version 2 CLAIM reaches its owner through the node its client
// is on (docs/design/2026-12-07-cluster-relay.md, "Relaying a version 2
// session"): served here, relayed on the session's upstream to the
// owner, held QUEUED while no node serves its name, or refused. Held
// claims are asked about again every hold retry, in arrival order; one
// an owner revoked because its name moved is held again and relayed to
// the name's next owner. Nothing is granted anywhere while a name is
// held.

// Relay2Route is where the node's ring routes a claim's name now.
type Relay2Route uint8

const (
	// Relay2RouteNotOwner: this node may not serve or relay it (a
	// relayed session asking for a name this node does not own, or no
	// quorum contact).
	Relay2RouteNotOwner Relay2Route = iota
	// Relay2RouteHere: this node owns the name and grants it.
	Relay2RouteHere
	// Relay2RouteThere: another node owns it.
	Relay2RouteThere
	// Relay2RouteHold: the name must not be granted now (its owner warms
	// up or is not ready, there is no ring).
	Relay2RouteHold
	// Relay2RouteWarming: this node took the name over without its state
	// and warms it up: the claims held meanwhile enter in ticket order
	// when the warm-up ends (TicketGates).
	Relay2RouteWarming
	// Relay2RouteMoving: a planned change moves the name to another node.
	Relay2RouteMoving
)

// Relay2Way is what becomes of a CLAIM (Relay2ClaimWay).
type Relay2Way uint8

const (
	// Relay2Refuse: REFUSED 0x03 (retryable); a held claim is revoked
	// with 0x03.
	Relay2Refuse Relay2Way = iota
	// Relay2Serve: this node's table takes it.
	Relay2Serve
	// Relay2Relay: relayed on the session's upstream to the owner.
	Relay2Relay
	// Relay2Hold: held QUEUED, asked about again later.
	Relay2Hold
	// Relay2HoldGated: held QUEUED for the warm-up of a name this node
	// took over: it enters with the claims held for it, in ticket order.
	Relay2HoldGated
)

// Relay2ClaimWay decides what becomes of a CLAIM routed by route:
// forwarded says the session was relayed to this node (it is never
// relayed on), idBusy (asked only of a claim to relay; nil: no) that
// its id's earlier claim moved and was released, and that RELEASE waits
// for the adoption: the CLAIM is held until it is sent, so that the
// owner never sees the id twice. nameHeld (asked of a claim to serve or
// relay; nil: no) says the session holds earlier claims on the name: the
// CLAIM is held behind them, so that it does not overtake them when they
// are asked about again.
func Relay2ClaimWay(route Relay2Route, forwarded bool, idBusy, nameHeld func() bool) Relay2Way {
	switch route {
	case Relay2RouteHere:
		if nameHeld != nil && nameHeld() {
			return Relay2Hold
		}
		return Relay2Serve
	case Relay2RouteWarming:
		return Relay2HoldGated
	case Relay2RouteHold, Relay2RouteMoving:
		return Relay2Hold
	case Relay2RouteThere:
		switch {
		case forwarded:
			return Relay2Refuse
		case idBusy != nil && idBusy(), nameHeld != nil && nameHeld():
			return Relay2Hold
		}
		return Relay2Relay
	}
	return Relay2Refuse
}

// Relay2Holds reports whether a CLAIM to hold is held (answered QUEUED):
// a no-wait CLAIM on a held name is answered BUSY instead.
func Relay2Holds(f protocol.Frame) bool { return !f.NoWait() }

// Relay2HeldTicket returns the queue ticket of a prior owner that held
// claim f came with: a re-asserted queued claim, else 0.
func Relay2HeldTicket(f protocol.Frame) uint64 {
	if f.Flags&protocol.ClaimTicket != 0 {
		return f.Ticket
	}
	return 0
}

// Relay2Late returns the CLAIM that relays held claim f to its owner: a
// re-asserted claim held with its ticket is relayed as the claim it now
// is, a plain CLAIM (ClaimTicket alone is no frame's).
func Relay2Late(f protocol.Frame) protocol.Frame {
	f.Flags &^= protocol.ClaimTicket
	f.Ticket = 0
	return f
}

// Relay2RerouteWait bounds how long a claim an owner revoked because its
// name moved is held while this node's ring still names that owner: a
// ring change reaches every node within a Raft commit, well within it.
const Relay2RerouteWait = time.Second

// Relay2Reroute is why a held claim was held again: the owner that
// revoked it, and until when this node waits for a ring naming another.
type Relay2Reroute struct {
	Addr  string
	Until time.Time
}

// Relay2Reroutable reports whether the owner's REVOKED f of c is held
// again and relayed to the name's next owner rather than passed on: the
// owner no longer owns the name (0x03), and the claim was queued there,
// never granted, so it holds nothing and its client, told QUEUED, waits
// on. moving says c moves to a new owner (it has its own way there).
func Relay2Reroutable(c *Claim, f protocol.Frame, moving bool) bool {
	return c != nil && f.Code == protocol.CodeNotOwner && c.State == ClaimLive && c.Token == 0 &&
		!moving && c.Req.Name != "" && !c.Req.NoWait()
}

// Relay2Rehold returns the CLAIM held again for c, which its owner
// revoked because its name moved (Relay2Reroutable), and why (the owner
// at addr, waited for until now plus Relay2RerouteWait).
func Relay2Rehold(c *Claim, addr string, now time.Time) (protocol.Frame, Relay2Reroute) {
	f := protocol.Frame{Type: protocol.TypeClaim, Claim: c.ID, Mode: c.Req.Mode, Limit: c.Req.Limit, Name: c.Req.Name}
	return f, Relay2Reroute{Addr: addr, Until: now.Add(Relay2RerouteWait)}
}

// Waits reports whether a claim held again for r still waits at now for
// this node's ring, which routes it to addr (route), to name another
// owner than the one that revoked it; false: it is routed as any held
// claim, and r is forgotten.
func (r Relay2Reroute) Waits(route Relay2Route, addr string, now time.Time) bool {
	return route == Relay2RouteThere && addr == r.Addr && now.Before(r.Until)
}

// Relay2Proclaim is what the relaying node does with a PROCLAIM
// (Relay2ProclaimOf).
type Relay2Proclaim uint8

const (
	// Relay2ProclaimAnswer: answered here with the answer returned.
	Relay2ProclaimAnswer Relay2Proclaim = iota
	// Relay2ProclaimHeld: the claim is held back: it is claimed with the
	// new value when it goes (Relay2SetValue), answered set.
	Relay2ProclaimHeld
	// Relay2ProclaimRelay: relayed on the claim's upstream, whose
	// PROCLAIMED answers it; the claim's CLAIM keeps the new value
	// (Relay2SetValue), which a re-assertion carries to the name's next
	// owner.
	Relay2ProclaimRelay
)

// Relay2ProclaimOf decides PROCLAIM f of a claim the session relays (c)
// or holds (held): upValues says c's upstream is alive and asked for
// values. A claim not in use, being released or ended is answered not in
// use; one moving to a new owner, or relayed to a node of an earlier
// revision, is refused: the value cannot be changed there now.
func Relay2ProclaimOf(f protocol.Frame, c *Claim, held, upValues bool) (Relay2Proclaim, []byte) {
	switch {
	case held:
		return Relay2ProclaimHeld, protocol.AppendProclaimed(nil, f.Claim, protocol.ProclaimSet)
	case c == nil || c.State == ClaimReleasing || c.State == ClaimEnded:
		return Relay2ProclaimAnswer, protocol.AppendProclaimed(nil, f.Claim, protocol.ProclaimNotInUse)
	case c.State == ClaimMoving || !upValues:
		return Relay2ProclaimAnswer, protocol.AppendRefused(nil, f.Claim, protocol.CodeUnsupportedFeature, "the claim's owner cannot take a value now")
	}
	return Relay2ProclaimRelay, nil
}

// Relay2SetValue makes CLAIM f carry value.
func Relay2SetValue(f *protocol.Frame, value string) {
	f.Value = value
	f.Flags |= protocol.ClaimValue
}
