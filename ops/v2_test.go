package ops_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestMetricsV2: sessions and claims are counted by protocol version and
// state; PINGs count as heartbeats; claim-level refusals by code.
func TestMetricsV2(t *testing.T) {
	f := start(t)
	lease := 10 * time.Second
	v1 := opstest.Dial(t, f.addr)
	v1.Acquire("a", lease)
	v1.Expect(protocol.TypeAcquired, 0)
	s := opstest.DialV2(t, f.addr, lease, "m")
	s.Claim(1, protocol.ModeShared, 0, "a")
	s.ExpectV2(protocol.TypeQueued, 1, 0)
	s.Claim(2, protocol.ModeShared, 0, "b")
	s.ExpectV2(protocol.TypeGranted, 2, 0)
	s.Claim(3, protocol.ModeSemaphore, 0, "c")
	s.ExpectV2(protocol.TypeRefused, 3, protocol.CodeInvalidLimit)
	s.Claim(4, protocol.ModeSemaphore, 2, "b")
	s.ExpectV2(protocol.TypeRefused, 4, protocol.CodeModeConflict)
	s.Send(protocol.AppendPing(nil, 1))
	s.ExpectV2(protocol.TypePong, 0, 0)

	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		`baton_sessions{protocol="1"}`:              1,
		`baton_sessions{protocol="2"}`:              1,
		`baton_claims{protocol="1",state="held"}`:   1,
		`baton_claims{protocol="1",state="queued"}`: 0,
		`baton_claims{protocol="2",state="held"}`:   1,
		`baton_claims{protocol="2",state="queued"}`: 1,
		`baton_claims_refused_total{code="0x21"}`:   1,
		`baton_claims_refused_total{code="0x23"}`:   1,
		"baton_heartbeats_total":                    1,
		"baton_connections_active":                  2,
	})
	v1.Close()
	s.ExpectV2(protocol.TypePromoted, 1, 0)
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		`baton_claims{protocol="2",state="held"}`:   2,
		`baton_claims{protocol="2",state="queued"}`: 0,
	})
	s.Close()
	f.rec.WaitCount(t, server.EventDisconnected, 2)
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		`baton_sessions{protocol="1"}`:            0,
		`baton_sessions{protocol="2"}`:            0,
		`baton_claims{protocol="1",state="held"}`: 0,
		`baton_claims{protocol="2",state="held"}`: 0,
		"baton_acquires_total":                    3,
	})
}

// TestMetricsResume: a resumable session whose connection broke is
// counted as kept, its claims still as version 2 claims; a re-assertion
// by result.
func TestMetricsResume(t *testing.T) {
	f := start(t)
	opstest.PassGate(t, f.addr)
	s := opstest.Dial(t, f.addr)
	s.Send(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: 30000, Flags: protocol.HelloResumable, Label: "r"}))
	w := s.ReadV2()
	if w.Type != protocol.TypeWelcome || !w.Resumable() {
		t.Fatalf("opening answered %v", w)
	}
	s.Claim(1, protocol.ModeExclusive, 0, "a")
	tok := s.ExpectV2(protocol.TypeGranted, 1, 0).Token
	s.Close()
	f.rec.WaitCount(t, server.EventSessionKept, 1)
	f.rec.WaitCount(t, server.EventDisconnected, 2) // the gate probe, then the resumable session: its claims stay
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_sessions_kept":                        1,
		"baton_sessions_kept_total":                  1,
		`baton_sessions{protocol="2"}`:               0,
		`baton_claims{protocol="2",state="held"}`:    1,
		`baton_reassertions_total{result="adopted"}`: 0,
	})
	n := opstest.DialV2(t, f.addr, 30*time.Second, "n")
	re := protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert, Mode: protocol.ModeExclusive,
		Name: "a", Token: tok, Session: w.Session, Secret: w.Secret, Node: w.Node}
	n.Send(protocol.AppendFrame(nil, re))
	n.ExpectV2(protocol.TypeGranted, 1, 0)
	re.Claim, re.Name = 2, "b"
	n.Send(protocol.AppendFrame(nil, re))
	n.ExpectV2(protocol.TypeRefused, 2, protocol.CodeReassertRefused)
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_sessions_kept":                        0,
		`baton_claims{protocol="2",state="held"}`:    1,
		`baton_reassertions_total{result="adopted"}`: 1,
		`baton_reassertions_total{result="refused"}`: 1,
		`baton_claims_refused_total{code="0x04"}`:    1,
	})
}

// TestMetricsRangeRefused: a range set past a cap (here the default of
// waiting requests per owner) counts in baton_range_refused_total by
// reason, and every reason has its series from the start.
func TestMetricsRangeRefused(t *testing.T) {
	f := start(t)
	opstest.PassGate(t, f.addr)
	lease := 10 * time.Second
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		`baton_range_refused_total{reason="waiting_per_session"}`: 0,
		`baton_range_refused_total{reason="waiting_per_owner"}`:   0,
		`baton_range_refused_total{reason="owners_per_session"}`:  0,
		`baton_range_refused_total{reason="search_bound"}`:        0,
	})
	h := opstest.DialV2(t, f.addr, lease, "h")
	h.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 1, End: protocol.MaxRangeEnd, Name: "f"}))
	if a := h.ReadV2(); a.Status != protocol.RangeGranted {
		t.Fatalf("holder's set answered %v", a)
	}
	s := opstest.DialV2(t, f.addr, lease, "s")
	var out []byte
	for i := range server.DefaultRangeWaitingPerOwner + 1 {
		out = protocol.AppendRange(out, protocol.Frame{Claim: uint32(i + 1), Op: protocol.RangeSet, Flags: protocol.RangeWait,
			LockType: protocol.LockWrite, Owner: 7, Start: uint64(i), End: uint64(i), Name: "f"})
	}
	s.Send(out)
	for i := range server.DefaultRangeWaitingPerOwner + 1 {
		want := protocol.RangeQueued
		if i == server.DefaultRangeWaitingPerOwner {
			want = protocol.RangeLimit
		}
		if a := s.ReadV2(); a.Claim != uint32(i+1) || a.Status != want {
			t.Fatalf("set %d answered %v, want %v", i+1, a, want)
		}
	}
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		`baton_range_refused_total{reason="waiting_per_owner"}`:   1,
		`baton_range_refused_total{reason="waiting_per_session"}`: 0,
	})
}

