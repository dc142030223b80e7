package clustercore

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestUpstreamEndReassert(t *testing.T) {
	lost := OwnerLost{Err: io.EOF}
	for _, tc := range []struct {
		name string
		e    UpstreamEnd
		want bool
	}{
		{"an open upstream's owner lost: re-asserted", UpstreamEnd{Why: lost, Opened: true, Cluster: true, Live: true}, true},
		{"the owner shut down: re-asserted", UpstreamEnd{Why: OwnerEnded{F: protocol.Frame{Code: protocol.CodeShuttingDown}}, Opened: true, Cluster: true, Live: true}, true},
		{"the owner kicked the session: lost", UpstreamEnd{Why: OwnerEnded{F: protocol.Frame{Code: protocol.CodeClosedByAdmin}}, Opened: true, Cluster: true, Live: true}, false},
		{"never opened: nothing to re-assert", UpstreamEnd{Why: lost, Cluster: true, Live: true}, false},
		{"no cluster", UpstreamEnd{Why: lost, Opened: true, Live: true}, false},
		{"the session or server ends", UpstreamEnd{Why: lost, Opened: true, Cluster: true}, false},
		{"a failure to dial", UpstreamEnd{Why: errors.New("dial"), Opened: true, Cluster: true, Live: true}, false},
	} {
		if got := tc.e.Reassert(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUpstreamEndLog(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		opened                   bool
		reasserting, lost, fails int
		want                     UpstreamLog
	}{
		{"opened, claims re-asserted", true, 2, 1, 0, UpstreamLogReasserting},
		{"opened, nothing re-asserted", true, 0, 0, 0, UpstreamLogLost},
		{"not opened but claims lost", false, 0, 1, 3, UpstreamLogLost},
		{"the first failure to open warns", false, 0, 0, 1, UpstreamLogUnreachable},
		{"the second is quiet", false, 0, 0, 2, UpstreamLogUnreachableQuiet},
		{"the 49th is quiet", false, 0, 0, 49, UpstreamLogUnreachableQuiet},
		{"the 50th warns", false, 0, 0, 50, UpstreamLogUnreachable},
		{"the 100th warns", false, 0, 0, 100, UpstreamLogUnreachable},
	} {
		if got := (UpstreamEnd{Opened: tc.opened}).Log(tc.reasserting, tc.lost, tc.fails); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	var c UpstreamOpenFails
	if c.Failed() != 1 || c.Failed() != 2 {
		t.Fatal("the count does not grow")
	}
	c.Opened()
	if n := c.Failed(); n != 1 {
		t.Fatalf("after an open the count is %d, want 1", n)
	}
}

func TestUpstreamFailClaims(t *testing.T) {
	claims := map[uint32]*Claim{
		9: {ID: 9, State: ClaimLive, Req: protocol.Frame{Name: "a"}},
		2: {ID: 2, State: ClaimLive},      // attached without its CLAIM
		5: {ID: 5, State: ClaimReleasing}, // RELEASE sent
		7: {ID: 7, State: ClaimLive, Req: protocol.Frame{Name: "b"}},
	}
	self := func(c *Claim) *Claim { return c }
	for _, tc := range []struct {
		reassert bool
		ids      []uint32
		fates    []ClaimFate
	}{
		{true, []uint32{2, 5, 7, 9}, []ClaimFate{ClaimLost, ClaimGone, ClaimReassert, ClaimReassert}},
		{false, []uint32{2, 5, 7, 9}, []ClaimFate{ClaimLost, ClaimGone, ClaimLost, ClaimLost}},
	} {
		ends := UpstreamFailClaims(claims, self, tc.reassert)
		if len(ends) != len(tc.ids) {
			t.Fatalf("reassert %v: %d ends", tc.reassert, len(ends))
		}
		for i, e := range ends {
			if e.ID != tc.ids[i] || e.C != claims[e.ID] || e.Fate != tc.fates[i] {
				t.Errorf("reassert %v: end %d is %d %v, want %d %v (in id order)", tc.reassert, i, e.ID, e.Fate, tc.ids[i], tc.fates[i])
			}
			if want := e.Fate == ClaimLost; (e.Revoke != nil) != want || want && !bytes.Equal(e.Revoke, protocol.AppendRevoked(nil, e.ID, protocol.CodeNotOwner, "")) {
				t.Errorf("reassert %v: claim %d told %x", tc.reassert, e.ID, e.Revoke)
			}
		}
	}
}

func TestUpstreamAppendReleases(t *testing.T) {
	claims := map[uint32]*Claim{
		8: {ID: 8, State: ClaimLive},
		3: {ID: 3, State: ClaimPending},
		4: {ID: 4, State: ClaimReleasing},
		6: {ID: 6, State: ClaimMoving},
		1: {ID: 1, State: ClaimEnded},
	}
	got := UpstreamAppendReleases([]byte{0xee}, claims, func(c *Claim) *Claim { return c })
	want := protocol.AppendRelease(protocol.AppendRelease([]byte{0xee}, 3), 8)
	if !bytes.Equal(got, want) {
		t.Fatalf("%x, want %x: a RELEASE for each pending or live claim, in id order", got, want)
	}
}

func TestRelay2RetryStart(t *testing.T) {
	for _, tc := range []struct {
		name               string
		r                  Relay2Retry
		hold, move, ranges bool
	}{
		{"nothing waits", Relay2Retry{}, false, false, false},
		{"each waits", Relay2Retry{Held: 1, Moving: 2, Adopting: 3}, true, true, true},
		{"each runs", Relay2Retry{Held: 1, Moving: 2, Adopting: 3, Holding: true, MoveTimer: true, RangeTimer: true}, false, false, false},
		{"ended: held claims are still forgotten by their timer", Relay2Retry{Held: 1, Moving: 2, Adopting: 3, Closed: true}, true, false, false},
	} {
		hold, move, ranges := tc.r.Start()
		if hold != tc.hold || move != tc.move || ranges != tc.ranges {
			t.Errorf("%s: %v %v %v, want %v %v %v", tc.name, hold, move, ranges, tc.hold, tc.move, tc.ranges)
		}
	}
}
