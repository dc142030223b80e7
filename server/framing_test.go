package server_test

// TCP is a byte stream: the server must not assume one read is one
// frame, in either direction.

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// TestAcquireByteByByte: an ACQUIRE that arrives one byte at a time is
// one ACQUIRE.
func TestAcquireByteByByte(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	c := ts.dial(t)
	for _, b := range acquireFrame("bytewise", longLease) {
		c.mustWrite([]byte{b})
		time.Sleep(2 * time.Millisecond) // let each byte travel alone
	}
	token := c.expectAcquired()
	if info, ok := ts.Lock("bytewise"); !ok || info.Holder.Token != token {
		t.Fatalf("Lock(bytewise) = %+v, %v; want held with token %d", info.Holder, ok, token)
	}
}

// TestFramesInOneWrite: several frames in one write are each answered.
func TestFramesInOneWrite(t *testing.T) {
	t.Parallel()
	ts := startServer(t)

	t.Run("ACQUIRE and HEARTBEAT as owner", func(t *testing.T) {
		c := ts.dial(t)
		c.mustWrite(append(acquireFrame("joined", longLease), heartbeats(1)...))
		token := c.expectAcquired()
		if tok := c.expectAcquired(); tok != token {
			t.Fatalf("heartbeat answered ACQUIRED(%d), want ACQUIRED(%d)", tok, token)
		}
		c.expectOnlyEOFAfterHalfClose()
	})
	t.Run("ACQUIRE and HEARTBEAT as waiter", func(t *testing.T) {
		ts.dial(t).mustOwn("queued", longLease)
		c := ts.dial(t)
		c.mustWrite(append(acquireFrame("queued", longLease), heartbeats(1)...))
		for i := range 2 {
			if f := c.mustRead(); f.Type != protocol.TypeWaiting {
				t.Fatalf("reply %d: %v, want WAITING", i, f)
			}
		}
		c.expectOnlyEOFAfterHalfClose()
	})
	t.Run("ten heartbeats", func(t *testing.T) {
		c := ts.dial(t)
		token := c.mustOwn("ten", longLease)
		c.mustWrite(heartbeats(10))
		for i := range 10 {
			if f := c.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
				t.Fatalf("reply %d: %v, want ACQUIRED(%d)", i, f, token)
			}
		}
		c.expectOnlyEOFAfterHalfClose()
	})
}

// expectOnlyEOFAfterHalfClose half-closes the connection, which ends the
// session, and expects EOF with no frame before it: the server sent no
// more replies than were read.
func (c *client) expectOnlyEOFAfterHalfClose() {
	c.t.Helper()
	if err := c.conn.CloseWrite(); err != nil {
		c.t.Fatal(err)
	}
	c.expectEOF()
}
