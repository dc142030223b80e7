package clustercore

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

func TestHandoffRangeAsked(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	all := HandoffRangeAsk{Clustered: true, Forwarded: true, HasOrigin: true, Owns: yes}
	for _, tc := range []struct {
		name    string
		a       HandoffRangeAsk
		adopt   bool
		want    protocol.RangeStatus
		proceed bool
	}{
		{"adopt of a key served here", all, true, 0, true},
		{"reassert of a key served here", all, false, 0, true},
		{"not a cluster node", HandoffRangeAsk{Forwarded: true, HasOrigin: true, Owns: yes}, true, protocol.RangeInvalid, false},
		{"a client's own session may not adopt", HandoffRangeAsk{Clustered: true, HasOrigin: true, Owns: yes}, true, protocol.RangeInvalid, false},
		{"a client's own session may not reassert", HandoffRangeAsk{Clustered: true, HasOrigin: true, Owns: yes}, false, protocol.RangeInvalid, false},
		{"an adopt must name its origin", HandoffRangeAsk{Clustered: true, Forwarded: true, Owns: yes}, true, protocol.RangeInvalid, false},
		{"a reassert needs no origin", HandoffRangeAsk{Clustered: true, Forwarded: true, Owns: yes}, false, 0, true},
		{"a key not owned here: not now", HandoffRangeAsk{Clustered: true, Forwarded: true, HasOrigin: true, Owns: no}, true, protocol.RangeUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, proceed := HandoffRangeAsked(tc.a, tc.adopt)
			if st != tc.want || proceed != tc.proceed {
				t.Fatalf("status %d proceed %v, want %d %v", st, proceed, tc.want, tc.proceed)
			}
		})
	}
}

// The Router is asked only for a session that may take up range locks:
// nothing else changes on a refused request.
func TestHandoffRangeAskedRoutesOnlyWhenAllowed(t *testing.T) {
	for _, a := range []HandoffRangeAsk{{Forwarded: true, HasOrigin: true}, {Clustered: true, HasOrigin: true}, {Clustered: true, Forwarded: true}} {
		asked := false
		a.Owns = func() bool { asked = true; return true }
		if HandoffRangeAsked(a, true); asked {
			t.Errorf("%+v: the Router was asked for a refused adopt", a)
		}
	}
}

func TestHandoffAdopted(t *testing.T) {
	for _, tc := range []struct {
		standIn bool
		moved   int
		want    protocol.RangeStatus
	}{
		{false, 0, protocol.RangeFree},
		{true, 0, protocol.RangeFree},
		{true, 2, protocol.RangeDone},
	} {
		if got := HandoffAdopted(tc.standIn, tc.moved); got != tc.want {
			t.Errorf("HandoffAdopted(%v, %d) = %d, want %d", tc.standIn, tc.moved, got, tc.want)
		}
	}
}

func TestHandoffInstalled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gated bool
		err   error
		want  protocol.RangeStatus
	}{
		{"installed", false, nil, protocol.RangeDone},
		{"a gated key: not now", true, nil, protocol.RangeUnavailable},
		{"a conflicting lock", false, rangelock.ErrConflict, protocol.RangeConflict},
		{"a wrapped conflict", false, errors.Join(errors.New("x"), rangelock.ErrConflict), protocol.RangeConflict},
		{"any other refusal", false, errors.New("bad range"), protocol.RangeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HandoffInstalled(tc.gated, tc.err); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
}

func TestHandoffStandInLease(t *testing.T) {
	for _, tc := range []struct {
		name       string
		existing   bool
		cur, lease time.Duration
		keep       time.Duration
		reset      bool
	}{
		{"a new stand-in keeps them for their lease", false, 0, 5 * time.Second, 5 * time.Second, false},
		{"a longer lease restarts the timer", true, 3 * time.Second, 5 * time.Second, 5 * time.Second, true},
		{"a shorter lease changes nothing", true, 5 * time.Second, 3 * time.Second, 5 * time.Second, false},
		{"an equal lease changes nothing", true, 5 * time.Second, 5 * time.Second, 5 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, reset := HandoffStandInLease(tc.existing, tc.cur, tc.lease)
			if keep != tc.keep || reset != tc.reset {
				t.Fatalf("keep %v reset %v, want %v %v", keep, reset, tc.keep, tc.reset)
			}
		})
	}
}

func TestHandoffStillServes(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		moving, forward, notOwner bool
		want                      bool
	}{
		{"served, or held for a warm-up: it enters", false, false, false, true},
		{"frozen by a planned change: refused", true, false, false, false},
		{"another node's now: refused", false, true, false, false},
		{"not this node's: refused", false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HandoffStillServes(tc.moving, tc.forward, tc.notOwner); got != tc.want {
				t.Fatalf("serves %v, want %v", got, tc.want)
			}
		})
	}
}
