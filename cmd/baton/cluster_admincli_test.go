package main

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// TestClusterAdminAsksTheOwner: 'baton show' and 'baton release', given
// the admin API of a node that does not own the name, act at the name's
// owner and say so on stderr, and 'baton locks' lists every node's
// locks. Before, that node answered "not held" (exit 3), which a script
// reads as nobody holding the lock, and listed only its own names.
func TestClusterAdminAsksTheOwner(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t)
	name := nameOwnedBy(t, "n2", "admin-cli")
	holder, tok := waitGrant(t, nodes["n2"].addr, name, 10*time.Second)
	other := "--admin=" + nodes["n1"].admin

	code, out, errOut := cli("show", name, other)
	if code != exitOK || !strings.Contains(out, itoa(tok)) || !strings.Contains(out, holder.Addr()) {
		t.Fatalf("show through n1 = %d\n%s\n%s", code, out, errOut)
	}
	if want := `is owned by node n2; asking its admin API at ` + nodes["n2"].admin; !strings.Contains(errOut, want) {
		t.Errorf("show's stderr = %q, want %q", errOut, want)
	}
	// The owner itself is asked directly, with nothing on stderr.
	if code, _, errOut := cli("show", name, "--admin="+nodes["n2"].admin); code != exitOK || errOut != "" {
		t.Errorf("show at the owner = %d, stderr %q", code, errOut)
	}

	// 'baton locks' lists every node's locks, with the owner's id.
	code, out, errOut = cli("locks", other)
	rows := fields(out)
	if code != exitOK || len(rows) != 2 || rows[0][len(rows[0])-1] != "NODE" || rows[1][0] != name || rows[1][len(rows[1])-1] != "n2" {
		t.Errorf("locks through n1 = %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = cli("locks", "--json", "--match", "admin-cli-*", other)
	if code != exitOK || !strings.Contains(out, `"node": "n2"`) {
		t.Errorf("locks --json through n1 = %d\n%s", code, out)
	}

	// Range locks: 'baton ranges' lists every node's, 'release-ranges'
	// acts at the key's owner.
	key := nameOwnedBy(t, "n2", "admin-cli-key")
	r := opstest.DialV2(t, nodes["n2"].addr, time.Minute, "ranges-holder")
	r.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 7, Start: 0, End: 99, Name: key}))
	if a := r.ReadV2(); a.Status != protocol.RangeGranted {
		t.Fatalf("range set at n2 answered %v", a)
	}
	code, out, errOut = cli("ranges", other)
	rows = fields(out)
	if code != exitOK || len(rows) != 2 || rows[0][len(rows[0])-1] != "NODE" || rows[1][0] != key || rows[1][len(rows[1])-1] != "n2" {
		t.Fatalf("ranges through n1 = %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := cli("release-ranges", key, rows[1][3], other); code != exitOK || !strings.Contains(errOut, "owned by node n2") {
		t.Errorf("release-ranges through n1 = %d\n%s\n%s", code, out, errOut)
	}

	if code, out, errOut := cli("release", name, other); code != exitOK {
		t.Fatalf("release through n1 = %d\n%s\n%s", code, out, errOut)
	}
	holder.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	code, _, errOut = cli("show", name, "--admin="+nodes["n3"].admin)
	if code != exitAdminNotFound || !strings.Contains(errOut, "owned by node n2") {
		t.Errorf("show after the release = %d (want %d), stderr %q", code, exitAdminNotFound, errOut)
	}
}
