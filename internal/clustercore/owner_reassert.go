package clustercore

import (
	"errors"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The owner's side of resumable sessions and re-assertion: a CLAIM with
// flags bit 1 adopts the claim from the kept session of the origin it
// names when the secret hash matches (same token, same queue place); a
// node that took the name over and is warming up installs a re-asserted
// holder with its old token unless a conflicting claim holds or its ring
// is older (0x05); everything else is refused 0x04. Package server
// (resume.go, rangeresume.go) holds the sessions and makes the calls.
// Protocol: docs/protocol-v2-resume.md; design:
// docs/design/2026-12-07-cluster-relay.md#internalclustercoreowner_reassertgo.

// OwnerWelcome is what the WELCOME to a version 2 session sets up.
type OwnerWelcome struct {
	// Flags are the WELCOME's flags; a HELLO with none gets none.
	Flags uint8
	// Secret: the session is resumable with a secret of its own (this
	// node issues it, and the node and ring the flags name). A relayed
	// resumable session is kept under its relaying node's origin and
	// the client's secret instead: the relaying node needs none.
	Secret bool
	// Detach and Tickets: the session's revision features.
	Detach, Tickets bool
}

// WelcomeFor decides the WELCOME to hello. relayedResume says the
// session is the upstream of a resumable client session (its hop header
// carries a resume hash); ring that this node is a cluster node that
// knows its ring version.
func WelcomeFor(hello protocol.Frame, relayedResume, ring bool) OwnerWelcome {
	var w OwnerWelcome
	resumable := relayedResume
	if !relayedResume && hello.Resumable() {
		w.Secret, resumable = true, true
		w.Flags |= protocol.WelcomeResumable
		if ring {
			w.Flags |= protocol.WelcomeRing
		}
	}
	if hello.Detach() && resumable && !relayedResume {
		w.Detach = true
		w.Flags |= protocol.WelcomeDetach
	}
	if hello.Tickets() {
		w.Tickets = true
		w.Flags |= protocol.WelcomeTickets
	}
	return w
}

// OwnerRoute is what the Router says, on the node a re-assertion reached,
// of its name.
type OwnerRoute struct {
	Serve   bool   // this node serves the name
	Gated   bool   // held: taken over without its state, warming up
	Since   uint64 // Gated: the ring version of that take-over
	Forward bool   // another node owns it
}

// ReassertStep is what an owner does first with a re-assertion.
type ReassertStep uint8

const (
	// ReassertDecide: adopt it from a kept session; else take it over
	// when the name is gated (TakeOverFor); else refuse it 0x04.
	ReassertDecide ReassertStep = iota
	// ReassertForward: relay it to the name's owner, which answers.
	ReassertForward
	// ReassertNotNow: refuse it 0x03, the client retries: warming up
	// without an epoch, moving, no ring, or a relayed re-assertion for a
	// name this node does not own.
	ReassertNotNow
)

// ReassertStepFor decides the first step for a re-assertion read on a
// session of a node with a Router (cluster; without one it is
// ReassertDecide), whose name routes as rt; forwarded says the session
// is an upstream session of another node, which does not relay again.
func ReassertStepFor(cluster bool, rt OwnerRoute, forwarded bool) ReassertStep {
	switch {
	case !cluster, rt.Serve, rt.Gated:
		return ReassertDecide
	case rt.Forward && !forwarded:
		return ReassertForward
	}
	return ReassertNotNow
}

// ReassertHolder is the session on the owner whose claims (or range
// locks) a re-assertion takes.
type ReassertHolder uint8

const (
	HolderNone    ReassertHolder = iota
	HolderKept                   // the kept session of the origin it names
	HolderLive                   // that origin's session, still open: it is kept (or its locks moved) first
	HolderStandIn                // range locks a planned change handed over for that origin
)

// ReassertHolders describes what the owner holds for the origin a
// re-assertion names.
type ReassertHolders struct {
	// Kept: a kept session of the origin; KeptMatches: the re-assertion's
	// secret is its (or the one a planned change installed it with).
	Kept, KeptMatches bool
	// Live: an open resumable session of the origin other than the
	// re-asserting one (its client saw the connection break first).
	Live, LiveMatches bool
	// StandIn: range locks a planned change handed over for the origin
	// with a secret hash, and the node that was to adopt them is gone.
	StandIn, StandInMatches bool
	// Relays: the re-asserting session is the upstream its own relaying
	// node opened again for the origin (the one that relayed the claim
	// before), which needs no secret.
	Relays bool
}

// Holder decides whose claims the re-assertion takes: the kept session
// when there is one (and none when it does not match), else the open one
// when it matches, else a stand-in's, which only the secret opens.
func (h ReassertHolders) Holder() ReassertHolder {
	switch {
	case h.Kept:
		if h.KeptMatches || h.Relays {
			return HolderKept
		}
		return HolderNone
	case h.Live && (h.LiveMatches || h.Relays):
		return HolderLive
	case h.StandIn && h.StandInMatches:
		return HolderStandIn
	}
	return HolderNone
}

// AdoptFits reports whether re-assertion f names kept claim c as it is:
// same name, mode and limit, no token for a queued claim and the granted
// token for a held one (a held claim re-asserted without a token is the
// client's queued claim granted while it was away).
func AdoptFits(c locktable.ClaimView, f protocol.Frame) bool {
	switch {
	case c.Name != f.Name, c.Mode != locktable.Mode(f.Mode),
		c.Mode == locktable.Semaphore && c.Limit != f.Limit,
		c.Status.State == locktable.Waiting && f.Token != 0,
		c.Status.State == locktable.Owner && f.Token != 0 && f.Token != c.Status.Token:
		return false
	}
	return true
}

// TakeOver is how a node that took a name over without its state, and
// is warming up, answers a re-assertion the kept sessions did not adopt.
type TakeOver uint8

const (
	// TakeOverStaleRing: refused 0x05, its ring is older than the
	// take-over; the client asks again with the new version.
	TakeOverStaleRing TakeOver = iota
	// TakeOverRequeue: a queued claim queues again (held until the
	// warm-up ends), with its queue ticket when it has one: it then
	// enters the queue at its old place (tickets.go), else at the back,
	// as a new claim would.
	TakeOverRequeue
	// TakeOverInstall: a held claim is installed with its old token
	// unless a conflicting claim holds the lock (locktable Reassert).
	TakeOverInstall
)

// TakeOverFor decides how re-assertion f is answered on a name taken
// over at ring since. For TakeOverRequeue, held is the claim to hold: f
// as a plain CLAIM, with ClaimTicket only when it has a ticket (a held
// claim with ClaimTicket alone keeps its ticket for the table; it is
// never sent so).
func TakeOverFor(f protocol.Frame, since uint64) (_ TakeOver, held protocol.Frame) {
	switch {
	case f.Ring < since:
		return TakeOverStaleRing, protocol.Frame{}
	case f.Token == 0:
		f.Flags &^= protocol.ClaimReassert
		if f.Ticket == 0 {
			f.Flags &^= protocol.ClaimTicket
		}
		return TakeOverRequeue, f
	}
	return TakeOverInstall, protocol.Frame{}
}

// TakeOverRefusal is the code of a re-assertion the table would not
// install (locktable Reassert's err): the claim's own mistakes (its mode
// or limit against the lock's) keep claimCode, the code a new claim would
// get; everything else (a conflicting holder, an unknown name) is 0x04.
func TakeOverRefusal(err error, claimCode protocol.Code) protocol.Code {
	if errors.Is(err, locktable.ErrModeConflict) || errors.Is(err, locktable.ErrLimitMismatch) {
		return claimCode
	}
	return protocol.CodeReassertRefused
}
