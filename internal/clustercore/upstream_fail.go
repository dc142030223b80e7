package clustercore

import (
	"maps"
	"slices"

	"github.com/batonlock/baton/protocol"
)

// The end of an upstream without the client (docs/design/2026-12-07-cluster-relay.md,
// "Relaying a version 2 session", "When the owner dies"): the requests
// it has not answered are answered by the relaying node or held
// (Claim.FailedRequest), its claims re-asserted at the names' next owner
// or lost (Claim.Failed), and the session lives on.

// UpstreamEnd is what the relaying node knows when an upstream ends
// without the client.
type UpstreamEnd struct {
	// Why is why it ended (OwnerLost, OwnerEnded, or a failure to open).
	Why error
	// Opened: the owner had answered its HELLO with WELCOME.
	Opened bool
	// Cluster: names are routed (another node may take them over).
	Cluster bool
	// Live: the client's session and the server go on.
	Live bool
}

// Reassert reports whether the upstream's claims are re-asserted at the
// names' next owner rather than revoked: an open upstream whose owner
// may have died or stopped serving (Reassertable), of a session that
// goes on, on a cluster node.
func (e UpstreamEnd) Reassert() bool {
	return e.Opened && e.Cluster && e.Live && Reassertable(e.Why)
}

// UpstreamLog is how the end of an upstream is logged (UpstreamEnd.Log).
type UpstreamLog uint8

const (
	// UpstreamLogReasserting: a warning, its claims are re-asserted.
	UpstreamLogReasserting UpstreamLog = iota
	// UpstreamLogLost: a warning, its claims are lost.
	UpstreamLogLost
	// UpstreamLogUnreachable: a warning, the owner could not be reached
	// and its claims are held.
	UpstreamLogUnreachable
	// UpstreamLogUnreachableQuiet: as UpstreamLogUnreachable, at debug
	// level: between the first failure to open and every 50th, a
	// warning each time would flood the log while an owner is down.
	UpstreamLogUnreachableQuiet
)

// upstreamWarnEvery is how often a failure to open an upstream in a row
// is logged as a warning after the first.
const upstreamWarnEvery = 50

// Log says how e is logged: reasserting and lost count its claims so
// decided, fails the failures to open an upstream of the session in a
// row (UpstreamOpenFails; 0 when it had opened).
func (e UpstreamEnd) Log(reasserting, lost, fails int) UpstreamLog {
	switch {
	case e.Opened && reasserting > 0:
		return UpstreamLogReasserting
	case e.Opened || lost > 0:
		return UpstreamLogLost
	case fails == 1 || fails%upstreamWarnEvery == 0:
		return UpstreamLogUnreachable
	}
	return UpstreamLogUnreachableQuiet
}

// UpstreamOpenFails counts a session's upstreams that could not be
// opened since one last opened.
type UpstreamOpenFails struct{ n int }

// Failed counts one more and returns the count.
func (c *UpstreamOpenFails) Failed() int {
	c.n++
	return c.n
}

// Opened starts the count again: an upstream opened.
func (c *UpstreamOpenFails) Opened() { c.n = 0 }

// UpstreamClaimEnd is what becomes of one claim of a failed upstream
// (UpstreamFailClaims).
type UpstreamClaimEnd[C any] struct {
	ID   uint32
	C    C
	Fate ClaimFate
	// Revoke is the REVOKED 0x03 the client is told (ClaimLost).
	Revoke []byte
}

// UpstreamFailClaims decides, in claim id order, what becomes of each
// claim of a failed upstream (Claim.Failed; claim gives the Claim of a
// C): the order is the order in which the losses are placed in the
// outbox (Outbox.PlaceLoss), so the client hears of them in id order.
func UpstreamFailClaims[C any](claims map[uint32]C, claim func(C) *Claim, reassert bool) []UpstreamClaimEnd[C] {
	ends := make([]UpstreamClaimEnd[C], 0, len(claims))
	for _, id := range slices.Sorted(maps.Keys(claims)) {
		c := claims[id]
		fate, revoke := claim(c).Failed(reassert)
		ends = append(ends, UpstreamClaimEnd[C]{ID: id, C: c, Fate: fate, Revoke: revoke})
	}
	return ends
}

// UpstreamAppendReleases appends to b a RELEASE for each claim of an
// upstream that the owner holds or queues (pending or live), in claim
// id order: what the relaying node writes when the client hangs up, so
// the owner ends them at once, as it would a direct client's. A claim
// being released has its RELEASE sent already; a moving one is
// released at its new owner.
func UpstreamAppendReleases[C any](b []byte, claims map[uint32]C, claim func(C) *Claim) []byte {
	for _, id := range slices.Sorted(maps.Keys(claims)) {
		if st := claim(claims[id]).State; st == ClaimPending || st == ClaimLive {
			b = protocol.AppendRelease(b, id)
		}
	}
	return b
}

// Relay2Retry is what decides which of a relaying session's retry timers
// start: the work waiting for each, whether each runs already, and
// whether the session has ended.
type Relay2Retry struct {
	// Held claims waiting for a node to serve their name, moving (or
	// re-asserted) claims waiting for their adoption, and range
	// adoptions waiting to be asked again.
	Held, Moving, Adopting int
	// Holding, MoveTimer and RangeTimer: the timers running.
	Holding, MoveTimer, RangeTimer bool
	// Closed: the session has ended; held claims are still answered by
	// their timer (it forgets them), nothing moves any more.
	Closed bool
}

// Start reports which timers to start: one for each kind of work that
// waits and whose timer does not run.
func (r Relay2Retry) Start() (hold, move, ranges bool) {
	return r.Held > 0 && !r.Holding,
		r.Moving > 0 && !r.MoveTimer && !r.Closed,
		r.Adopting > 0 && !r.RangeTimer && !r.Closed
}
