//go:build linux

package faultinject_test

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultinject"
)

// CheckCluster: a clean history with a node fault has no violation and
// its figures land in the fault's row; an overlap is a violation even
// when a fault of the cluster suite was injected at the time (no fault
// of a node excuses two confirmed owners), and it is counted in the row
// of the fault in force when the second owner began.
func TestCheckCluster(t *testing.T) {
	faults := []faultinject.ClusterFault{{Kind: faultinject.FaultNodeKill, Role: "owner", Node: "n1", OwnerLost: true, Start: 100e6, End: 110e6}}

	h := newHistory()
	h.hold("w1", 10, 0, 50)
	h.hold("w2", 20, 4100, 4200) // 4 s after the owner's death
	r := faultinject.CheckCluster(h.in, faults)
	if len(r.Violations) != 0 {
		t.Fatalf("clean history: %q", r.Violations)
	}
	k := r.ByFault["kill-owner"]
	if k == nil || k.Faults != 1 || k.Grants != 1 || k.Accepted != 1 || k.Overlaps != 0 {
		t.Fatalf("kill-owner row %+v; want 1 fault, 1 grant, 1 accepted, no overlap", k)
	}
	if len(k.NextGrant) != 1 || k.NextGrant[0] != 4*time.Second {
		t.Errorf("time from the owner's death to the next grant %v, want [4s]", k.NextGrant)
	}
	if b := r.ByFault["before"]; b == nil || b.Grants != 1 {
		t.Errorf("before row %+v, want 1 grant", b)
	}

	h = newHistory()
	h.hold("w1", 10, 0, 300) // still believing when the next owner begins
	h.hold("w2", 20, 200, 400)
	r = faultinject.CheckCluster(h.in, faults)
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "OVERLAP of two exclusive holders") {
		t.Fatalf("violations %q; want one OVERLAP", r.Violations)
	}
	if k := r.ByFault["kill-owner"]; k == nil || k.Overlaps != 1 {
		t.Errorf("kill-owner row %+v, want 1 overlap", k)
	}
	if !strings.Contains(r.String(), "kill-owner") {
		t.Errorf("the report does not name the fault:\n%s", r)
	}
}
