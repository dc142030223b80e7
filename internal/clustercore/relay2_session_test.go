package clustercore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

func TestRelay2ReleaseOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  bool
		c     *Claim
		want  Relay2Release
		after ClaimState
	}{
		{"held: dropped", true, nil, Relay2ReleaseHeld, 0},
		{"not relayed: this node's table answers", false, nil, Relay2ReleaseHere, 0},
		{"moving: after the adoption", false, &Claim{State: ClaimMoving}, Relay2ReleaseAfterAdoption, ClaimMoving},
		{"live: relayed, releasing", false, &Claim{State: ClaimLive}, Relay2ReleaseRelayed, ClaimReleasing},
		{"pending: relayed, releasing", false, &Claim{State: ClaimPending}, Relay2ReleaseRelayed, ClaimReleasing},
	} {
		got := Relay2ReleaseOf(tc.held, tc.c)
		if got != tc.want || tc.c != nil && tc.c.State != tc.after {
			t.Errorf("%s: %v, want %v (state %v)", tc.name, got, tc.want, tc.c)
		}
	}
}

func TestRelay2Confirmation(t *testing.T) {
	t0 := time.Unix(100, 0)
	type up struct {
		at       time.Time
		protects bool
	}
	get := func(u up) (time.Time, bool) { return u.at, u.protects }
	ups := map[string]up{
		"a": {t0.Add(2 * time.Second), true},
		"b": {t0.Add(time.Second), true},
		"c": {t0, false}, // no claim: protects nothing
	}
	c := Relay2Confirmation(false, ups, get)
	if !c.After(t0.Add(time.Second)) || c.After(t0.Add(1500*time.Millisecond)) {
		t.Error("not confirmed through the earliest protecting upstream")
	}
	if Relay2Confirmation(true, ups, get).After(t0) {
		t.Error("a claim moving released an answer")
	}
	if !Relay2Confirmation(false, map[string]up{}, get).After(t0.Add(time.Hour)) {
		t.Error("nothing to protect held an answer")
	}
}

func TestUpstreamRefusals(t *testing.T) {
	var r UpstreamRefusals
	if tk, vl := r.Asks("o:1", true, true); !tk || !vl {
		t.Fatal("an owner never refused is asked what the client asked")
	}
	if tk, vl := r.Asks("o:1", false, true); tk || !vl {
		t.Fatal("asked for what the client did not ask")
	}
	r.Refused("o:1")
	if tk, vl := r.Asks("o:1", true, true); tk || vl {
		t.Fatal("an owner that refused is asked again")
	}
	if tk, vl := r.Asks("o:2", true, true); !tk || !vl {
		t.Fatal("another owner is not asked")
	}
	hello := []byte("HELLO2")
	got := UpstreamReopenBytes(hello, []byte("hello1CLAIMRELEASE"), len("hello1"))
	if !bytes.Equal(got, []byte("HELLO2CLAIMRELEASE")) {
		t.Fatalf("reopened with %q", got)
	}
}

func TestRelay2Attach(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		open, inTable, relayed bool
		want                   error
	}{
		{"a free id", true, false, false, nil},
		{"in this node's table", true, true, false, locktable.ErrClaimExists},
		{"in the table of an ending session", false, true, false, locktable.ErrClaimExists},
		{"relayed already", true, false, true, locktable.ErrClaimExists},
		{"the session ends", false, false, true, locktable.ErrNoSession},
	} {
		if got := Relay2Attach(tc.open, tc.inTable, tc.relayed); !errors.Is(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRelay2HeldEntered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner bool
		err   error
		want  Relay2HeldEntry
	}{
		{"granted: PROMOTED", true, nil, Relay2HeldPromoted},
		{"queued: nothing new", false, nil, Relay2HeldQuiet},
		{"refused: REVOKED", false, locktable.ErrModeConflict, Relay2HeldRevoked},
		{"the table shuts down", false, locktable.ErrShutdown, Relay2HeldQuiet},
		{"the session ends", false, locktable.ErrNoSession, Relay2HeldQuiet},
		{"in the table already: its answers stand", false, locktable.ErrClaimExists, Relay2HeldQuiet},
	} {
		if got := Relay2HeldEntered(tc.owner, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
