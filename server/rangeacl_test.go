package server_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// denySwitch refuses every key under prefix while on.
type denySwitch struct {
	prefix string
	on     atomic.Bool
}

func (d *denySwitch) Allow(_, lock string) bool {
	return !d.on.Load() || !strings.HasPrefix(lock, d.prefix)
}

// TestRangeACL: range keys are lock names under the same access-control
// list as CLAIM and ACQUIRE. A set, query, unlock or release-owner on a
// key the list refuses is answered denied (0x0f), changes nothing, and is
// reported as EventDenied (the ACL metric and the audit log's denied
// record); a key it allows is served as before.
func TestRangeACL(t *testing.T) {
	t.Parallel()
	authz := &denySwitch{prefix: "mount:etc/"}
	authz.on.Store(true)
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	c := ts.dialV2(t, longLease, "intruder")
	for i, op := range []struct {
		op    protocol.RangeOp
		flags uint8
	}{
		{protocol.RangeSet, protocol.RangeWait},
		{protocol.RangeSet, protocol.RangeFlock},
		{protocol.RangeQuery, 0},
		{protocol.RangeUnlock, 0},
		{protocol.RangeRelease, 0},
	} {
		req := uint32(i + 1)
		c.mustWrite(rangeFrame(req, op.op, op.flags, protocol.LockWrite, 1, 0, eof, "mount:etc/passwd"))
		c.expectRange(req, protocol.RangeDenied)
	}
	e := ts.events.wait(t, "denied", func(e server.Event) bool { return e.Kind == server.EventDenied })
	if e.Lock != "mount:etc/passwd" || e.Label != "intruder" {
		t.Errorf("denied event for %q by %q, want mount:etc/passwd by intruder", e.Lock, e.Label)
	}
	ts.events.waitCount(t, 5, func(e server.Event) bool { return e.Kind == server.EventDenied })
	c.mustWrite(rangeFrame(10, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, eof, "mount:home/report"))
	c.expectRange(10, protocol.RangeGranted)
	// Nothing was taken: once the list allows the key, another session
	// finds it free.
	authz.on.Store(false)
	d := ts.dialV2(t, longLease, "auditor")
	d.mustWrite(rangeFrame(1, protocol.RangeQuery, 0, protocol.LockWrite, 2, 0, eof, "mount:etc/passwd"))
	d.expectRange(1, protocol.RangeFree)
}
