package main

import (
	"context"
	"errors"
	"github.com/batonlock/baton/ranges"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
)

// openRangeSession opens a session on node n, which relays the range
// locks of keys other nodes own, closed when the test ends.
func openRangeSession(t *testing.T, n *clusterProc, lease time.Duration, label string) *baton.Session {
	t.Helper()
	s, err := baton.New(baton.Config{Address: n.addr, Routing: baton.RoutingOff}).OpenSession(t.Context(),
		baton.SessionOptions{Lease: lease, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestClusterRangeOwnerKilled: range locks of clients on two live nodes,
// served by a third that is killed (kill -9). The holder's lease (2 s) is
// too short to re-assert its lock at the next owner: its node gives up
// at half the lease, before T, and ends the session (its client stops
// believing), and the key is granted again only at its new owner, after
// the failover and the warm-up (about T + W), never within the holder's
// give-up.
func TestClusterRangeOwnerKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	_, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	const lease = 2 * time.Second
	key := nameOwnedBy(t, victim.id, "range")
	holder, other := openRangeSession(t, live[0], lease, "range-holder"), openRangeSession(t, live[1], lease, "range-waiter")
	ctx, cancel := context.WithTimeout(t.Context(), 2*opstest.Timeout)
	defer cancel()
	l := ranges.Lock{Key: key, Owner: 1, Type: ranges.WriteLock, End: ranges.ToEnd}
	tok, err := ranges.New(holder).Set(ctx, l, true) // waits out a new cluster's warm-up
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ranges.New(other).Set(ctx, l, false); !errors.Is(err, ranges.ErrConflict) {
		t.Fatalf("a second client's set on %s via %s: %v, want a conflict", key, live[1].id, err)
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	granted := make(chan error, 1)
	var newTok uint64
	go func() {
		var err error
		newTok, err = ranges.New(other).Set(ctx, l, true)
		granted <- err
	}()
	select {
	case <-holder.Lost():
		t.Logf("the relayed holder's session ended %v after the kill: %v", time.Since(killed), holder.Err())
	case <-time.After(2 * opstest.Timeout):
		t.Fatal("the relayed holder's session lives on after its owner's death")
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter's set after the kill: %v", err)
	}
	after := time.Since(killed)
	giveUp := lease * 4 / 5
	if after < giveUp {
		t.Errorf("granted %v after the kill, within the holder's give-up (%v)", after, giveUp)
	}
	if newTok <= tok {
		t.Errorf("new token %d, want above %d", newTok, tok)
	}
	t.Logf("%s killed: its key granted again %v later (T %v, W %v)", victim.id, after, failRemoveAfter,
		cluster.WarmupFor(lease, cluster.DefaultGateSlack))
}

// TestClusterRangeHandedOverOnStop: the owner of a key with a range lock
// on it is stopped (SIGTERM, a planned stop): the lock moves to the key's
// new owner with its holder's session, which a live node relays.
func TestClusterRangeHandedOverOnStop(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	testRangeKeptThrough(t, nodes, 4*time.Second, func(victim *clusterProc) (settle time.Duration) {
		if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-victim.exited
		if code := victim.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited with %d after SIGTERM", victim.id, code)
		}
		return 500 * time.Millisecond
	})
}

// TestClusterRangeKeptThroughOwnerKill: the owner of a key with a range
// lock on it is killed (kill -9). The holder's node, which relays its
// session, re-asserts the lock at the key's next owner once the failed
// node is removed (T). The lease (6 s) is longer than twice the
// failover: the re-assertion must come within half of it, and within
// 0.8 of it after the holder's last confirmed request.
func TestClusterRangeKeptThroughOwnerKill(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	const lease = 6 * time.Second
	testRangeKeptThrough(t, nodes, lease, func(victim *clusterProc) (settle time.Duration) {
		if err := victim.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-victim.exited
		// Through the failover and the new owner's warm-up.
		return failRemoveAfter + cluster.WarmupFor(lease, cluster.DefaultGateSlack) + time.Second
	})
}

// rangeResult is the end of a waiting ranges.Locker.Set: its token or error, and
// when it returned.
type rangeResult struct {
	tok uint64
	err error
	at  time.Time
}

// setRangeAsync sets l on s, waiting, in a goroutine, and returns where
// its result comes; it gives the request 100 ms to queue at the owner.
func setRangeAsync(ctx context.Context, s *baton.Session, l ranges.Lock) <-chan rangeResult {
	granted := make(chan rangeResult, 1)
	go func() {
		tok, err := ranges.New(s).Set(ctx, l, true)
		granted <- rangeResult{tok, err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	return granted
}

// testRangeKeptThrough has a client on one live node hold a range lock on
// a key of a third node, with a client on the other live node waiting
// for it, and applies fault to the third node: the holder never loses
// its session, the waiter is not granted for settle after the fault, the
// holder then extends its lock (served at the key's new owner, whose
// ranges are the holder's), and the waiter is granted only when the
// holder unlocks, with a newer token.
func testRangeKeptThrough(t *testing.T, nodes map[string]*clusterProc, lease time.Duration, fault func(victim *clusterProc) (settle time.Duration)) {
	_, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	key := nameOwnedBy(t, victim.id, "range-kept")
	holder, other := openRangeSession(t, live[0], lease, "range-holder"), openRangeSession(t, live[1], lease, "range-waiter")
	ctx, cancel := context.WithTimeout(t.Context(), 4*opstest.Timeout)
	defer cancel()
	l := ranges.Lock{Key: key, Owner: 1, Type: ranges.WriteLock, End: 99}
	tok, err := ranges.New(holder).Set(ctx, l, true) // waits out a new cluster's warm-up
	if err != nil {
		t.Fatal(err)
	}
	granted := setRangeAsync(ctx, other, ranges.Lock{Key: key, Owner: 2, Type: ranges.WriteLock, Start: 50, End: 50})

	hit := time.Now()
	settle := fault(victim)
	t.Logf("%s's fault took %v", victim.id, time.Since(hit).Round(time.Millisecond))
	select {
	case r := <-granted:
		t.Fatalf("the waiter's set ended while the holder holds its lock: token %d, %v", r.tok, r.err)
	case <-holder.Lost():
		t.Fatalf("the holder's session ended: %v", holder.Err())
	case <-time.After(time.Until(hit.Add(settle))):
	}
	ext := ranges.Lock{Key: key, Owner: 1, Type: ranges.WriteLock, Start: 200, End: 299}
	for {
		_, err := ranges.New(holder).Set(ctx, ext, false)
		if err == nil {
			break
		}
		if !errors.Is(err, ranges.ErrUnavailable) {
			t.Fatalf("the holder's set after the fault: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the holder's set served at the key's new owner %v after the fault", time.Since(hit).Round(time.Millisecond))
	unlocked := time.Now()
	if err := ranges.New(holder).Unlock(ctx, l); err != nil {
		t.Fatal(err)
	}
	r := <-granted
	if r.err != nil {
		t.Fatalf("the waiter's set: %v", r.err)
	}
	if r.tok <= tok {
		t.Errorf("the waiter's token %d, want above the holder's %d", r.tok, tok)
	}
	t.Logf("the waiter granted %v after the holder unlocked", r.at.Sub(unlocked).Round(time.Microsecond))
	select {
	case <-holder.Lost():
		t.Fatalf("the holder's session ended: %v", holder.Err())
	default:
	}
}