// TestMetricsRanges: range locks are counted like claims: keys with a
// holder or a waiter, held ranges and waiting requests, back to zero
// when their sessions end.
func TestMetricsRanges(t *testing.T) {
	f := start(t)
	opstest.PassGate(t, f.addr)
	lease := 10 * time.Second
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_range_keys": 0, "baton_range_locks_held": 0, "baton_range_waiting": 0,
	})
	h := opstest.DialV2(t, f.addr, lease, "h")
	h.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 1, Start: 0, End: 9, Name: "f"}))
	h.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 2, Op: protocol.RangeSet, LockType: protocol.LockRead, Owner: 1, Start: 20, End: 29, Name: "f"}))
	for req := uint32(1); req <= 2; req++ {
		if a := h.ReadV2(); a.Claim != req || a.Status != protocol.RangeGranted {
			t.Fatalf("holder's set %d answered %v", req, a)
		}
	}
	w := opstest.DialV2(t, f.addr, lease, "w")
	w.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 1, Op: protocol.RangeSet, Flags: protocol.RangeWait, LockType: protocol.LockWrite, Owner: 2, Start: 5, End: 5, Name: "f"}))
	if a := w.ReadV2(); a.Status != protocol.RangeQueued {
		t.Fatalf("waiter's set answered %v", a)
	}
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_range_keys": 1, "baton_range_locks_held": 2, "baton_range_waiting": 1,
	})
	h.Close()
	if a := w.ReadV2(); a.Status != protocol.RangePromoted {
		t.Fatalf("waiter got %v, want promoted", a)
	}
	w.Close()
	f.rec.WaitCount(t, server.EventDisconnected, 3) // the gate probe, then both sessions
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_range_keys": 0, "baton_range_locks_held": 0, "baton_range_waiting": 0,
	})
}

// TestMetricsRangeCounters: range grants, releases by reason and
// revocations by cause are counted, every series there from the start.
func TestMetricsRangeCounters(t *testing.T) {
	f := start(t)
	opstest.PassGate(t, f.addr)
	lease := 10 * time.Second
	zero := map[string]float64{"baton_range_grants_total": 0}
	for _, r := range server.RangeReleaseReasons {
		zero[`baton_range_releases_total{reason="`+r+`"}`] = 0
	}
	for _, c := range server.RangeRevokeCauses {
		zero[`baton_range_revocations_total{cause="`+c+`"}`] = 0
	}
	checkSamples(t, scrape(t, f.opsURL), zero)
	set := func(c *opstest.Conn, req uint32, flags uint8, owner uint64) {
		c.Send(protocol.AppendRange(nil, protocol.Frame{Claim: req, Op: protocol.RangeSet, Flags: flags, LockType: protocol.LockWrite,
			Owner: owner, Start: 0, End: 9, Name: "f"}))
	}
	h := opstest.DialV2(t, f.addr, lease, "h")
	set(h, 1, 0, 1)
	if a := h.ReadV2(); a.Status != protocol.RangeGranted {
		t.Fatalf("holder's set answered %v", a)
	}
	w := opstest.DialV2(t, f.addr, lease, "w")
	set(w, 1, 0, 2)
	conflict := w.ReadV2()
	if conflict.Status != protocol.RangeConflict {
		t.Fatalf("waiter's first set answered %v", conflict)
	}
	set(w, 2, protocol.RangeWait, 2)
	if a := w.ReadV2(); a.Status != protocol.RangeQueued {
		t.Fatalf("waiter's set answered %v", a)
	}
	if err := f.srv.ReleaseRangesBy("f", conflict.Session, 1, server.Peer{}); err != nil {
		t.Fatal(err)
	}
	if a := w.ReadV2(); a.Status != protocol.RangePromoted {
		t.Fatalf("waiter got %v, want promoted", a)
	}
	w.Send(protocol.AppendRange(nil, protocol.Frame{Claim: 3, Op: protocol.RangeUnlock, Owner: 2, Start: 5, End: 5, Name: "f"}))
	if a := w.ReadV2(); a.Status != protocol.RangeDone {
		t.Fatalf("unlock answered %v", a)
	}
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_range_grants_total":                     2,
		`baton_range_releases_total{reason="force"}`:   1,
		`baton_range_releases_total{reason="unlock"}`:  1,
		`baton_range_releases_total{reason="session"}`: 0,
		`baton_range_revocations_total{cause="admin"}`: 1,
		`baton_range_revocations_total{cause="acl"}`:   0,
	})
}
