package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// TestSnapshotMatchesOutsideTheTableLock: a Snapshot filter that has not
// returned yet (an administrator's slow pattern) does not hold the table:
// ACQUIREs and HEARTBEATs are answered meanwhile.
func TestSnapshotMatchesOutsideTheTableLock(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	holder := ts.dial(t)
	holder.mustOwn("a", longLease)

	inMatch, release := make(chan struct{}), make(chan struct{})
	done := make(chan int, 1)
	go func() {
		first := true
		got := ts.Snapshot(func(name string) bool {
			if first {
				first = false
				close(inMatch)
				select {
				case <-release:
				case <-time.After(waitLimit):
				}
			}
			return true
		})
		done <- len(got)
	}()
	<-inMatch
	start := time.Now()
	holder.mustWrite(protocol.AppendHeartbeat(nil))
	if f, err := holder.read(3 * time.Second); err != nil || f.Type != protocol.TypeAcquired {
		close(release)
		t.Fatalf("heartbeat while a Snapshot filter ran: %v %v, want ACQUIRED at once", f, err)
	}
	other := ts.dial(t)
	other.mustWrite(acquireFrame("b", longLease))
	if f, err := other.read(3 * time.Second); err != nil || f.Type != protocol.TypeAcquired {
		close(release)
		t.Fatalf("ACQUIRE while a Snapshot filter ran: %v %v, want ACQUIRED at once", f, err)
	}
	t.Logf("heartbeat and ACQUIRE answered in %v while a Snapshot filter ran", time.Since(start))
	close(release)
	if n := <-done; n != 1 {
		t.Errorf("Snapshot returned %d locks, want the 1 held when it started", n)
	}
}
