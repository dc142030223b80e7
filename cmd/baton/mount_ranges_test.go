//go:build linux

package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// TestMountRangesReleasedByOperator: an operator's 'baton release-ranges'
// of a mount's lock ends the mount's session, so the program that held
// the lock sees it lost as for a revoked claim: its writes through the
// locked descriptor fail with EIO, while a file without locks stays
// usable, and another client can take the lock.
func TestMountRangesReleasedByOperator(t *testing.T) {
	t.Parallel()
	python := needTool(t, "python3")
	needFUSE(t)
	srv := startBaton(t, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0")
	rec := srv.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	adm := "--admin=" + rec["admin_addr"].(string)
	opstest.PassGate(t, addr)
	src, mnt := dbAndLogDirs(t)
	startMount(t, addr, src, mnt, "host-a")
	h := startHolder(t, python, "-c", lostHold, filepath.Join(mnt, "db"), filepath.Join(mnt, "log"))
	if l := h.line(t); l != "held" {
		t.Fatalf("holder: %s", l)
	}
	code, out, errOut := cli("ranges", adm, "--json")
	var list admin.RangeList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Ranges) != 1 || len(list.Ranges[0].Holders) != 1 {
		t.Fatalf("baton ranges = %d %s %s", code, out, errOut)
	}
	k := list.Ranges[0]
	if h := k.Holders[0]; h.Label != "host-a" || h.Type != "write" || h.Start != 0 || h.Length != 10 {
		t.Errorf("the mount's lock is listed as %+v, want host-a's write of bytes 0..9", h)
	}
	if code, out, errOut := cli("release-ranges", adm, k.Key, k.Holders[0].Ref()); code != 0 {
		t.Fatalf("release-ranges = %d %s %s", code, out, errOut)
	}
	released := time.Now()
	for {
		io.WriteString(h.in, "\n")
		l := h.line(t)
		if l == "locked-EIO other-ok" {
			t.Logf("writes under the released lock fail with EIO %v after the release", time.Since(released).Round(time.Millisecond))
			break
		}
		if l != "locked-ok other-ok" || time.Since(released) > testTimeout {
			t.Fatalf("%v after the operator released the lock: %s, want EIO through the locked descriptor only", time.Since(released), l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := opstest.DialV2(t, addr, 10*time.Second, "other")
	c.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 1, Start: 0, End: 9, Name: k.Key}))
	if a := c.ReadV2(); a.Status != protocol.RangeGranted {
		t.Errorf("another client's lock on the released bytes answered %v, want granted", a)
	}
}
