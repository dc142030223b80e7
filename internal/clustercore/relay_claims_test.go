package clustercore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// relayStep applies an owner's frame to a claim as one of Claim's
// methods does, as (a push for the client, the claim ends).
type relayStep func(c *Claim, f protocol.Frame) ([]byte, bool)

var (
	relayAnswered relayStep = func(c *Claim, f protocol.Frame) ([]byte, bool) { return nil, c.Answered(f) }
	relayHeldAns  relayStep = (*Claim).HeldAnswer
	relayPushed   relayStep = func(c *Claim, f protocol.Frame) ([]byte, bool) { return nil, c.Pushed(f) }
)

func TestClaimOwnerFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  relayStep
		st    ClaimState
		f     protocol.Frame
		push  []byte
		end   bool
		after Claim
	}{
		{"GRANTED makes it live with the token", relayAnswered, ClaimPending, protocol.Frame{Type: protocol.TypeGranted, Token: 9}, nil, false, Claim{State: ClaimLive, Token: 9}},
		{"QUEUED makes it live with the ticket", relayAnswered, ClaimPending, protocol.Frame{Type: protocol.TypeQueued, Ticket: 4}, nil, false, Claim{State: ClaimLive, Ticket: 4}},
		{"a releasing claim stays releasing", relayAnswered, ClaimReleasing, protocol.Frame{Type: protocol.TypeGranted, Token: 9}, nil, false, Claim{State: ClaimReleasing, Token: 9}},
		{"PROCLAIMED: it lives on", relayAnswered, ClaimLive, protocol.Frame{Type: protocol.TypeProclaimed}, nil, false, Claim{State: ClaimLive}},
		{"BUSY ends it", relayAnswered, ClaimPending, protocol.Frame{Type: protocol.TypeBusy}, nil, true, Claim{State: ClaimPending}},
		{"REFUSED ends it", relayAnswered, ClaimPending, protocol.Frame{Type: protocol.TypeRefused}, nil, true, Claim{State: ClaimPending}},
		{"RELEASED ends it", relayAnswered, ClaimReleasing, protocol.Frame{Type: protocol.TypeReleased}, nil, true, Claim{State: ClaimReleasing}},

		{"held: GRANTED is pushed as PROMOTED", relayHeldAns, ClaimPending, protocol.Frame{Type: protocol.TypeGranted, Claim: 3, Token: 9},
			protocol.AppendPromoted(nil, 3, 9), false, Claim{State: ClaimLive, Token: 9}},
		{"held: QUEUED says nothing new", relayHeldAns, ClaimPending, protocol.Frame{Type: protocol.TypeQueued, Claim: 3, Ticket: 2}, nil, false, Claim{State: ClaimLive, Ticket: 2}},
		{"held: BUSY is pushed as REVOKED 0x03", relayHeldAns, ClaimPending, protocol.Frame{Type: protocol.TypeBusy, Claim: 3},
			protocol.AppendRevoked(nil, 3, protocol.CodeNotOwner, ""), true, Claim{State: ClaimPending}},
		{"held: REFUSED is pushed as REVOKED with its code", relayHeldAns, ClaimPending, protocol.Frame{Type: protocol.TypeRefused, Claim: 3, Code: protocol.CodeShuttingDown},
			protocol.AppendRevoked(nil, 3, protocol.CodeShuttingDown, ""), true, Claim{State: ClaimPending}},
		{"held: a claim being released hears nothing of a grant", relayHeldAns, ClaimReleasing, protocol.Frame{Type: protocol.TypeGranted, Claim: 3, Token: 9}, nil, false, Claim{State: ClaimReleasing}},
		{"held: a claim being released ends on BUSY, silently", relayHeldAns, ClaimReleasing, protocol.Frame{Type: protocol.TypeBusy, Claim: 3}, nil, true, Claim{State: ClaimReleasing}},

		{"REVOKED ends a live claim", relayPushed, ClaimLive, protocol.Frame{Type: protocol.TypeRevoked}, nil, true, Claim{State: ClaimLive}},
		{"REVOKED of a claim being released does not end it", relayPushed, ClaimReleasing, protocol.Frame{Type: protocol.TypeRevoked}, nil, false, Claim{State: ClaimReleasing}},
		{"PROMOTED records the token", relayPushed, ClaimLive, protocol.Frame{Type: protocol.TypePromoted, Token: 7}, nil, false, Claim{State: ClaimLive, Token: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{State: tc.st}
			push, end := tc.step(&c, tc.f)
			if !bytes.Equal(push, tc.push) || end != tc.end || c != tc.after {
				t.Fatalf("push %x, end %v, claim %+v; want %x, %v, %+v", push, end, c, tc.push, tc.end, tc.after)
			}
		})
	}
}

