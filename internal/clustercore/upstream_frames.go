package clustercore

import (
	"bytes"

	"github.com/batonlock/baton/protocol"
)

// What the relaying node reads on an upstream session (one per client
// session and owner; docs/design/2026-12-07-cluster-relay.md, "Relaying a
// version 2 session"): the owner's answer to its HELLO, then version 2
// server frames, each of which is an answer to the oldest request in
// flight, a push, or the owner's end.

// UpstreamFrameKind is what a frame read on an upstream is to the
// relaying node (UpstreamFrameKindOf).
type UpstreamFrameKind uint8

const (
	// UpstreamAnswer answers the oldest request in flight (Ledger.Match).
	UpstreamAnswer UpstreamFrameKind = iota
	// UpstreamPush is a PROMOTED or REVOKED about a claim: passed on to
	// the client (Claim.Pushed), or the claim held again
	// (Relay2Reroutable).
	UpstreamPush
	// UpstreamMoved is MOVED, the hop-only REVOKED telling that a claim
	// was handed over to a new owner and continues there: never passed
	// on.
	UpstreamMoved
	// UpstreamRangePush is a RANGE answer the owner pushes (RangeIsPush).
	UpstreamRangePush
	// UpstreamReopen: the owner refused the features the HELLO asked for
	// (ERROR 0x1e before its WELCOME: a node of the earlier revision,
	// which read nothing after the HELLO). The upstream opens again
	// without asking, and everything queued since the HELLO goes again.
	UpstreamReopen
	// UpstreamEnded: the owner ended the session with an ERROR
	// (OwnerEnded).
	UpstreamEnded
	// UpstreamStray fits no request: the upstream fails.
	UpstreamStray
)

// UpstreamFrameKindOf says what frame f, read on an upstream, is. moved
// is the claim-level code of MOVED; asked says the HELLO asked for queue
// tickets or values, and opened that the owner has answered it WELCOME.
func UpstreamFrameKindOf(f protocol.Frame, moved protocol.Code, asked, opened bool) UpstreamFrameKind {
	switch f.Type {
	case protocol.TypeWelcome, protocol.TypePong, protocol.TypeGranted, protocol.TypeQueued,
		protocol.TypeBusy, protocol.TypeRefused, protocol.TypeReleased, protocol.TypeProclaimed:
		return UpstreamAnswer
	case protocol.TypeRangeAnswer:
		if RangeIsPush(f) {
			return UpstreamRangePush
		}
		return UpstreamAnswer
	case protocol.TypeRevoked:
		if f.Code == moved {
			return UpstreamMoved
		}
		return UpstreamPush
	case protocol.TypePromoted:
		return UpstreamPush
	case protocol.TypeSessionError, protocol.TypeError:
		if f.Code == protocol.CodeUnsupportedFeature && asked && !opened {
			return UpstreamReopen
		}
		return UpstreamEnded
	}
	return UpstreamStray
}

// UpstreamParse parses the owner's complete frames at the start of buf,
// handing each to each with a copy of its bytes (the caller reuses
// buf): the answer to the HELLO first (opened false), version 2 server
// frames of at most maxLen bytes after it. It returns how many bytes it
// consumed and whether the HELLO has been answered; err, a frame that
// does not parse, ends the upstream.
func UpstreamParse(buf []byte, opened bool, maxLen int, each func(f protocol.Frame, raw []byte)) (n int, _ bool, err error) {
	for {
		var f protocol.Frame
		var m int
		if opened {
			f, m, err = protocol.ParseServerFrameV2Max(buf[n:], maxLen)
		} else {
			f, m, err = protocol.ParseHelloAnswer(buf[n:])
		}
		if err != nil || m == 0 {
			return n, opened, err
		}
		opened = true
		each(f, bytes.Clone(buf[n:n+m]))
		n += m
	}
}

// UpstreamHelloFlags are the HELLO flags of an upstream: queue tickets
// and values are asked for when the client's session asked for them (it
// then understands what the owner answers with them, passed on as the
// owner wrote it) and the owner has not refused them before
// (UpstreamReopen).
func UpstreamHelloFlags(tickets, values bool) uint8 {
	var flags uint8
	if tickets {
		flags = protocol.HelloTickets
	}
	if values {
		flags |= protocol.HelloValues
	}
	return flags
}

// UpstreamKeepsOpening reports whether what is sent on an upstream is
// also kept to be sent again on a new connection (UpstreamReopen): it
// asked for features, and the owner has not answered WELCOME yet.
func UpstreamKeepsOpening(asked, opened bool) bool { return asked && !opened }

// UpstreamAnswerWay is where the owner's answer to a request goes
// (UpstreamAnswerWayOf).
type UpstreamAnswerWay uint8

const (
	// UpstreamOpened: WELCOME, the upstream is open.
	UpstreamOpened UpstreamAnswerWay = iota
	// UpstreamPonged: a PONG, which the ledger has counted.
	UpstreamPonged
	// UpstreamRangeAdopted answers a range adoption or re-assertion
	// (RangeMove.Answered).
	UpstreamRangeAdopted
	// UpstreamRangeAnswered answers a RANGE request of the client.
	UpstreamRangeAnswered
	// UpstreamAdoptAnswered answers the adoption of a moving claim at
	// its new owner (Move.AdoptAnswer).
	UpstreamAdoptAnswered
	// UpstreamHeldAnswered answers the CLAIM of a held claim relayed
	// late, whose client was told QUEUED already (Claim.HeldAnswer).
	UpstreamHeldAnswered
	// UpstreamToClient answers a request of the client: the answer fills
	// its place in the outbox (Claim.Answered).
	UpstreamToClient
	// UpstreamToNewOwner answers a RELEASE whose claim moved meanwhile:
	// the RELEASE goes to the new owner, nothing is told here.
	UpstreamToNewOwner
)

// UpstreamAnswerWayOf says where answer f to request r goes: toClient
// says the client waits for it (it has a place in the outbox), rangeAdopt
// that r adopts or re-asserts range locks, moving that r's claim moves
// to a new owner.
func UpstreamAnswerWayOf(f protocol.Frame, r Sent, toClient, rangeAdopt, moving bool) UpstreamAnswerWay {
	switch {
	case f.Type == protocol.TypeWelcome:
		return UpstreamOpened
	case f.Type == protocol.TypePong:
		return UpstreamPonged
	case f.Type == protocol.TypeRangeAnswer && rangeAdopt:
		return UpstreamRangeAdopted
	case f.Type == protocol.TypeRangeAnswer:
		return UpstreamRangeAnswered
	case toClient:
		return UpstreamToClient
	case r.Kind == protocol.TypeClaim && moving:
		return UpstreamAdoptAnswered
	case r.Kind == protocol.TypeRelease:
		return UpstreamToNewOwner
	}
	return UpstreamHeldAnswered
}
