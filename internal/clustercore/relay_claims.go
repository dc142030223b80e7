package clustercore

import (
	"errors"
	"fmt"

	"github.com/batonlock/baton/protocol"
)

// ClaimState is where a relayed claim stands as the relaying node sees it.
type ClaimState uint8

const (
	ClaimPending   ClaimState = iota // CLAIM sent, not answered yet
	ClaimLive                        // answered GRANTED or QUEUED
	ClaimReleasing                   // RELEASE sent
	ClaimEnded
	ClaimMoving // moving to a new owner, not adopted yet
)

// Claim is what the relaying node decides about one relayed claim (one
// use of a claim id).
type Claim struct {
	ID    uint32
	State ClaimState
	// Req is the CLAIM sent for it, and Token the owner's grant: what a
	// move needs to adopt it at the new owner.
	Req   protocol.Frame
	Token uint64
	// Ticket is the queue ticket of the owner's QUEUED (0: none), for a
	// re-assertion of a queued claim at a new owner.
	Ticket uint64
	// MovedAnswer: a RELEASE of it is in flight on its old upstream,
	// which answers it MOVED.
	MovedAnswer bool
}

// End marks c ended; it reports false when it already was.
func (c *Claim) End() bool {
	if c.State == ClaimEnded {
		return false
	}
	c.State = ClaimEnded
	return true
}

// Answered applies the owner's answer f to a CLAIM, RELEASE or PROCLAIM
// of c whose answer goes to the client, and reports whether the claim
// ends (its id is free): BUSY, REFUSED and RELEASED end it, GRANTED and
// QUEUED make it live, PROCLAIMED leaves it as it is.
func (c *Claim) Answered(f protocol.Frame) (end bool) {
	switch f.Type {
	case protocol.TypeGranted, protocol.TypeQueued:
		if c.State == ClaimPending {
			c.State = ClaimLive
		}
		if f.Type == protocol.TypeGranted {
			c.Token = f.Token
		} else {
			c.Ticket = f.Ticket
		}
		return false
	case protocol.TypeProclaimed: // the claim lives on
		return false
	}
	return true
}

// HeldAnswer applies the owner's answer f to the CLAIM of a held claim
// relayed late, whose client was told QUEUED already, and returns what
// the client must hear as a push: GRANTED is pushed as PROMOTED, QUEUED
// says nothing new, BUSY and REFUSED are pushed as REVOKED (BUSY with
// 0x03). A claim the client is releasing hears nothing: its RELEASED
// follows. end says the claim ends.
func (c *Claim) HeldAnswer(f protocol.Frame) (push []byte, end bool) {
	if c.State != ClaimPending {
		return nil, f.Type == protocol.TypeBusy || f.Type == protocol.TypeRefused
	}
	switch f.Type {
	case protocol.TypeGranted:
		c.State, c.Token = ClaimLive, f.Token
		return protocol.AppendPromoted(nil, f.Claim, f.Token), false
	case protocol.TypeQueued:
		c.State, c.Ticket = ClaimLive, f.Ticket
		return nil, false
	}
	code := f.Code
	if f.Type == protocol.TypeBusy {
		code = protocol.CodeNotOwner
	}
	return protocol.AppendRevoked(nil, f.Claim, code, ""), true
}

// Pushed applies the owner's push f (PROMOTED or REVOKED) about c, which
// the client hears as it is, and reports whether the claim ends: a live
// claim revoked.
func (c *Claim) Pushed(f protocol.Frame) (end bool) {
	if f.Type == protocol.TypeRevoked {
		return c.State == ClaimLive
	}
	if f.Type == protocol.TypePromoted {
		c.Token = f.Token
	}
	return false
}

// Unopened settles CLAIM f of c, sent on an upstream that could not be
// opened (dialling, the hop header or HELLO failed): the owner granted
// nothing on it. answer is what the client, if it waits for an answer,
// is told: QUEUED (a no-wait claim BUSY), or REFUSED 0x03 for a
// re-assertion, which is not a new claim to queue (the client retries
// it). hold says the claim is still wanted: it is held, as if Route had
// said hold, and relayed once its owner can be reached. A claim the
// client is releasing is dropped (its RELEASED follows). The claim ends
// here either way.
func (c *Claim) Unopened(f protocol.Frame) (answer []byte, hold bool) {
	switch {
	case f.Reassert():
		return protocol.AppendRefused(nil, f.Claim, protocol.CodeNotOwner, ""), false
	case f.NoWait():
		return protocol.AppendBusy(nil, f.Claim), false
	}
	return protocol.AppendQueued(nil, f.Claim), c.State == ClaimPending
}

// RequestFate is what becomes of a request in flight on an upstream
// that failed (FailedRequest).
type RequestFate uint8

