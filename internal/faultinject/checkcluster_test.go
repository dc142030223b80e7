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
	// The same overlap, of a holder connected to a node killed under it,
	// that saw its loss: no longer excused (the owner keeps a claim whose
	// relaying node died until its lease has passed).
	died := []faultinject.ClusterFault{{Kind: faultinject.FaultNodeKill, Role: "follower", Node: "n2", Start: 150e6, End: 5000e6, Died: 160e6, Workers: []string{"w1"}}}
	h = newHistory()
	h.rec("acquired", "w1", 10, 0)
	h.write("w1", 10, 1, true)
	h.rec("lost", "w1", 10, 210)
	h.rec("released", "w1", 10, 300)
	h.hold("w2", 20, 200, 400)
	r = faultinject.CheckCluster(h.in, died)
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "OVERLAP") {
		t.Fatalf("holder whose node died: violations %q, want one OVERLAP", r.Violations)
	}
	if !strings.Contains(r.String(), "kill-follower") {
		t.Errorf("the report does not name the fault:\n%s", r)
	}
}
