package clustercore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestClaimAnswered(t *testing.T) {
	for _, tc := range []struct {
		name          string
		st            ClaimState
		f             protocol.Frame
		end           bool
		want          ClaimState
		token, ticket uint64
	}{
		{"GRANTED makes it live with the token", ClaimPending, protocol.Frame{Type: protocol.TypeGranted, Token: 9}, false, ClaimLive, 9, 0},
		{"QUEUED makes it live with the ticket", ClaimPending, protocol.Frame{Type: protocol.TypeQueued, Ticket: 4}, false, ClaimLive, 0, 4},
		{"a releasing claim stays releasing", ClaimReleasing, protocol.Frame{Type: protocol.TypeGranted, Token: 9}, false, ClaimReleasing, 9, 0},
		{"PROCLAIMED: it lives on", ClaimLive, protocol.Frame{Type: protocol.TypeProclaimed}, false, ClaimLive, 0, 0},
		{"BUSY ends it", ClaimPending, protocol.Frame{Type: protocol.TypeBusy}, true, ClaimPending, 0, 0},
		{"REFUSED ends it", ClaimPending, protocol.Frame{Type: protocol.TypeRefused}, true, ClaimPending, 0, 0},
		{"RELEASED ends it", ClaimReleasing, protocol.Frame{Type: protocol.TypeReleased}, true, ClaimReleasing, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 1, State: tc.st}
			if end := c.Answered(tc.f); end != tc.end || c.State != tc.want || c.Token != tc.token || c.Ticket != tc.ticket {
				t.Fatalf("end %v, claim %+v; want %v, state %d token %d ticket %d", end, c, tc.end, tc.want, tc.token, tc.ticket)
			}
		})
	}
}

func TestClaimHeldAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   ClaimState
		f    protocol.Frame
		push []byte
		end  bool
		want ClaimState
	}{
		{"GRANTED is pushed as PROMOTED", ClaimPending, protocol.Frame{Type: protocol.TypeGranted, Claim: 3, Token: 9},
			protocol.AppendPromoted(nil, 3, 9), false, ClaimLive},
		{"QUEUED says nothing new", ClaimPending, protocol.Frame{Type: protocol.TypeQueued, Claim: 3}, nil, false, ClaimLive},
		{"BUSY is pushed as REVOKED 0x03", ClaimPending, protocol.Frame{Type: protocol.TypeBusy, Claim: 3},
			protocol.AppendRevoked(nil, 3, protocol.CodeNotOwner, ""), true, ClaimPending},
		{"REFUSED is pushed as REVOKED with its code", ClaimPending, protocol.Frame{Type: protocol.TypeRefused, Claim: 3, Code: protocol.CodeShuttingDown},
			protocol.AppendRevoked(nil, 3, protocol.CodeShuttingDown, ""), true, ClaimPending},
		{"a claim being released hears nothing of a grant", ClaimReleasing, protocol.Frame{Type: protocol.TypeGranted, Claim: 3, Token: 9}, nil, false, ClaimReleasing},
		{"a claim being released ends on BUSY, silently", ClaimReleasing, protocol.Frame{Type: protocol.TypeBusy, Claim: 3}, nil, true, ClaimReleasing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 3, State: tc.st}
			push, end := c.HeldAnswer(tc.f)
			if !bytes.Equal(push, tc.push) || end != tc.end || c.State != tc.want {
				t.Fatalf("push %x, end %v, state %d; want %x, %v, %d", push, end, c.State, tc.push, tc.end, tc.want)
			}
		})
	}
}

func TestClaimPushed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    ClaimState
		f     protocol.Frame
		end   bool
		token uint64
	}{
		{"REVOKED ends a live claim", ClaimLive, protocol.Frame{Type: protocol.TypeRevoked}, true, 0},
		{"REVOKED of a claim being released does not end it", ClaimReleasing, protocol.Frame{Type: protocol.TypeRevoked}, false, 0},
		{"PROMOTED records the token", ClaimLive, protocol.Frame{Type: protocol.TypePromoted, Token: 7}, false, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{State: tc.st}
			if end := c.Pushed(tc.f); end != tc.end || c.Token != tc.token {
				t.Fatalf("end %v, token %d; want %v, %d", end, c.Token, tc.end, tc.token)
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
		st                         ClaimState
		token                      uint64
		kind                       protocol.Type
		opened, answered, reassert bool
		fate                       RequestFate
		answer                     []byte
		after                      ClaimState
	}{
		{"an adoption is asked again", ClaimMoving, 0, protocol.TypeClaim, true, false, true, FateAdoptAgain, nil, ClaimMoving},
		{"a CLAIM never sent to an open owner", ClaimPending, 0, protocol.TypeClaim, false, true, false, FateUnopened, nil, ClaimPending},
		{"a CLAIM is refused 0x03", ClaimPending, 0, protocol.TypeClaim, true, true, false, FateAnswered,
			protocol.AppendRefused(nil, 6, protocol.CodeNotOwner, ""), ClaimPending},
		{"a held claim relayed late counts as live", ClaimPending, 0, protocol.TypeClaim, true, false, false, FateRevokeLater, nil, ClaimLive},
		{"a RELEASE is answered RELEASED", ClaimReleasing, 0, protocol.TypeRelease, true, true, false, FateAnswered,
			protocol.AppendReleased(nil, 6), ClaimReleasing},
		{"a RELEASE of a claim that moved goes on", ClaimMoving, 0, protocol.TypeRelease, true, false, false, FateKept, nil, ClaimMoving},
		{"a PROCLAIM of a granted claim re-asserted is set", ClaimLive, 8, protocol.TypeProclaim, true, true, true, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimSet), ClaimLive},
		{"a PROCLAIM of a queued claim re-asserted is not in use", ClaimLive, 0, protocol.TypeProclaim, true, true, true, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimNotInUse), ClaimLive},
		{"a PROCLAIM of a claim lost is not in use", ClaimLive, 8, protocol.TypeProclaim, true, true, false, FateTold,
			protocol.AppendProclaimed(nil, 6, protocol.ProclaimNotInUse), ClaimLive},
		{"a PING is the caller's", ClaimLive, 0, protocol.TypePing, true, false, false, FateOther, nil, ClaimLive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 6, State: tc.st, Token: tc.token}
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
