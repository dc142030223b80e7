package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// v2sess is a version 2 session of a test, on the node via.
type v2sess struct {
	*opstest.Conn
	via     string
	session uint64
	seq     uint64
}

func dialV2Session(t *testing.T, n *clusterProc, lease time.Duration) *v2sess {
	t.Helper()
	c := opstest.Dial(t, n.addr)
	c.Send(protocol.AppendHello(protocol.AppendPreamble(nil), protocol.LeaseMS(lease), "v2-via-"+n.id))
	f := c.ReadV2()
	if f.Type != protocol.TypeWelcome {
		t.Fatalf("opening via %s answered %v, want WELCOME", n.id, f)
	}
	return &v2sess{Conn: c, via: n.id, session: f.Session}
}

// ping sends PING and expects its PONG next: nothing was pushed meanwhile.
func (s *v2sess) ping(t *testing.T) {
	t.Helper()
	s.seq++
	s.Send(protocol.AppendPing(nil, s.seq))
	if f := s.ReadV2(); f.Type != protocol.TypePong || f.Seq != s.seq {
		t.Fatalf("session via %s: PING %d answered %v", s.via, s.seq, f)
	}
}

// waitPromoted pings the session while it waits, bounded, for
// PROMOTED(id).
func (s *v2sess) waitPromoted(t *testing.T, id uint32) protocol.Frame {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for time.Now().Before(deadline) {
		s.seq++
		s.Send(protocol.AppendPing(nil, s.seq))
		for {
			f := s.ReadV2()
			if f.Type == protocol.TypePromoted && f.Claim == id {
				return f
			}
			if f.Type != protocol.TypePong {
				t.Fatalf("session via %s waiting for PROMOTED(%d): %v", s.via, id, f)
			}
			if f.Seq == s.seq {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("session via %s: no PROMOTED(%d) within %v", s.via, id, 2*opstest.Timeout)
	return protocol.Frame{}
}

// claimV2 claims name until it is not refused with 0x03 (a node refuses
// a name it holds, as during the warm-up of a new cluster), each time
// with a fresh claim id from *id; it returns the answer.
func (s *v2sess) claimV2(t *testing.T, id *uint32, name string) protocol.Frame {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for {
		*id++
		s.Claim(*id, protocol.ModeExclusive, 0, name)
		f := s.ReadV2()
		if f.Claim != *id {
			t.Fatalf("CLAIM %d via %s answered %v", *id, s.via, f)
		}
		if f.Type != protocol.TypeRefused || f.Code != protocol.CodeNotOwner {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s via %s refused 0x03 for %v", name, s.via, 2*opstest.Timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adminLock reads GET /api/locks/{name} of a node.
func adminLock(t *testing.T, n *clusterProc, name string) admin.Lock {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + "/api/locks/" + url.PathEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l admin.Lock
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/locks/%s at %s: %d", name, n.id, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l
}

// Version 2 sessions connected to different nodes contend for one name:
// each claim is relayed to the owner, which grants one holder at a time,
// in arrival order, with strictly increasing tokens under its epoch; its
// admin API shows the relaying node of each; a relayed claim ends at the
// owner when its session's client hangs up. Version 1 clients share the
// FIFO.
func TestClusterV2RelayContend(t *testing.T) {
	// Serial (no t.Parallel): it bounds the relayed claim's median latency.
	nodes := startClusterLib(t)
	name := nameOwnedBy(t, "n1", "v2contend")
	const lease = 2 * time.Second
	// A new cluster gates its names for a warm-up (docs/design/2026-12-02-cluster-fail-closed-model.md, "Fail
	// closed"): a version 2 claim relayed to the owner meanwhile is held
	// there, answered QUEUED, and promoted once the warm-up is over.
	w := dialV2Session(t, nodes["n2"], lease)
	start := time.Now()
	w.Claim(1, protocol.ModeExclusive, 0, name)
	switch f := w.ReadV2(); {
	case f.Type == protocol.TypeQueued && f.Claim == 1:
		w.waitPromoted(t, 1)
		t.Logf("held during the warm-up, promoted %v after the claim", time.Since(start))
	case f.Type == protocol.TypeGranted && f.Claim == 1:
		t.Logf("granted at once: the warm-up was over")
	default:
		t.Fatalf("a claim during the warm-up: %v, want QUEUED (or GRANTED)", f)
	}
	w.Close()
	waitFree(t, nodes["n1"], name)

	order := []string{"n2", "n3", "n1", "n2", "n3"}
	ids := make([]uint32, len(order))
	var ss []*v2sess
	var prev uint64
	for i, via := range order {
		s := dialV2Session(t, nodes[via], lease)
		f := s.claimV2(t, &ids[i], name)
		want := protocol.TypeQueued
		if i == 0 {
			want = protocol.TypeGranted
		}
		if f.Type != want {
			t.Fatalf("session %d via %s: %v, want %v", i, via, f, want)
		}
		if i == 0 {
			checkEpochToken(t, nodes["n1"], f.Token)
			prev = f.Token
		}
		ss = append(ss, s)
	}
	// The owner's admin API: the holder and the waiters in FIFO order,
	// each relayed one with its relaying node and session there.
	l := adminLock(t, nodes["n1"], name)
	if len(l.Holders) != 1 || len(l.Waiters) != len(order)-1 {
		t.Fatalf("owner's view of %s: %+v", name, l)
	}
	claims := append([]admin.Claim{l.Holders[0].Claim}, func() (out []admin.Claim) {
		for _, w := range l.Waiters {
			out = append(out, w.Claim)
		}
		return out
	}()...)
	relayedBy := append([]string{l.Holders[0].RelayedBy}, func() (out []string) {
		for _, w := range l.Waiters {
			out = append(out, w.RelayedBy)
		}
		return out
	}()...)
	for i, s := range ss {
		want := ""
		if s.via != "n1" {
			want = fmt.Sprintf("%s/%d", s.via, s.session)
		}
		if relayedBy[i] != want || claims[i].Label != "v2-via-"+s.via || claims[i].Claim != uint64(ids[i]) {
			t.Fatalf("owner's claim %d: %+v relayed by %q; want label v2-via-%s, claim %d, relayed by %q",
				i, claims[i], relayedBy[i], s.via, ids[i], want)
		}
	}
	// n2 relays two claims, one per session, through two upstreams.
	if m := scrape(t, nodes["n2"].ops); m["baton_cluster_relayed_claims"] != 2 || m["baton_cluster_upstream_sessions"] != 2 {
		t.Errorf("n2 metrics: relayed claims %v, upstream sessions %v; want 2 and 2",
			m["baton_cluster_relayed_claims"], m["baton_cluster_upstream_sessions"])
	}

	for i := 1; i < len(ss); i++ {
		start := time.Now()
		if i%2 == 1 {
			ss[i-1].Send(protocol.AppendRelease(nil, ids[i-1]))
			ss[i-1].ExpectV2(protocol.TypeReleased, ids[i-1], 0)
		} else {
			ss[i-1].Close() // the upstream closes, the owner releases at once
		}
		f := ss[i].ReadV2()
		if f.Type != protocol.TypePromoted || f.Claim != ids[i] {
			t.Fatalf("session %d via %s after the end of %d: %v, want PROMOTED(%d) (FIFO)", i, order[i], i-1, f, ids[i])
		}
		t.Logf("session %d via %s promoted %v after the previous holder (via %s) ended; token %#x", i, order[i], time.Since(start), order[i-1], f.Token)
		if f.Token <= prev {
			t.Fatalf("token %#x after %#x: not increasing", f.Token, prev)
		}
		prev = f.Token
		// The others still wait: one holder at a time.
		for j := i + 1; j < len(ss); j++ {
			ss[j].ping(t)
		}
	}
	ss[len(ss)-1].Close()
	waitFree(t, nodes["n1"], name)

	// Version 1 and version 2 clients on different nodes in one FIFO.
	next := func(who string, tok uint64) {
		t.Helper()
		if tok <= prev {
			t.Fatalf("%s: token %#x after %#x: not increasing", who, tok, prev)
		}
		prev = tok
	}
	c1 := opstest.Dial(t, nodes["n3"].addr) // v1, relayed by n3
	c1.Acquire(name, lease)
	next("v1 via n3", c1.Expect(protocol.TypeAcquired, 0).Token)
	s2 := dialV2Session(t, nodes["n2"], lease) // v2, relayed by n2
	var id2 uint32
	if f := s2.claimV2(t, &id2, name); f.Type != protocol.TypeQueued {
		t.Fatalf("v2 via n2 behind a v1 holder: %v, want QUEUED", f)
	}
	c2 := opstest.Dial(t, nodes["n1"].addr) // v1, direct
	c2.Acquire(name, lease)
	c2.Expect(protocol.TypeWaiting, 0)
	c1.Close()
	next("v2 via n2", s2.ExpectV2(protocol.TypePromoted, id2, 0).Token)
	c2.Heartbeat()
	c2.Expect(protocol.TypeWaiting, 0)
	s2.Send(protocol.AppendRelease(nil, id2))
	s2.ExpectV2(protocol.TypeReleased, id2, 0)
	next("v1 direct", c2.Expect(protocol.TypeAcquired, 0).Token)
	c2.Close()
	s2.Close()
	waitFree(t, nodes["n1"], name)
	for _, id := range []string{"n2", "n3"} {
		deadline := time.Now().Add(opstest.Timeout)
		for m := scrape(t, nodes[id].ops); m["baton_cluster_relayed_claims"] != 0 || m["baton_cluster_upstream_sessions"] != 0; m = scrape(t, nodes[id].ops) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still relays %v claims on %v upstreams after every client closed", id, m["baton_cluster_relayed_claims"], m["baton_cluster_upstream_sessions"])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Latency of a version 2 acquire on an open session (CLAIM, GRANTED;
	// then RELEASE, RELEASED), direct to the owner and relayed.
	direct, directRel, directFirst := claimLatency(t, nodes["n1"], "n1", "v2direct", lease)
	relayed, relayedRel, relayedFirst := claimLatency(t, nodes["n2"], "n1", "v2relayed", lease)
	t.Logf("v2 first CLAIM→GRANTED of a session: direct %v, relayed %v (opens the upstream)", directFirst, relayedFirst)
	t.Logf("v2 CLAIM→GRANTED, direct: median %v, p90 %v; relayed: median %v, p90 %v", direct[len(direct)/2], direct[len(direct)*9/10], relayed[len(relayed)/2], relayed[len(relayed)*9/10])
	t.Logf("v2 RELEASE→RELEASED, direct: median %v, p90 %v; relayed: median %v, p90 %v", directRel[len(directRel)/2], directRel[len(directRel)*9/10], relayedRel[len(relayedRel)/2], relayedRel[len(relayedRel)*9/10])
	if m := relayed[len(relayed)/2]; m > 50*time.Millisecond {
		t.Errorf("relayed v2 acquire median %v, want well under 50ms on loopback", m)
	}
}

// claimLatency claims and releases 200 names owned by owner, one at a
// time, on one session at n; it returns both round trips after the first
// claim, sorted, and the first claim's (relayed, it opens the upstream).
func claimLatency(t *testing.T, n *clusterProc, owner, prefix string, lease time.Duration) (claims, releases []time.Duration, first time.Duration) {
	t.Helper()
	r := cluster.NewRing(0, []string{"n1", "n2", "n3"})
	s := dialV2Session(t, n, lease)
	defer s.Close()
	id := uint32(0)
	for i := 0; len(releases) < 201 && i < 10000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if r.Owner(name) != owner {
			continue
		}
		id++
		start := time.Now()
		s.Claim(id, protocol.ModeExclusive, 0, name)
		s.ExpectV2(protocol.TypeGranted, id, 0)
		claims = append(claims, time.Since(start))
		start = time.Now()
		s.Send(protocol.AppendRelease(nil, id))
		s.ExpectV2(protocol.TypeReleased, id, 0)
		releases = append(releases, time.Since(start))
	}
	first, claims = claims[0], claims[1:]
	slices.Sort(claims)
	slices.Sort(releases)
	return claims, releases, first
}

// kill -9 of the owner: a version 2 session relayed by another node is
// told REVOKED 0x03 for its claims there and keeps its claim on a live
// node.
func TestClusterV2RelayOwnerKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n2"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	// The victim is not the leader, so the live nodes keep a quorum
	// without an election.
	victim, via, other := followerFirst(nodes, st.Leader)
	const lease = 2 * time.Second
	deadName := nameOwnedBy(t, victim.id, "v2dead")
	liveName := nameOwnedBy(t, other.id, "v2live")
	for _, w := range []struct {
		n    *clusterProc
		name string
	}{{victim, deadName}, {other, liveName}} {
		for range 2 {
			probe, _ := waitGrant(t, w.n.addr, w.name, lease)
			probe.Close()
			waitFree(t, w.n, w.name)
		}
	}
	s := dialV2Session(t, via, lease)
	var id uint32
	if f := s.claimV2(t, &id, deadName); f.Type != protocol.TypeGranted {
		t.Fatalf("%s via %s: %v", deadName, via.id, f)
	}
	deadID := id
	if f := s.claimV2(t, &id, liveName); f.Type != protocol.TypeGranted {
		t.Fatalf("%s via %s: %v", liveName, via.id, f)
	}
	liveID := id
	start := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	f := s.ReadV2()
	if f.Type != protocol.TypeRevoked || f.Claim != deadID || f.Code != protocol.CodeNotOwner {
		t.Fatalf("after the owner's kill: %v, want REVOKED(%d, 0x03)", f, deadID)
	}
	t.Logf("owner %s killed: claim relayed by %s revoked after %v", victim.id, via.id, time.Since(start))
	s.ping(t)
	s.Send(protocol.AppendRelease(nil, liveID))
	s.ExpectV2(protocol.TypeReleased, liveID, 0)
}
