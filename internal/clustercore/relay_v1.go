package clustercore

import (
	"bytes"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Version 1 relaying: one connection, one claim, copied byte for byte
// through a hop to the name's owner, so the owner ends the claim exactly
// when it would end a direct one. V1Hold is a claim held while no node may
// grant its name, V1Copy what of the owner's bytes reaches the client, and
// V1End how the owner's claim ends by what its connection brings. Package
// server (relay.go, session.go) holds the connections and goroutines.
// Design: "Relaying a version 1 connection" and
// #internalclustercorerelay_v1go in docs/design/2026-12-07-cluster-relay.md.

// V1Unexpected is the ERROR code for byte b where a version 1 client
// may send only HEARTBEAT (after its ACQUIRE): a second ACQUIRE, or a
// byte no client frame starts with.
func V1Unexpected(b byte) protocol.Code {
	if protocol.Type(b) == protocol.TypeAcquire {
		return protocol.CodeDuplicateAcquire
	}
	return protocol.CodeUnknownMessage
}

// V1Hold is a version 1 claim that the relaying node holds because the
// Router says hold or its owner cannot be reached: nothing is granted
// elsewhere meanwhile. The client is told WAITING once, each of its
// heartbeats is answered WAITING, the Router is asked again every Retry,
// and the claim ends when the client is silent for its lease (it is in
// no table: nothing to release).
type V1Hold struct {
	Lease time.Duration // the client's lease
	Retry time.Duration // how often the Router is asked again
	seen  time.Time     // the client was last heard from; zero before the hold
	until time.Time     // the end of the current round
}

// Round starts a round of the hold at now, after the Router said hold
// (or its owner could not be reached). first is true for the first
// round: the caller then tells the client WAITING.
func (h *V1Hold) Round(now time.Time) (first bool) {
	first = h.seen.IsZero()
	if first {
		h.seen = now
	}
	h.until = now.Add(h.Retry)
	return first
}

// Deadline is when the caller's read of the client ends: the round's
// end, or the end of the client's lease if sooner.
func (h *V1Hold) Deadline() time.Time {
	return hopMinTime(h.until, h.seen.Add(h.Lease))
}

// Heard takes the bytes b that the client sent at now, and appends the
// answer to out: one WAITING per heartbeat. Any other byte ends the
// claim with the code it returns (nonzero), and nothing is answered.
func (h *V1Hold) Heard(now time.Time, b, out []byte) ([]byte, protocol.Code) {
	for _, c := range b {
		if protocol.Type(c) != protocol.TypeHeartbeat {
			return out, V1Unexpected(c)
		}
	}
	if len(b) > 0 {
		h.seen = now
	}
	for range b {
		out = protocol.AppendWaiting(out)
	}
	return out, 0
}

// V1HoldStep is what a held claim does when its read's deadline passed.
type V1HoldStep uint8

const (
	V1HoldRead V1HoldStep = iota // read on (the deadline fired early)
	V1HoldAsk                    // the round is over: ask the Router again
	V1HoldEnd                    // the client was silent for its lease: end, with no frame
)

// Timeout says what the hold does when its read's deadline passed at now.
func (h *V1Hold) Timeout(now time.Time) V1HoldStep {
	switch {
	case now.Sub(h.seen) > h.Lease:
		return V1HoldEnd
	case !now.Before(h.until):
		return V1HoldAsk
	}
	return V1HoldRead
}

// V1Copy is the relaying node's copy of the owner's bytes to the client
// on a version 1 hop. Its zero value passes everything; NewV1Copy sets
// whether the client was told WAITING while the claim was held.
type V1Copy struct {
	// skip: the owner's first frame, if it is WAITING, is not passed on:
	// the client was told WAITING while the claim was held, and would
	// read a second one as the answer to a heartbeat it has not sent.
	skip         bool
	scan         protocol.HopScan
	clientClosed bool // a write to the client failed: pass nothing more
}

// NewV1Copy returns the copy of a relayed claim; told is true when the
// client was told WAITING while the claim was held.
func NewV1Copy(told bool) V1Copy { return V1Copy{skip: told} }

// Owner takes the bytes b that the owner sent; last is true when the
// read that brought them also ended the owner's stream (an error).
// goneSent is true once the relaying node has sent HopClientGone: the
// client is gone, and nothing more is passed to it. It returns the bytes
// to pass to the client, and end when the claim's stream ended with
// HopAck: then acked tells whether the hop may carry the next claim (the
// ack answers HopClientGone, is the stream's last byte, and the stream
// is still open). What came before the ack in b is for a client that
// has gone.
func (c *V1Copy) Owner(b []byte, last, goneSent bool) (pass []byte, end, acked bool) {
	if at := c.scan.Scan(b); at >= 0 {
		return nil, true, goneSent && at == len(b)-1 && !last
	}
	if c.skip && len(b) > 0 {
		c.skip = false
		if protocol.Type(b[0]) == protocol.TypeWaiting {
			b = b[1:]
		}
	}
	if len(b) == 0 || c.clientClosed || goneSent {
		return nil, false, false
	}
	return b, false, false
}

// ClientFailed records that a write to the client failed: its
// connection is closed. The copy reads on, so that the owner's answer to
// HopClientGone is seen, and passes nothing more.
func (c *V1Copy) ClientFailed() { c.clientClosed = true }

// v1NoFrame is a byte that starts no version 1 frame and is no hop's
// word: the owner answers it ERROR 0x13, as a direct server does.
const v1NoFrame = 0x00

// V1FromClient is what of b, bytes a relayed version 1 client sent
// after its ACQUIRE, goes to the owner: its heartbeats, and the first
// other byte, which the owner answers with the ERROR a direct server
// sends and after which it reads nothing of the claim; more is false
// from that byte on, and the caller passes nothing more. HopClientGone
// is the relaying node's word alone: a client's own goes as v1NoFrame,
// so that no client can end its claim as though it hung up (without its
// ERROR), nor have the owner read its next bytes as a hop header from a
// trusted member, carrying an address and identity the client chose.
// b is changed in place.
func V1FromClient(b []byte) (pass []byte, more bool) {
	for i, c := range b {
		if protocol.Type(c) == protocol.TypeHeartbeat {
			continue
		}
		if c == protocol.HopClientGone {
			b[i] = v1NoFrame
		}
		return b[:i+1], false
	}
	return b, true
}

// V1End is how a version 1 claim in this node's table ends by what its
// connection brings, once the heartbeats read with it are answered. A
// direct client's connection (Relayed false) ends it by a hang-up or a
// protocol error. A hop from a relaying node (Relayed) carries the
// client's bytes, and the relaying node's word that its client hung up
// (HopClientGone); a hop that breaks without that word is the relaying
// node's end (it died or was cut off), not the client's, whose client
// may still believe: the claim stays until the client's lease passes.
type V1End struct {
	Relayed bool
}

// V1Ending is how a read ends a version 1 claim.
type V1Ending struct {
	// Reason the claim leaves the table with; 0 when it does not leave
	// it now (another goroutine ends it, or KeepUntilLease).
	Reason locktable.Reason
	Code   protocol.Code // the ERROR to send the client, if any
	// KeepUntilLease: leave the claim in the table until the client's
	// lease has passed since it was last heard from, then end it as
	// expired: no one is promoted while the client may still believe.
	KeepUntilLease bool
	// PassHop: the relaying node said its client hung up, and nothing
	// followed: acknowledge with HopAck, and read the next hop header on
	// the connection.
	PassHop bool
}

// Other is the ending by b, the bytes read after the heartbeats (at
// least one). readOK is true when the read brought no error; orphaned
// when another goroutine has ended the claim and is about to send the
// client an ERROR.
func (e V1End) Other(b []byte, readOK, orphaned bool) V1Ending {
	if e.Relayed && b[0] == protocol.HopClientGone {
		// Nothing may follow the byte until this node's HopAck; if
		// nothing did, the hop carries the next claim.
		return V1Ending{Reason: locktable.ReasonGraceful, PassHop: len(b) == 1 && readOK && !orphaned}
	}
	return V1Ending{Reason: locktable.ReasonProtocolError, Code: V1Unexpected(b[0])}
}

// Broke is the ending by a read that failed other than on its deadline:
// the client hung up, or the hop broke.
func (e V1End) Broke(orphaned bool) V1Ending {
	if e.Relayed && !orphaned {
		// Without the relaying node's word that the client hung up.
		return V1Ending{KeepUntilLease: true}
	}
	return V1Ending{Reason: locktable.ReasonGraceful}
}

// Moved is the ending of a claim whose holder was told that its name
// moves (ERROR 0x01) while the claim stays in the table: it ends when
// the client hangs up (it stops its work before it closes) or its lease
// runs out, and heartbeats that crossed the ERROR go unanswered. b is
// what the read brought, failed whether it brought an error and timedOut
// whether that was its deadline (the lease's end). done is false while
// the claim stays. Through a relay, the hang-up is the relaying node's
// HopClientGone.
func (e V1End) Moved(b []byte, failed, timedOut bool) (end V1Ending, done bool) {
	switch {
	case e.Relayed && bytes.IndexByte(b, protocol.HopClientGone) >= 0:
		return V1Ending{Reason: locktable.ReasonMoved}, true
	case !failed:
		return V1Ending{}, false
	case e.Relayed && !timedOut:
		return V1Ending{KeepUntilLease: true}, true
	}
	return V1Ending{Reason: locktable.ReasonMoved}, true
}
