package clustercore

import (
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

func TestSessionEndDiedUnannounced(t *testing.T) {
	for _, tc := range []struct {
		e    SessionEnd
		want bool
	}{
		{SessionEnd{Detach: true, HungUp: true}, true},
		{SessionEnd{Detach: true, Detached: true, HungUp: true}, false}, // said DETACH first
		{SessionEnd{Detach: true}, false},                               // a deadline, not a hang-up
		{SessionEnd{HungUp: true}, false},                               // no promise made
	} {
		if got := tc.e.DiedUnannounced(); got != tc.want {
			t.Errorf("%+v.DiedUnannounced() = %v, want %v", tc.e, got, tc.want)
		}
	}
}

func TestSessionEndKeeps(t *testing.T) {
	res := SessionEnd{Resumable: true}
	for _, tc := range []struct {
		name   string
		e      SessionEnd
		reason locktable.Reason
		code   protocol.Code
		want   bool
	}{
		{"hang-up", SessionEnd{Resumable: true, HungUp: true}, locktable.ReasonGraceful, 0, true},
		{"write timed out", res, locktable.ReasonIOTimeout, 0, true},
		{"not resumable", SessionEnd{HungUp: true}, locktable.ReasonGraceful, 0, false},
		{"protocol error", res, locktable.ReasonProtocolError, protocol.CodeInvalidFrame, false},
		{"ERROR sent", res, locktable.ReasonGraceful, protocol.CodeNotOwner, false},
		{"expired", res, locktable.ReasonExpired, 0, false},
		{"shut down", res, locktable.ReasonShutdown, 0, false},
		{"died unannounced", SessionEnd{Resumable: true, Detach: true, HungUp: true}, locktable.ReasonGraceful, 0, false},
		{"detached, then hung up", SessionEnd{Resumable: true, Detach: true, Detached: true, HungUp: true}, locktable.ReasonGraceful, 0, true},
		{"detach session, silent", SessionEnd{Resumable: true, Detach: true}, locktable.ReasonIOTimeout, 0, true},
	} {
		if got := tc.e.Keeps(tc.reason, tc.code); got != tc.want {
			t.Errorf("%s: Keeps = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSessionEndReleasesRelayed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      SessionEnd
		reason locktable.Reason
		want   bool
	}{
		{"plain, hung up", SessionEnd{HungUp: true}, locktable.ReasonGraceful, true},
		{"plain, protocol error", SessionEnd{}, locktable.ReasonProtocolError, true},
		{"plain, lease passed", SessionEnd{}, locktable.ReasonExpired, false},
		{"plain, write timed out", SessionEnd{}, locktable.ReasonIOTimeout, false},
		{"resumable, hung up", SessionEnd{Resumable: true, HungUp: true}, locktable.ReasonGraceful, false},
		{"resumable, protocol error", SessionEnd{Resumable: true}, locktable.ReasonProtocolError, false},
		{"detach, died unannounced", SessionEnd{Resumable: true, Detach: true, HungUp: true}, locktable.ReasonGraceful, true},
		{"detach, detached", SessionEnd{Resumable: true, Detach: true, Detached: true, HungUp: true}, locktable.ReasonGraceful, false},
	} {
		if got := tc.e.ReleasesRelayed(tc.reason); got != tc.want {
			t.Errorf("%s: ReleasesRelayed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSessionEndWriteEnds(t *testing.T) {
	for _, tc := range []struct {
		e        SessionEnd
		toHungUp bool
		want     bool
	}{
		{SessionEnd{Detach: true}, true, false}, // its reader sees the hang-up next
		{SessionEnd{Detach: true}, false, true},
		{SessionEnd{Resumable: true}, true, true},
		{SessionEnd{}, false, true},
	} {
		if got := tc.e.WriteEnds(tc.toHungUp); got != tc.want {
			t.Errorf("%+v.WriteEnds(%v) = %v, want %v", tc.e, tc.toHungUp, got, tc.want)
		}
	}
}
