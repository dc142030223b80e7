package server_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestMaxLease: a version 1 ACQUIRE or a version 2 HELLO whose lease is
// over MaxLease is answered ERROR 0x17 and closed, holding nothing; a
// lease of exactly MaxLease is served.
func TestMaxLease(t *testing.T) {
	t.Parallel()
	const max = time.Minute
	ts := startServer(t, func(s *server.Server) { s.MaxLease = max })

	long := ts.dial(t)
	long.mustWrite(acquireFrame("l", max+time.Millisecond))
	long.expectErrorBytes(protocol.CodeInvalidLease)
	if _, ok := ts.Lock("l"); ok {
		t.Errorf("an ACQUIRE over the maximum lease holds the lock")
	}
	ts.dial(t).mustOwn("l", max)

	longV2 := ts.dialV2Raw(t)
	longV2.mustWrite(openingV2(max+time.Millisecond, "long"))
	longV2.expectSessionError(protocol.CodeInvalidLease)
	ts.dialV2(t, max, "at the maximum").mustHold(1, protocol.ModeExclusive, 0, "v2")
}

// leaseRecorder is a Router that serves every name and records the
// leases it is asked to record.
type leaseRecorder struct {
	mu       sync.Mutex
	recorded []time.Duration
}

func (r *leaseRecorder) Route(string, time.Duration, bool) server.Route {
	return server.Route{Action: server.RouteServe}
}

func (r *leaseRecorder) RecordLease(lease time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recorded = append(r.recorded, lease)
	return true
}

func (r *leaseRecorder) leases() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recorded)
}

// TestLeaseRecordedAtFirstAllowedClaim: a cluster node records a version
// 2 session's lease (the bound of every take-over's warm-up) before the
// session's first claim the ACL allows, not at HELLO: a session that
// only asks for names the ACL refuses records nothing.
func TestLeaseRecordedAtFirstAllowedClaim(t *testing.T) {
	t.Parallel()
	rec := &leaseRecorder{}
	ts := startServer(t, func(s *server.Server) {
		s.Router = rec
		s.Authorizer = &denyPrefix{prefix: "secret/"}
	})
	const lease = 7 * time.Second
	c := ts.dialV2(t, lease, "recorder")
	c.mustWrite(claimFrame(1, protocol.ModeExclusive, 0, "secret/payroll"))
	c.expectCode(protocol.TypeRefused, 1, protocol.CodeNotAuthorized)
	c.mustWrite(rangeFrame(9, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 1, 0, 9, "secret/file"))
	c.expectRange(9, protocol.RangeDenied)
	c.mustWrite(protocol.AppendPing(nil, 1))
	c.expect(protocol.TypePong, 0)
	if got := rec.leases(); len(got) != 0 {
		t.Fatalf("recorded %v after HELLO, a refused claim and a refused range, want nothing", got)
	}
	c.mustHold(2, protocol.ModeExclusive, 0, "public/report")
	c.mustHold(3, protocol.ModeExclusive, 0, "public/other")
	if got := rec.leases(); !slices.Equal(got, []time.Duration{lease}) {
		t.Fatalf("recorded %v after two allowed claims, want [%v] once", got, lease)
	}
}

// TestLeaseCeiling: a cluster's ceiling (SetLeaseCeiling) refuses longer
// leases as MaxLease does, while sessions open already keep theirs and
// count in LongestLease until they end.
func TestLeaseCeiling(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	if got := ts.LongestLease(); got != 0 {
		t.Fatalf("LongestLease with no session: %v", got)
	}
	old := ts.dialV2(t, time.Hour, "before the ceiling")
	old.mustHold(1, protocol.ModeExclusive, 0, "old")
	v1 := ts.dial(t)
	v1.mustOwn("v1", 2*time.Hour)
	ts.SetLeaseCeiling(time.Minute)

	longV2 := ts.dialV2Raw(t)
	longV2.mustWrite(openingV2(time.Minute+time.Millisecond, "long"))
	longV2.expectSessionError(protocol.CodeInvalidLease)
	long := ts.dial(t)
	long.mustWrite(acquireFrame("l", time.Minute+time.Millisecond))
	long.expectErrorBytes(protocol.CodeInvalidLease)
	ts.dialV2(t, time.Minute, "at the ceiling").mustHold(1, protocol.ModeExclusive, 0, "new")

	if got := ts.LongestLease(); got != 2*time.Hour {
		t.Errorf("LongestLease: %v, want the open version 1 session's 2h", got)
	}
	v1.conn.Close()
	old.conn.Close()
	waitUntil(t, 5*time.Second, "the long sessions to end", func() bool { return ts.LongestLease() == time.Minute })
	ts.SetLeaseCeiling(0)
	ts.dialV2(t, time.Hour, "no ceiling").mustHold(1, protocol.ModeExclusive, 0, "again")
}
