package clustercore

import (
	"fmt"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// What a relaying node does with a version 1 ACQUIRE on the Router's
// answer for its name, and whether a connection that opened with the hop
// marker may relay at all. Package server (relay.go) asks the Router,
// dials, holds the connection and copies its bytes.
// Design: "Relaying a version 1 connection" in
// docs/design/2026-12-07-cluster-relay.md.

// RouteAction is a Router's answer for a lock name: who serves it now.
// Package server's Router gives it; the rules here read it.
type RouteAction int

// Route actions.
const (
	// RouteServe: this node owns the name and grants it.
	RouteServe RouteAction = iota
	// RouteHold: the name must not be granted now (its owner is warming
	// up or not ready); answer WAITING and ask again shortly.
	RouteHold
	// RouteForward: relay the connection to Route.Addr, the owner's
	// protocol address; if it cannot be reached, hold.
	RouteForward
	// RouteNotOwner: a relayed request for a name this node does not own,
	// or any request on a node without quorum contact: answer ERROR 0x03
	// (retryable), never relay again.
	RouteNotOwner
	// RouteMoving: a planned change is moving the name to another node:
	// hold, like RouteHold (a version 2 claim is held QUEUED, then
	// relayed to the new owner); a claim routed before the move began
	// does not enter the table.
	RouteMoving
)

// Route is a Router's decision for one lock name.
type Route struct {
	Action RouteAction
	Addr   string // RouteForward: the owner's protocol address
	// Gated (with RouteHold): this node owns the name but took it over
	// without its state (its prior owner was removed, or this node
	// restarted) and is warming up; Since is the ring version of that
	// take-over (0 for a restart). A re-assertion is answered on it.
	Gated bool
	Since uint64
}

// String names a route action.
func (a RouteAction) String() string {
	switch a {
	case RouteServe:
		return "serve"
	case RouteHold:
		return "hold"
	case RouteForward:
		return "forward"
	case RouteNotOwner:
		return "not-owner"
	case RouteMoving:
		return "moving"
	}
	return fmt.Sprintf("RouteAction(%d)", int(a))
}

// V1RouteStep is what a version 1 ACQUIRE does on one answer of the
// Router.
type V1RouteStep uint8

const (
	// V1StepHold: hold the claim for a round (V1Hold), then ask again.
	V1StepHold V1RouteStep = iota
	// V1StepServe: the claim enters this node's table.
	V1StepServe
	// V1StepRelay: relay the connection to the owner; if the owner
	// cannot be reached, hold (V1Route.Unreachable).
	V1StepRelay
	// V1StepRefuse: end the connection with V1Refused.
	V1StepRefuse
)

// V1Refused is how a version 1 ACQUIRE that the Router refuses ends:
// ERROR 0x03, which the client retries.
var V1Refused = V1Ending{Reason: locktable.ReasonProtocolError, Code: protocol.CodeNotOwner}

// V1ShutDown is how a version 1 ACQUIRE routed by a node that shuts down
// ends, or one whose hop to the owner cannot be written: ERROR 0x01.
var V1ShutDown = V1Ending{Reason: locktable.ReasonShutdown, Code: protocol.CodeShuttingDown}

// v1RouteWarnEvery: a claim held because its owner cannot be reached is
// logged at its first attempt and at every this many after, not at each
// round.
const v1RouteWarnEvery = 50

// V1Route is a version 1 ACQUIRE's way on a relaying node, from its
// first answer of the Router until it is served here, relayed or
// refused. Forwarded says another node relayed it here.
type V1Route struct {
	Forwarded bool
	asked     int // answers of the Router taken so far
}

// Step takes the Router's answer r (RouteMoving holds, as RouteHold). A request relayed here already is
// never relayed again, whatever the Router says, as for version 2: two
// nodes that disagree about the owner would relay the client in a loop.
func (v *V1Route) Step(r RouteAction) V1RouteStep {
	v.asked++
	switch {
	case r == RouteServe:
		return V1StepServe
	case r == RouteNotOwner, r == RouteForward && v.Forwarded:
		return V1StepRefuse
	case r == RouteForward:
		return V1StepRelay
	}
	return V1StepHold
}

// Unreachable records that the owner the last Step relayed to could not
// be reached (the claim is held), and reports whether to log it: at the
// first attempt and every v1RouteWarnEvery after.
func (v *V1Route) Unreachable() (warn bool) {
	return (v.asked-1)%v1RouteWarnEvery == 0
}

// HopTrust is what decides whether a connection that opened with the hop
// marker may relay: a TLS connection only if its client certificate's
// identity is a member node's (ByIdentity), one without TLS only if
// ByAddr accepts its source address, which is weak: anyone on a member's
// host passes it. A nil function trusts nobody, as does a node without a
// Router (Routed false).
type HopTrust struct {
	Routed     bool
	ByIdentity func(identity string) bool
	ByAddr     func() bool
}

// Trusted reports whether the connection may relay; tls says it is a TLS
// connection whose client certificate names identity (empty: none).
func (t HopTrust) Trusted(tls bool, identity string) bool {
	if !t.Routed {
		return false
	}
	if tls {
		return identity != "" && t.ByIdentity != nil && t.ByIdentity(identity)
	}
	return t.ByAddr != nil && t.ByAddr()
}
