package server_test

// Heartbeat replies and the promotion push share one connection: a
// WAITING must never follow an ACQUIRED, and every reply is counted.

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// TestHeartbeatRepliesAroundPromotion: a waiter sends heartbeats as fast
// as it can while the owner leaves. It must read WAITING zero or more
// times, then ACQUIRED for the rest, all with one token: exactly one
// reply per heartbeat plus the one push, and nothing else. The owner
// leaves at a different point in each of 200 runs. The heartbeats go one
// write each, or all in one write (the server then reads and answers them
// in batches).
func TestHeartbeatRepliesAroundPromotion(t *testing.T) {
	t.Parallel()
	for _, burst := range []bool{false, true} {
		t.Run(fmt.Sprintf("burst=%v", burst), func(t *testing.T) {
			t.Parallel()
			testHeartbeatRepliesAroundPromotion(t, burst)
		})
	}
}

func testHeartbeatRepliesAroundPromotion(t *testing.T, burst bool) {
	const runs, beats = 200, 16
	ts := startServer(t)
	for i := range runs {
		name := fmt.Sprintf("order-%d", i)
		owner, waiter := ts.dial(t), ts.dial(t)
		ownerToken := owner.mustOwn(name, longLease)
		waiter.mustWait(name, longLease)

		sent := make(chan error, 1)
		go func() {
			if burst {
				sent <- waiter.write(heartbeats(beats))
				return
			}
			for range beats {
				if err := waiter.sendHeartbeat(); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		leaveAfter := i % (beats + 1) // replies read before the owner leaves
		if leaveAfter == 0 {
			owner.close()
		}
		var frames []protocol.ServerFrame
		for len(frames) < beats+1 {
			frames = append(frames, waiter.mustRead())
			if len(frames) == leaveAfter {
				owner.close()
			}
		}
		if err := <-sent; err != nil {
			t.Fatalf("run %d: heartbeat: %v", i, err)
		}
		promoted := -1
		for j, f := range frames {
			switch {
			case f.Type == protocol.TypeWaiting && promoted < 0:
			case f.Type == protocol.TypeAcquired && f.Token > ownerToken && (promoted < 0 || f.Token == frames[promoted].Token):
				if promoted < 0 {
					promoted = j
				}
			default:
				t.Fatalf("run %d: frame %d is %v in %v; want WAITING…, then ACQUIRED with one token > %d",
					i, j, f, frames, ownerToken)
			}
		}
		if promoted < 0 {
			t.Fatalf("run %d: no ACQUIRED among %v", i, frames)
		}
		// One reply per heartbeat plus the push: nothing is left but EOF.
		waiter.expectOnlyEOFAfterHalfClose()
	}
}

// countingListener counts the server's reads and writes on its
// connections.
type countingListener struct {
	net.Listener
	reads, writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(b []byte) (int, error)  { c.l.reads.Add(1); return c.Conn.Read(b) }
func (c *countingConn) Write(b []byte) (int, error) { c.l.writes.Add(1); return c.Conn.Write(b) }

// TestHeartbeatBatch: heartbeats that arrive together are read with a
// few reads and answered with a few writes, one reply each, rather than
// one read and one write per byte (a flood of heartbeats cost each
// session two system calls per heartbeat).
func TestHeartbeatBatch(t *testing.T) {
	t.Parallel()
	const beats = 64
	cl := &countingListener{}
	ts := startServerWrapped(t, func(ln net.Listener) net.Listener { cl.Listener = ln; return cl })
	c := ts.dial(t)
	token := c.mustOwn("batch", longLease)
	reads0, writes0 := cl.reads.Load(), cl.writes.Load()
	c.mustWrite(heartbeats(beats))
	for i := range beats {
		f := c.mustRead()
		if f.Type != protocol.TypeAcquired || f.Token != token {
			t.Fatalf("reply %d: %v, want ACQUIRED(%d)", i, f, token)
		}
	}
	reads, writes := cl.reads.Load()-reads0, cl.writes.Load()-writes0
	t.Logf("%d heartbeats in one write: %d server reads, %d server writes", beats, reads, writes)
	if writes > beats/4 || reads > beats/4+1 {
		t.Errorf("%d heartbeats took %d reads and %d writes, want at most %d of each", beats, reads, writes, beats/4)
	}
	c.expectOnlyEOFAfterHalfClose()
}