const (
	// FateAnswered: the client is told the answer; the claim ends.
	FateAnswered RequestFate = iota
	// FateTold: the client is told the answer; the claim lives on.
	FateTold
	// FateAdoptAgain: an adoption at a new owner not answered: asked
	// again, the claim taken off the upstream.
	FateAdoptAgain
	// FateUnopened: a CLAIM on an upstream never opened (Unopened).
	FateUnopened
	// FateRevokeLater: a held claim relayed late, whose client was told
	// QUEUED: it counts as live, and is settled with the upstream's
	// claims (Failed).
	FateRevokeLater
	// FateKept: a RELEASE of a claim that moved: it goes to the new
	// owner.
	FateKept
	// FateOther: not a claim's request (RANGE, PING, HELLO): the caller
	// settles it.
	FateOther
)

// FailedRequest decides what becomes of request kind about c, in flight
// on an upstream that ended without the client: opened says the owner
// had answered its HELLO, answered that the client waits for an answer
// to it, reassert that the upstream's claims are re-asserted at the
// names' next owner (Reassertable). An opened upstream's CLAIM is
// REFUSED 0x03 and its RELEASE RELEASED; a PROCLAIM is answered set when
// its claim is re-asserted (with the new value) and granted, else not in
// use (the claim is revoked, which crossed the PROCLAIM).
func (c *Claim) FailedRequest(kind protocol.Type, opened, answered, reassert bool) (RequestFate, []byte) {
	switch kind {
	case protocol.TypeClaim:
		switch {
		case c.State == ClaimMoving:
			return FateAdoptAgain, nil
		case !opened:
			return FateUnopened, nil
		case !answered:
			if c.State == ClaimPending {
				c.State = ClaimLive // revoked with the others
			}
			return FateRevokeLater, nil
		}
		return FateAnswered, protocol.AppendRefused(nil, c.ID, protocol.CodeNotOwner, "")
	case protocol.TypeProclaim:
		status := protocol.ProclaimNotInUse
		if reassert && c.Token != 0 {
			status = protocol.ProclaimSet
		}
		return FateTold, protocol.AppendProclaimed(nil, c.ID, status)
	case protocol.TypeRelease:
		if !answered {
			return FateKept, nil
		}
		return FateAnswered, protocol.AppendReleased(nil, c.ID)
	}
	return FateOther, nil
}

// ClaimFate is what becomes of a claim of an upstream that failed.
type ClaimFate uint8

const (
	// ClaimGone: nothing to tell (not granted or queued).
	ClaimGone ClaimFate = iota
	// ClaimLost: the client is told REVOKED 0x03.
	ClaimLost
	// ClaimReassert: re-asserted at the name's next owner; the client
	// sees nothing but the delay of its answers.
	ClaimReassert
)

// Failed decides what becomes of c when its upstream fails: a live
// claim is re-asserted at the name's next owner when reassert says so,
// as a client talking to owners directly would, unless it cannot be (it
// was attached without its CLAIM); otherwise it is lost, and revoke is
// the REVOKED 0x03 the client is told.
func (c *Claim) Failed(reassert bool) (fate ClaimFate, revoke []byte) {
	switch {
	case c.State != ClaimLive:
		return ClaimGone, nil
	case reassert && c.Req.Name != "":
		return ClaimReassert, nil
	}
	return ClaimLost, protocol.AppendRevoked(nil, c.ID, protocol.CodeNotOwner, "")
}

// OwnerLost is why an open upstream ended when the connection itself
// failed (EOF, reset, a read or write error, the patience ran out): the
// owner may have died, or been cut off.
type OwnerLost struct{ Err error }

func (e OwnerLost) Error() string { return e.Err.Error() }

func (e OwnerLost) Unwrap() error { return e.Err }

// OwnerEnded is why an upstream ended when the owner sent a
// session-level ERROR.
type OwnerEnded struct{ F protocol.Frame }

func (e OwnerEnded) Error() string { return fmt.Sprintf("the owner ended the session: %v", e.F) }

// Reassertable reports whether the claims of an open upstream that ended
// for why are re-asserted at the name's next owner rather than revoked:
// the connection failed (the owner died, or a cut), or the owner said it
// stops serving and another node takes its names over (ERROR 0x01, a
// shutdown or a node leaving; ERROR 0x03, an owner cut off from its
// quorum). An owner that ends the session for anything else (a protocol
// violation, a kick) meant it: the claims are lost.
func Reassertable(why error) bool {
	var lost OwnerLost
	if errors.As(why, &lost) {
		return true
	}
	var ended OwnerEnded
	if errors.As(why, &ended) {
		return ended.F.Code == protocol.CodeShuttingDown || ended.F.Code == protocol.CodeNotOwner
	}
	return false
}
