package clustercore

import (
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Each case is one way a version 2 session's connection ends, with what
// must happen to its claims here (kept) and to those it relayed
// (released at once), and whether its client died without its DETACH.
func TestSessionEnd(t *testing.T) {
	const (
		hungUp   = locktable.ReasonGraceful
		timedOut = locktable.ReasonIOTimeout
		violated = locktable.ReasonProtocolError
	)
	plain, res := SessionEnd{}, SessionEnd{Resumable: true}
	hung := SessionEnd{HungUp: true}
	resHung := SessionEnd{Resumable: true, HungUp: true}
	died := SessionEnd{Resumable: true, Detach: true, HungUp: true}
	said := SessionEnd{Resumable: true, Detach: true, Detached: true, HungUp: true}
	silent := SessionEnd{Resumable: true, Detach: true}
	cases := map[string]struct {
		e                    SessionEnd
		reason               locktable.Reason
		code                 protocol.Code
		died, keeps, release bool
	}{
		"plain, hung up":            {hung, hungUp, 0, false, false, true},
		"plain, protocol error":     {plain, violated, protocol.CodeInvalidFrame, false, false, true},
		"plain, lease passed":       {plain, locktable.ReasonExpired, 0, false, false, false},
		"plain, write timed out":    {plain, timedOut, 0, false, false, false},
		"resumable, hung up":        {resHung, hungUp, 0, false, true, false},
		"resumable, write timeout":  {res, timedOut, 0, false, true, false},
		"resumable, protocol error": {res, violated, protocol.CodeInvalidFrame, false, false, true},
		"resumable, ERROR sent":     {res, hungUp, protocol.CodeNotOwner, false, false, false},
		"resumable, expired":        {res, locktable.ReasonExpired, 0, false, false, false},
		"resumable, shut down":      {res, locktable.ReasonShutdown, 0, false, false, false},
		"detach, protocol error":    {silent, violated, protocol.CodeUnknownMessage, false, false, true},
		"detach, died unannounced":  {died, hungUp, 0, true, false, true},
		"detach, DETACH then FIN":   {said, hungUp, 0, false, true, false},
		"detach, silent":            {silent, timedOut, 0, false, true, false},
		"detach flag, no hang-up":   {SessionEnd{Detach: true}, timedOut, 0, false, false, false},
	}
	for name, tc := range cases {
		if got := tc.e.DiedUnannounced(); got != tc.died {
			t.Errorf("%s: DiedUnannounced = %v, want %v", name, got, tc.died)
		}
		if got := tc.e.Keeps(tc.reason, tc.code); got != tc.keeps {
			t.Errorf("%s: Keeps = %v, want %v", name, got, tc.keeps)
		}
		if got := tc.e.ReleasesRelayed(tc.reason, tc.code); got != tc.release {
			t.Errorf("%s: ReleasesRelayed = %v, want %v", name, got, tc.release)
		}
		// A failed write ends the session, except a detach session's
		// to a client that hung up: its reader sees the hang-up next.
		if got, want := tc.e.WriteEnds(true), !tc.e.Detach; got != want {
			t.Errorf("%s: WriteEnds(to a hung-up client) = %v, want %v", name, got, want)
		}
		if !tc.e.WriteEnds(false) {
			t.Errorf("%s: WriteEnds(other failure) = false, want true", name)
		}
	}
}
