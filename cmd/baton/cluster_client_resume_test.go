package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
)

// The Go client's resumable session on a real 3-node cluster: a kill -9
// of the node it is connected to, and of the node that owns its lock,
// does not interrupt the guarded work.

// resumableHolder runs Do on a resumable session opened on addrs[0] and
// reports its token, whether fn's context was ever cancelled, and Do's
// result.
type resumableHolder struct {
	s         *baton.Session
	token     chan uint64
	finish    chan struct{}
	cancelled chan error
	done      chan error
}

func holdResumable(t *testing.T, name string, lease time.Duration, addrs []string) *resumableHolder {
	t.Helper()
	s, err := baton.New(baton.Config{Address: addrs[0]}).OpenSession(t.Context(),
		baton.SessionOptions{Lease: lease, Label: "resumable-holder", Resume: baton.ResumeOn, Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !s.Resumable() {
		t.Fatal("the node did not make the session resumable")
	}
	h := &resumableHolder{s: s, token: make(chan uint64, 1), finish: make(chan struct{}),
		cancelled: make(chan error, 1), done: make(chan error, 1)}
	go func() { h.done <- runHolder(t.Context(), s, name, h) }()
	select {
	case tok := <-h.token:
		h.token <- tok
	case err := <-h.done:
		t.Fatalf("Do: %v", err)
	case <-time.After(2 * opstest.Timeout):
		t.Fatal("the holder was not granted")
	}
	return h
}

// runHolder runs Do on s for name, reporting to h: its token when
// granted, a cancellation of fn's context, and (by the caller) Do's result.
func runHolder(ctx context.Context, s *baton.Session, name string, h *resumableHolder) error {
	return s.Do(ctx, name, baton.Exclusive, func(ctx context.Context, token uint64) error {
		stop := context.AfterFunc(ctx, func() { h.cancelled <- context.Cause(ctx) })
		defer stop()
		h.token <- token
		<-h.finish
		return nil
	})
}

// servedName returns a name that owner owns, once owner serves it with
// lease recorded as the cluster's largest (the first grant records it,
// which may lengthen the warm-up of the names the joins moved).
func servedName(t *testing.T, owner *clusterProc, prefix string, lease time.Duration) string {
	t.Helper()
	name := nameOwnedBy(t, owner.id, prefix)
	for range 2 {
		probe, _ := waitGrant(t, owner.addr, name, lease)
		probe.Close()
		waitFree(t, owner, name)
	}
	return name
}

// waitResumed waits until the holder's session no longer lives on node.
func (h *resumableHolder) waitResumed(t *testing.T, node string, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for h.s.Node() == node {
		select {
		case cause := <-h.cancelled:
			t.Fatalf("fn's context cancelled %v after the kill: %v", time.Since(since), cause)
		default:
		}
		if time.Now().After(deadline) || h.s.Err() != nil {
			t.Fatalf("not resumed: %v", h.s.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end lets fn return and checks that it ran undisturbed with token tok.
func (h *resumableHolder) end(t *testing.T, tok uint64) {
	t.Helper()
	close(h.finish)
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	case <-time.After(2 * opstest.Timeout):
		t.Fatal("Do did not return")
	}
	select {
	case cause := <-h.cancelled:
		t.Fatalf("fn's context was cancelled: %v", cause)
	default:
	}
	if got := <-h.token; got != tok {
		t.Fatalf("token %d, then %d", tok, got)
	}
}

// busyVia checks that another client cannot take name through node n.
func busyVia(t *testing.T, n *clusterProc, name string, lease time.Duration) {
	t.Helper()
	s, err := baton.New(baton.Config{Address: n.addr}).OpenSession(t.Context(), baton.SessionOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cl, err := s.TryAcquire(t.Context(), name, baton.Exclusive); !errors.Is(err, baton.ErrBusy) {
		if cl != nil {
			cl.Release(t.Context())
		}
		t.Fatalf("%s via %s: %v, want busy", name, n.id, err)
	}
}

// kill -9 of the node the client is connected to (a relay): the session
// resumes through the next address, the owner having kept the claim.
func TestClusterClientResumesAfterRelayKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n2"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	victim, owner, other := followerFirst(nodes, st.Leader)
	const lease = 3 * time.Second
	name := servedName(t, owner, "client-resume", lease)
	h := holdResumable(t, name, lease, []string{victim.addr, other.addr, owner.addr})
	tok := <-h.token
	h.token <- tok
	if h.s.Node() != victim.id {
		t.Fatalf("session on node %q, want %s", h.s.Node(), victim.id)
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	h.waitResumed(t, victim.id, killed)
	t.Logf("node %s killed; the session resumed on %s %v later", victim.id, h.s.Node(), time.Since(killed).Round(time.Millisecond))
	// Past the claim's give-up on the dead node's session: only a
	// re-assertion answered in time keeps it.
	time.Sleep(time.Until(killed.Add(lease)))
	busyVia(t, other, name, lease)
	h.end(t, tok)
}

// kill -9 of the node that owns the lock, which the client is connected
// to: once it is removed, the client's re-assertion is accepted by the
// name's new owner with the old token, and the work goes on.
func TestClusterClientKeepsLockAfterOwnerKilled(t *testing.T) {
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
	name := servedName(t, victim, "client-takeover", lease)
	h := holdResumable(t, name, lease, []string{victim.addr, live[0].addr, live[1].addr})
	tok := <-h.token
	h.token <- tok
	if h.s.Node() != victim.id {
		t.Fatalf("session on node %q, want %s", h.s.Node(), victim.id)
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	if code, out, errOut := cli("cluster", "remove", "--admin", live[1].admin, victim.id); code != 0 {
		t.Fatalf("baton cluster remove = %d, %q, %q", code, out, errOut)
	}
	h.waitResumed(t, victim.id, killed)
	// Resumed means a WELCOME. The name's new owner took it over
	// without its state: the lock shows the old token once the
	// re-assertion has installed it.
	deadline := time.Now().Add(lease)
	for shown := false; !shown; {
		select {
		case cause := <-h.cancelled:
			t.Fatalf("fn's context cancelled %v after the kill: %v", time.Since(killed), cause)
		default:
		}
		for _, n := range live {
			_, out, _ := cli("show", "--admin", n.admin, name)
			shown = shown || strings.Contains(out, strconv.FormatUint(tok, 10))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never shown held with token %d after the kill", name, tok)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("owner %s killed and removed; the holder's session resumed on %s and its claim was installed %v after the kill, token %d",
		victim.id, h.s.Node(), time.Since(killed).Round(time.Millisecond), tok)
	h.end(t, tok)
}
