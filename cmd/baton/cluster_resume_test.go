package main

import (
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// kill -9 of the node a resumable client is connected to: the owner of
// its claim keeps it (the hop header said resumable), promotes nobody,
// and the client re-asserts it through another node with its token
// unchanged.
func TestClusterResumeAfterRelayKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n2"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	// The victim relays; it is not the leader, so the live nodes keep a
	// quorum without an election.
	victim, owner, other := followerFirst(nodes, st.Leader)
	// The lease is recorded as the cluster's largest before the owner
	// serves the name: a longer one would extend the new cluster's
	// warm-up.
	const lease = 8 * time.Second
	name := servedName(t, owner, "resume", lease)
	a := dialResumable(t, victim, lease)
	if a.w.Flags != protocol.WelcomeResumable|protocol.WelcomeRing || a.w.Node != victim.id || a.w.Ring == 0 {
		t.Fatalf("WELCOME %v, want resumable on %s with its ring", a.w, victim.id)
	}
	var id uint32
	f := a.claimV2(t, &id, name)
	if f.Type != protocol.TypeGranted {
		t.Fatalf("%s via %s: %v", name, victim.id, f)
	}
	tok := f.Token
	w := dialV2Session(t, other, lease)
	var wid uint32
	if f := w.claimV2(t, &wid, name); f.Type != protocol.TypeQueued {
		t.Fatalf("a second claim via %s: %v, want QUEUED", other.id, f)
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	// The owner keeps the claim: the waiter is not promoted.
	for range 3 {
		w.ping(t)
		time.Sleep(100 * time.Millisecond)
	}

	b := dialResumable(t, other, lease)
	b.Send(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: protocol.ClaimReassert,
		Mode: protocol.ModeExclusive, Name: name, Token: tok, Ring: b.w.Ring, Session: a.w.Session, Secret: a.w.Secret, Node: a.w.Node}))
	if f := b.ReadV2(); f.Type != protocol.TypeGranted || f.Claim != id || f.Token != tok {
		t.Fatalf("re-assertion through %s: %v, want GRANTED(%d, %d)", other.id, f, id, tok)
	}
	t.Logf("relaying node %s killed; the claim on %s (owner %s) re-asserted through %s %v later, token %d unchanged",
		victim.id, name, owner.id, other.id, time.Since(killed).Round(time.Millisecond), tok)
	w.ping(t) // still nothing for the waiter
	b.Send(protocol.AppendRelease(nil, id))
	b.ExpectV2(protocol.TypeReleased, id, 0)
	if f := w.waitPromoted(t, wid); f.Token <= tok {
		t.Errorf("the waiter promoted with token %d, want above %d", f.Token, tok)
	}
}

// resumable is a resumable session of a test and its WELCOME.
type resumable struct {
	*v2sess
	w protocol.Frame
}

func dialResumable(t *testing.T, n *clusterProc, lease time.Duration) resumable {
	t.Helper()
	c := opstest.Dial(t, n.addr)
	c.Send(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(lease), Flags: protocol.HelloResumable, Label: "resume-via-" + n.id}))
	w := c.ReadV2()
	if w.Type != protocol.TypeWelcome || !w.Resumable() {
		t.Fatalf("resumable opening via %s answered %v", n.id, w)
	}
	return resumable{v2sess: &v2sess{Conn: c, via: n.id, session: w.Session}, w: w}
}

// kill -9 of the node that owns a name: once it is removed, the name's
// new owner, warming up, accepts the holder's re-assertion with its old
// token, and grants nobody else the name meanwhile.
func TestClusterReassertAfterOwnerKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n2"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	var victim *clusterProc
	var live []*clusterProc
	for _, id := range []string{"n1", "n2", "n3"} {
		if victim == nil && id != st.Leader {
			victim = nodes[id]
		} else {
			live = append(live, nodes[id])
		}
	}
	const lease = 8 * time.Second
	name := nameOwnedBy(t, victim.id, "takeover")
	for range 2 {
		probe, _ := waitGrant(t, victim.addr, name, lease)
		probe.Close()
		waitFree(t, victim, name)
	}
	a := dialResumable(t, victim, lease)
	var id uint32
	f := a.claimV2(t, &id, name)
	if f.Type != protocol.TypeGranted {
		t.Fatalf("%s at %s: %v", name, victim.id, f)
	}
	tok := f.Token

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	if code, out, errOut := cli("cluster", "remove", "--admin", live[1].admin, victim.id); code != 0 {
		t.Fatalf("baton cluster remove = %d, %q, %q", code, out, errOut)
	}
	// The client re-asserts through a live node until the new owner has
	// the ring and an epoch (0x05 and 0x03 say: again, on a fresh
	// session).
	var b resumable
	for attempt := 0; ; attempt++ {
		if time.Since(killed) > 2*opstest.Timeout {
			t.Fatalf("re-assertion not accepted within %v", 2*opstest.Timeout)
		}
		b = dialResumable(t, live[0], lease)
		b.Send(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: protocol.ClaimReassert,
			Mode: protocol.ModeExclusive, Name: name, Token: tok, Ring: b.w.Ring, Session: a.w.Session, Secret: a.w.Secret, Node: a.w.Node}))
		f := b.ReadV2()
		if f.Type == protocol.TypeGranted && f.Token == tok {
			t.Logf("owner %s killed and removed; the holder re-asserted through %s %v later (attempt %d), token %d unchanged",
				victim.id, live[0].id, time.Since(killed).Round(time.Millisecond), attempt, tok)
			break
		}
		if f.Type != protocol.TypeRefused || (f.Code != protocol.CodeStaleRing && f.Code != protocol.CodeNotOwner) {
			t.Fatalf("re-assertion answered %v, want GRANTED(%d) or a retry", f, tok)
		}
		b.Close()
		time.Sleep(100 * time.Millisecond)
	}
	// Nobody else gets the name while the holder keeps it.
	w := opstest.Dial(t, live[1].addr)
	w.Acquire(name, lease)
	w.Expect(protocol.TypeWaiting, 0)
	for range 5 {
		b.ping(t)
		w.Heartbeat()
		w.Expect(protocol.TypeWaiting, 0)
		time.Sleep(100 * time.Millisecond)
	}
	b.Send(protocol.AppendRelease(nil, id))
	b.ExpectV2(protocol.TypeReleased, id, 0)
	// The waiter is granted once the warm-up is over, above the old token.
	deadline := time.Now().Add(2 * opstest.Timeout)
	for {
		w.Heartbeat()
		f := w.Read()
		if f.Type == protocol.TypeAcquired {
			if f.Token <= tok {
				t.Errorf("the next holder's token %d is not above the re-asserted %d", f.Token, tok)
			}
			t.Logf("next grant %v after the kill", time.Since(killed).Round(time.Millisecond))
			break
		}
		if f.Type != protocol.TypeWaiting || time.Now().After(deadline) {
			t.Fatalf("waiter: %v", f)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
