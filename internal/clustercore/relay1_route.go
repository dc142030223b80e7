package clustercore

import (
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// What a relaying node does with a version 1 ACQUIRE on the Router's
// answer for its name, and whether a connection that opened with the hop
// marker may relay at all. Package server (relay.go) asks the Router,
// dials, holds the connection and copies its bytes.
// Design: "Relaying a version 1 connection" in
// docs/design/2026-12-07-cluster-relay.md.

// RelayRoute is a Router's answer for a name as the relaying node's
// rules read it (package server's RouteAction).
type RelayRoute uint8

const (
	// RelayRouteServe: this node owns the name and grants it.
	RelayRouteServe RelayRoute = iota
	// RelayRouteHold: the name must not be granted now (its owner is
	// warming up, not ready, or a planned change moves it).
	RelayRouteHold
	// RelayRouteForward: another node owns the name: relay to it.
	RelayRouteForward
	// RelayRouteNotOwner: a relayed request for a name this node does
	// not own, or any request on a node without quorum contact.
	RelayRouteNotOwner
)

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

// Step takes the Router's answer r. A request relayed here already is
// never relayed again, whatever the Router says, as for version 2: two
// nodes that disagree about the owner would relay the client in a loop.
func (v *V1Route) Step(r RelayRoute) V1RouteStep {
	v.asked++
	switch {
	case r == RelayRouteServe:
		return V1StepServe
	case r == RelayRouteNotOwner, r == RelayRouteForward && v.Forwarded:
		return V1StepRefuse
	case r == RelayRouteForward:
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
