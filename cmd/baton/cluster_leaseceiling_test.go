package main

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// TestClusterLeaseCeiling lowers the largest lease a client raised, with
// 'baton cluster lease-ceiling' on a cluster of three: it waits while
// the session with the longer lease is open, lowers the lease once it has
// ended, and the nodes then refuse a longer lease.
func TestClusterLeaseCeiling(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t)
	n1 := nodes["n1"]
	long := opstest.DialV2(t, n1.addr, 10*time.Minute, "long lease")
	long.Claim(1, protocol.ModeExclusive, 0, nameOwnedBy(t, "n1", "ceiling"))
	long.ExpectV2(protocol.TypeGranted, 1, 0)
	for _, n := range nodes {
		waitStatus(t, n, "the 10m lease recorded", func(st cluster.Status) bool { return st.MaxLease == "10m0s" })
	}

	code, out, errOut := cli("cluster", "lease-ceiling", "--admin", nodes["n2"].admin, "--wait", "--timeout", "2s", "1m")
	if code != exitError || !strings.Contains(errOut, "still 10m0s") {
		t.Fatalf("lowering under an open 10m session: exit %d\n%s%s", code, out, errOut)
	}
	st := waitStatus(t, nodes["n3"], "the ceiling applied", func(st cluster.Status) bool { return st.LeaseCeiling == "1m0s" })
	if st.LeaseLowering == nil || st.MaxLease != "10m0s" {
		t.Fatalf("status while the session is open: %+v %s", st.LeaseLowering, st.MaxLease)
	}
	refused := opstest.Dial(t, nodes["n3"].addr)
	refused.Send(protocol.AppendHello(protocol.AppendPreamble(nil), uint32(2*time.Minute/time.Millisecond), "above the ceiling"))
	if f := refused.ReadV2(); f.Type != protocol.TypeSessionError || f.Code != protocol.CodeInvalidLease {
		t.Fatalf("a 2m lease above the 1m ceiling: %v, want ERROR 0x17", f)
	}

	long.Close()
	code, out, errOut = cli("cluster", "lease-ceiling", "--admin", nodes["n2"].admin, "--wait", "--timeout", "20s", "1m")
	// The first command's lowering may complete once the session ends,
	// before this one reads the status: then it finds the lease lowered.
	if code != exitOK || !strings.Contains(out, "largest lease lowered to 1m0s") && !strings.Contains(out, "largest lease recorded 1m0s") {
		t.Fatalf("lowering once the session ended: exit %d\n%s%s", code, out, errOut)
	}
	for _, n := range nodes {
		waitStatus(t, n, "the largest lease lowered", func(st cluster.Status) bool { return st.MaxLease == "1m0s" && st.LeaseLowering == nil })
	}
}
