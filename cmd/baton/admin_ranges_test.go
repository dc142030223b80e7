//go:build unix

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// TestAdminCLIRanges: 'baton ranges' lists range locks, held and
// waiting, with their owners; 'baton release-ranges KEY SESSION/OWNER'
// releases one owner's locks (its session gets ERROR 0x02), exits 3 for
// an owner with nothing there and 2 for a malformed owner.
func TestAdminCLIRanges(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	adm := "--admin=" + f.addrs.admin
	opstest.PassGate(t, f.addrs.protocol)
	h := opstest.DialV2(t, f.addrs.protocol, time.Minute, "mount-a")
	h.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 7, Start: 0, End: 99, Name: "mount:etc/passwd"}))
	if a := h.ReadV2(); a.Status != protocol.RangeGranted {
		t.Fatalf("set answered %v", a)
	}
	w := opstest.DialV2(t, f.addrs.protocol, time.Minute, "mount-b")
	w.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, Flags: protocol.RangeWait, LockType: protocol.LockRead, Owner: 2, Start: 10, End: protocol.MaxRangeEnd, Name: "mount:etc/passwd"}))
	if a := w.ReadV2(); a.Status != protocol.RangeQueued {
		t.Fatalf("waiting set answered %v", a)
	}
	code, out, errOut := cli("ranges", adm, "--match", "mount:*")
	rows := fields(out)
	if code != 0 || len(rows) != 3 || rows[1][2] != "held" || rows[1][4] != "write" || rows[1][6] != "100" || rows[1][7] != "mount-a" ||
		rows[2][2] != "waiting" || rows[2][6] != "EOF" || rows[2][7] != "mount-b" {
		t.Fatalf("baton ranges = %d\n%s%s", code, out, errOut)
	}
	aligned(t, out)
	owner := rows[1][3]
	if code, _, errOut := cli("release-ranges", adm, "mount:etc/passwd", "x"); code != exitUsage || !strings.Contains(errOut, "SESSION/OWNER") {
		t.Errorf("malformed owner = %d %q", code, errOut)
	}
	if code, _, _ := cli("release-ranges", adm, "mount:etc/passwd", strings.Split(owner, "/")[0]+"/99"); code != exitAdminNotFound {
		t.Errorf("an owner with nothing there = %d, want %d", code, exitAdminNotFound)
	}
	code, out, errOut = cli("release-ranges", adm, "mount:etc/passwd", owner)
	if code != 0 || !strings.Contains(out, "released the range locks of owner "+owner) {
		t.Fatalf("release-ranges = %d %q %q", code, out, errOut)
	}
	if a := w.ReadV2(); a.Status != protocol.RangePromoted {
		t.Errorf("waiter got %v, want promoted", a)
	}
	for {
		fr := h.ReadV2()
		if fr.Type == protocol.TypeSessionError {
			if fr.Code != protocol.CodeClosedByAdmin {
				t.Errorf("holder's session ended with %v", fr)
			}
			break
		}
	}
}
