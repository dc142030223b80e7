package clustercore

import (
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestSessionLeaseFirst(t *testing.T) {
	onlyA := func(name string) bool { return name == "a" }
	for _, tc := range []struct {
		name     string
		f        protocol.Frame
		claimErr bool
		want     bool
	}{
		{"claim", protocol.Frame{Type: protocol.TypeClaim, Name: "a"}, false, true},
		{"claim the ACL refuses", protocol.Frame{Type: protocol.TypeClaim, Name: "b"}, false, false},
		{"claim with a claim-level error", protocol.Frame{Type: protocol.TypeClaim, Name: "a"}, true, false},
		{"range lock", protocol.Frame{Type: protocol.TypeRange, Op: protocol.RangeSet, Name: "a"}, false, true},
		{"range cancel", protocol.Frame{Type: protocol.TypeRange, Op: protocol.RangeCancel, Name: "a"}, false, false},
		{"range the ACL refuses", protocol.Frame{Type: protocol.TypeRange, Op: protocol.RangeSet, Name: "b"}, false, false},
		{"release", protocol.Frame{Type: protocol.TypeRelease, Name: "a"}, false, false},
		{"ping", protocol.Frame{Type: protocol.TypePing}, false, false},
		{"watch", protocol.Frame{Type: protocol.TypeWatch, Name: "a"}, false, false},
	} {
		asked := false
		allowed := func(name string) bool { asked = true; return onlyA(name) }
		if got := SessionLeaseFirst(tc.f, tc.claimErr, allowed); got != tc.want {
			t.Errorf("%s: SessionLeaseFirst = %v, want %v", tc.name, got, tc.want)
		}
		if tc.f.Type != protocol.TypeClaim && tc.f.Type != protocol.TypeRange && asked {
			t.Errorf("%s: the ACL was asked about a frame that holds nothing", tc.name)
		}
	}
}