func TestClaimUnopened(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     ClaimState
		f      protocol.Frame
		answer []byte
		hold   bool
	}{
		{"a waiting claim is told QUEUED and held", ClaimPending, protocol.Frame{Type: protocol.TypeClaim, Claim: 2},
			protocol.AppendQueued(nil, 2), true},
		{"a no-wait claim is told BUSY", ClaimPending, protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimNoWait},
			protocol.AppendBusy(nil, 2), false},
		{"a re-assertion is refused", ClaimPending, protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimReassert, Token: 5},
			protocol.AppendRefused(nil, 2, protocol.CodeNotOwner, ""), false},
		{"a claim being released is dropped", ClaimReleasing, protocol.Frame{Type: protocol.TypeClaim, Claim: 2},
			protocol.AppendQueued(nil, 2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 2, State: tc.st}
			answer, hold := c.Unopened(tc.f)
			if !bytes.Equal(answer, tc.answer) || hold != tc.hold {
				t.Fatalf("answer %x, hold %v; want %x, %v", answer, hold, tc.answer, tc.hold)
			}
		})
	}
}

func TestClaimFailedRequest(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		c                          Claim
		kind                       protocol.Type
		opened, answered, reassert bool
		fate                       RequestFate
		answer                     []byte
		after                      ClaimState
	}{
		{"an adoption is asked again", Claim{State: ClaimMoving}, protocol.TypeClaim, true, false, true, FateAdoptAgain, nil, ClaimMoving},
		{"a CLAIM on an upstream never opened", Claim{State: ClaimPending}, protocol.TypeClaim, false, true, false, FateUnopened, nil, ClaimPending},
		{"a CLAIM is refused 0x03", Claim{State: ClaimPending}, protocol.TypeClaim, true, true, false, FateAnswered,
			protocol.AppendRefused(nil, 6, protocol.CodeNotOwner, ""), ClaimPending},
		{"a held claim relayed late counts as live", Claim{State: ClaimPending}, protocol.TypeClaim, true, false, false, FateRevokeLater, nil, ClaimLive},
		{"a RELEASE is answered RELEASED", Claim{State: ClaimReleasing}, protocol.TypeRelease, true, true, false, FateAnswered,
			protocol.AppendReleased(nil, 6), ClaimReleasing},
		{"a RELEASE of a claim that moved goes on", Claim{State: ClaimMoving}, protocol.TypeRelease, true, false, false, FateKept, nil, ClaimMoving},
		{"a PROCLAIM of a granted claim re-asserted is set", Claim{State: ClaimLive, Token: 8}, protocol.TypeProclaim, true, true, true, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimSet), ClaimLive},
		{"a PROCLAIM of a queued claim re-asserted is not in use", Claim{State: ClaimLive}, protocol.TypeProclaim, true, true, true, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimNotInUse), ClaimLive},
		{"a PROCLAIM of a claim lost is not in use", Claim{State: ClaimLive, Token: 8}, protocol.TypeProclaim, true, true, false, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimNotInUse), ClaimLive},
		{"a PING is the caller's", Claim{State: ClaimLive}, protocol.TypePing, true, false, false, FateOther, nil, ClaimLive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.ID = 6
			fate, answer := c.FailedRequest(tc.kind, tc.opened, tc.answered, tc.reassert)
			if fate != tc.fate || !bytes.Equal(answer, tc.answer) || c.State != tc.after {
				t.Fatalf("fate %d, answer %x, state %d; want %d, %x, %d", fate, answer, c.State, tc.fate, tc.answer, tc.after)
			}
		})
	}
}

func TestClaimFailed(t *testing.T) {
	named := protocol.Frame{Type: protocol.TypeClaim, Name: "n"}
	for _, tc := range []struct {
		name     string
		st       ClaimState
		req      protocol.Frame
		reassert bool
		fate     ClaimFate
		revoke   []byte
	}{
		{"a live claim is re-asserted", ClaimLive, named, true, ClaimReassert, nil},
		{"one attached without its CLAIM is lost", ClaimLive, protocol.Frame{}, true, ClaimLost, protocol.AppendRevoked(nil, 4, protocol.CodeNotOwner, "")},
		{"a live claim is lost when the owner meant it", ClaimLive, named, false, ClaimLost, protocol.AppendRevoked(nil, 4, protocol.CodeNotOwner, "")},
		{"a pending claim is gone", ClaimPending, named, true, ClaimGone, nil},
		{"a claim being released is gone", ClaimReleasing, named, true, ClaimGone, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 4, State: tc.st, Req: tc.req}
			fate, revoke := c.Failed(tc.reassert)
			if fate != tc.fate || !bytes.Equal(revoke, tc.revoke) {
				t.Fatalf("fate %d, revoke %x; want %d, %x", fate, revoke, tc.fate, tc.revoke)
			}
		})
	}
}

func TestClaimEnd(t *testing.T) {
	c := Claim{State: ClaimLive}
	if !c.End() || c.State != ClaimEnded {
		t.Fatal("End of a live claim")
	}
	if c.End() {
		t.Fatal("End twice reported true")
	}
}

func TestReassertable(t *testing.T) {
	for _, tc := range []struct {
		why  error
		want bool
	}{
		{OwnerLost{io.EOF}, true},
		{fmt.Errorf("wrapped: %w", OwnerLost{io.EOF}), true},
		{OwnerEnded{protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeShuttingDown}}, true},
		{OwnerEnded{protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeNotOwner}}, true},
		{OwnerEnded{protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeClosedByAdmin}}, false},
		{errors.New("dialling the owner: refused"), false},
	} {
		if got := Reassertable(tc.why); got != tc.want {
			t.Errorf("Reassertable(%v) = %v, want %v", tc.why, got, tc.want)
		}
	}
}
