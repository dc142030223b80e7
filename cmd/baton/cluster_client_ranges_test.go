package main

import (
	"context"
	"errors"
	"github.com/batonlock/baton/ranges"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
)

// TestClusterClientRangesSurviveOwnNodeKilled: a resumable session of
// the Go client holds two range locks through the node it is connected
// to: an fcntl range on a key a live node owns (relayed there), and a
// flock on a key that node owns itself. The node is killed (kill -9).
// The session resumes on another node and re-asserts both: the live
// owner gives back the range it kept for the dead node's upstream
// session, the key's next owner installs the flock during its warm-up.
// The session never ends, a client on a third node waits (or is told
// conflict) past every give-up of the dead node's session, and is
// granted only when the holder unlocks, with a newer token. The lease
// (8 s) is longer than the failover (T 1.5 s) plus the resume.
func TestClusterClientRangesSurviveOwnNodeKilled(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	owner, victim := leaderAndFollower(t, nodes)
	var other *clusterProc
	for _, n := range others(nodes, victim) {
		if n != owner {
			other = n
		}
	}
	const lease = 8 * time.Second
	relayed := nameOwnedBy(t, owner.id, "ranges-resume-relayed")
	own := nameOwnedBy(t, victim.id, "ranges-resume-own")
	holder, err := baton.New(baton.Config{Address: victim.addr, Routing: baton.RoutingOff}).OpenSession(t.Context(),
		baton.SessionOptions{Lease: lease, Label: "range-holder", Resume: baton.ResumeOn, Addrs: []string{victim.addr, other.addr, owner.addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	waiter := openRangeSession(t, other, lease, "range-waiter")
	ctx, cancel := context.WithTimeout(t.Context(), 4*opstest.Timeout)
	defer cancel()

	fcntl := ranges.Lock{Key: relayed, Owner: 1, Type: ranges.WriteLock, End: 99}
	flock := ranges.Lock{Key: own, Flock: true, Owner: 2, Type: ranges.WriteLock}
	tok, err := ranges.New(holder).Set(ctx, fcntl, true) // waits out a new cluster's warm-up
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ranges.New(holder).Set(ctx, flock, true); err != nil {
		t.Fatal(err)
	}
	granted := setRangeAsync(ctx, waiter, ranges.Lock{Key: relayed, Owner: 7, Type: ranges.WriteLock, Start: 50, End: 50})

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	deadline := killed.Add(lease)
	for holder.Node() == victim.id {
		if holder.Err() != nil || time.Now().After(deadline) {
			t.Fatalf("the holder's session was not resumed: %v", holder.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("node %s killed; the holder's session resumed on %s %v later", victim.id, holder.Node(), time.Since(killed).Round(time.Millisecond))

	// Past the give-up of every request answered on the dead node's
	// session (and through the next owner's warm-up, which answers
	// unavailable): only re-assertions answered in time keep the locks.
	probe := ranges.Lock{Key: own, Flock: true, Owner: 9, Type: ranges.WriteLock}
	limit := deadline.Add(failRemoveAfter + cluster.WarmupFor(lease, cluster.DefaultGateSlack) + opstest.Timeout)
	var conflictAt time.Time
	for conflict := false; !conflict || time.Now().Before(deadline); {
		_, err := ranges.New(waiter).Set(ctx, probe, false)
		switch {
		case errors.Is(err, ranges.ErrConflict):
			if !conflict {
				conflictAt = time.Now()
			}
			conflict = true
		case errors.Is(err, ranges.ErrUnavailable):
		case err == nil:
			t.Fatalf("the flock on %s was granted to another client %v after the kill, while the holder keeps it", own, time.Since(killed))
		default:
			t.Fatalf("another client's flock on %s: %v", own, err)
		}
		if time.Now().After(limit) {
			t.Fatalf("another client's flock on %s never met the holder's: %v", own, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the flock on %s, whose owner was killed, first met as the holder's at its next owner %v after the kill",
		own, conflictAt.Sub(killed).Round(time.Millisecond))
	select {
	case r := <-granted:
		t.Fatalf("the waiter's set ended while the holder holds its range: token %d, %v", r.tok, r.err)
	case <-holder.Lost():
		t.Fatalf("the holder's session ended: %v", holder.Err())
	default:
	}

	// The locks are the resumed session's: its unlock and release let
	// the others in, with newer tokens.
	unlocked := time.Now()
	if err := ranges.New(holder).Unlock(ctx, fcntl); err != nil {
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
	if err := ranges.New(holder).ReleaseOwner(ctx, own, true, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := ranges.New(waiter).Set(ctx, probe, false); err != nil {
		t.Fatalf("another client's flock on %s after the holder released it: %v", own, err)
	}
	if err := holder.Err(); err != nil {
		t.Fatalf("the holder's session ended: %v", err)
	}
}
