package clustercore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

func TestWelcomeFor(t *testing.T) {
	hello := func(flags uint8) protocol.Frame { return protocol.Frame{Type: protocol.TypeHello, Flags: flags} }
	all := protocol.HelloResumable | protocol.HelloDetach | protocol.HelloTickets
	for _, tc := range []struct {
		name          string
		hello         protocol.Frame
		relayed, ring bool
		want          OwnerWelcome
	}{
		{"a HELLO with no flags gets none", hello(0), false, true, OwnerWelcome{}},
		{"resumable: a secret of its own", hello(protocol.HelloResumable), false, false,
			OwnerWelcome{Flags: protocol.WelcomeResumable, Secret: true}},
		{"resumable on a cluster node: its ring too", hello(protocol.HelloResumable), false, true,
			OwnerWelcome{Flags: protocol.WelcomeResumable | protocol.WelcomeRing, Secret: true}},
		{"every feature", hello(all), false, true,
			OwnerWelcome{Flags: protocol.WelcomeResumable | protocol.WelcomeRing | protocol.WelcomeDetach | protocol.WelcomeTickets,
				Secret: true, Detach: true, Tickets: true}},
		{"detach needs resumable", hello(protocol.HelloDetach), false, true, OwnerWelcome{}},
		{"relayed resumable: no secret, no detach", hello(all), true, true,
			OwnerWelcome{Flags: protocol.WelcomeTickets, Tickets: true}},
	} {
		ownerCheck(t, tc.name, WelcomeFor(tc.hello, tc.relayed, tc.ring), tc.want)
	}
}

func TestReassertStepFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cluster   bool
		rt        OwnerRoute
		forwarded bool
		want      ReassertStep
	}{
		{"a single server decides", false, OwnerRoute{}, false, ReassertDecide},
		{"the owner decides", true, OwnerRoute{Serve: true}, true, ReassertDecide},
		{"a gated take-over decides", true, OwnerRoute{Gated: true, Since: 4}, true, ReassertDecide},
		{"another node's name is relayed", true, OwnerRoute{Forward: true}, false, ReassertForward},
		{"a relayed one is not relayed again", true, OwnerRoute{Forward: true}, true, ReassertNotNow},
		{"held without a take-over: 0x03", true, OwnerRoute{}, false, ReassertNotNow},
	} {
		ownerCheck(t, tc.name, ReassertStepFor(tc.cluster, tc.rt, tc.forwarded), tc.want)
	}
}

func TestReassertHolder(t *testing.T) {
	// Each case: what the owner holds for the origin, and whose claims the re-assertion takes.
	for name, tc := range map[string]struct {
		h    ReassertHolders
		want ReassertHolder
	}{
		"nothing held":                                  {ReassertHolders{}, HolderNone},
		"kept, secret matches":                          {ReassertHolders{Kept: true, KeptMatches: true}, HolderKept},
		"kept, its relaying node's upstream":            {ReassertHolders{Kept: true, Relays: true}, HolderKept},
		"kept, wrong secret: nothing, not the open one": {ReassertHolders{Kept: true, Live: true, LiveMatches: true}, HolderNone},
		"kept before open":                              {ReassertHolders{Kept: true, KeptMatches: true, Live: true, LiveMatches: true}, HolderKept},
		"open, secret matches":                          {ReassertHolders{Live: true, LiveMatches: true}, HolderLive},
		"open, its relaying node's upstream":            {ReassertHolders{Live: true, Relays: true}, HolderLive},
		"open, wrong secret":                            {ReassertHolders{Live: true}, HolderNone},
		"open with a wrong secret: the stand-in's":      {ReassertHolders{Live: true, StandIn: true, StandInMatches: true}, HolderStandIn},
		"a stand-in needs the secret":                   {ReassertHolders{StandIn: true, Relays: true}, HolderNone},
	} {
		ownerCheck(t, name, tc.h.Holder(), tc.want)
	}
}

func TestAdoptFits(t *testing.T) {
	held := locktable.ClaimView{Name: "a", Mode: locktable.Semaphore, Limit: 3, Status: locktable.Status{State: locktable.Owner, Token: 7}}
	queued := locktable.ClaimView{Name: "a", Mode: locktable.Exclusive, Status: locktable.Status{State: locktable.Waiting}}
	f := func(mode locktable.Mode, limit uint32, token uint64) protocol.Frame {
		return protocol.Frame{Name: "a", Mode: protocol.Mode(mode), Limit: limit, Token: token}
	}
	for _, tc := range []struct {
		name string
		c    locktable.ClaimView
		f    protocol.Frame
		want bool
	}{
		{"held, its token", held, f(locktable.Semaphore, 3, 7), true},
		{"held, no token (granted while away)", held, f(locktable.Semaphore, 3, 0), true},
		{"held, another token", held, f(locktable.Semaphore, 3, 8), false},
		{"another limit", held, f(locktable.Semaphore, 4, 7), false},
		{"another mode", held, f(locktable.Exclusive, 3, 7), false},
		{"another name", held, protocol.Frame{Name: "b", Mode: protocol.Mode(locktable.Semaphore), Limit: 3, Token: 7}, false},
		{"queued, no token", queued, f(locktable.Exclusive, 0, 0), true},
		{"queued, a token", queued, f(locktable.Exclusive, 0, 7), false},
	} {
		ownerCheck(t, tc.name, AdoptFits(tc.c, tc.f), tc.want)
	}
}

func TestTakeOverFor(t *testing.T) {
	re := protocol.ClaimReassert
	for _, tc := range []struct {
		name  string
		f     protocol.Frame
		since uint64
		want  TakeOver
		flags uint8 // of the claim held, for TakeOverRequeue
	}{
		{"an older ring: 0x05", protocol.Frame{Flags: re, Ring: 3, Token: 7}, 4, TakeOverStaleRing, 0},
		{"the take-over's ring: installed", protocol.Frame{Flags: re, Ring: 4, Token: 7}, 4, TakeOverInstall, 0},
		{"a restart (ring 0) takes any", protocol.Frame{Flags: re, Token: 7}, 0, TakeOverInstall, 0},
		{"queued, no ticket: a plain claim", protocol.Frame{Flags: re | protocol.ClaimTicket, Ring: 5}, 4, TakeOverRequeue, 0},
		{"queued with its ticket keeps it", protocol.Frame{Flags: re | protocol.ClaimTicket, Ring: 5, Ticket: 9}, 4, TakeOverRequeue, protocol.ClaimTicket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, held := TakeOverFor(tc.f, tc.since)
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if got == TakeOverRequeue && (held.Flags != tc.flags || held.Ticket != tc.f.Ticket) {
				t.Fatalf("held flags %#x ticket %d, want %#x %d", held.Flags, held.Ticket, tc.flags, tc.f.Ticket)
			}
		})
	}
}

func TestTakeOverRefusal(t *testing.T) {
	for err, want := range map[error]protocol.Code{
		locktable.ErrModeConflict:                       protocol.CodeModeConflict,
		fmt.Errorf("x: %w", locktable.ErrLimitMismatch): protocol.CodeModeConflict,
		locktable.ErrReassertConflict:                   protocol.CodeReassertRefused,
		errors.New("anything else"):                     protocol.CodeReassertRefused,
	} {
		if got := TakeOverRefusal(err, protocol.CodeModeConflict); got != want {
			t.Errorf("%v: got %v, want %v", err, got, want)
		}
	}
}

// ownerCheck runs one case of a table: got is what the rule decided.
func ownerCheck[T comparable](t *testing.T, name string, got, want T) {
	t.Run(name, func(t *testing.T) {
		if got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}
