package server_test

// Every client error code for the input that causes it, each followed by
// a close, and the ERROR frame's exact bytes.

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// rawAcquire builds an ACQUIRE with every field as given, including a
// name_len that need not match the name that follows.
func rawAcquire(version uint8, leaseMS uint32, nameLen uint16, name string) []byte {
	b := []byte{byte(protocol.TypeAcquire), version}
	b = binary.BigEndian.AppendUint32(b, leaseMS)
	b = binary.BigEndian.AppendUint16(b, nameLen)
	return append(b, name...)
}

// expectErrorBytes reads everything the server sends until it closes the
// connection and checks that it is exactly one well-formed ERROR(code)
// frame: reason_len matches the reason that follows, the reason is the
// code's canonical text, and EOF comes right after it.
func (c *client) expectErrorBytes(code protocol.Code) {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(waitLimit))
	raw, err := io.ReadAll(c.conn)
	if err != nil {
		c.t.Fatalf("%s: reading until EOF: %v (got % x so far)", c, err, raw)
	}
	c.close() // as a client does on EOF; the server stops draining
	want := protocol.AppendError(nil, code, "")
	if !bytes.Equal(raw, want) {
		c.t.Fatalf("%s: server sent % x before EOF, want exactly ERROR(0x%02x) = % x", c, raw, uint8(code), want)
	}
	r := bytes.NewReader(raw)
	f, err := protocol.ReadServerFrame(r)
	if err != nil || r.Len() != 0 {
		c.t.Fatalf("%s: frame % x: %v, %d bytes left", c, raw, err, r.Len())
	}
	if f.Type != protocol.TypeError || f.Code != code || f.Reason != code.Reason() || int(raw[2]) != len(f.Reason) {
		c.t.Fatalf("%s: got %v (reason_len %d), want ERROR(0x%02x %q)", c, f, raw[2], uint8(code), code.Reason())
	}
}

// TestFirstFrameErrors sends one bad first frame per case and expects the
// code of the first rule it breaks, in the protocol's order, then EOF.
func TestFirstFrameErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	long := strings.Repeat("n", 256)
	cases := []struct {
		name  string
		input []byte
		code  protocol.Code
	}{
		{"version 0", rawAcquire(0, 1000, 3, "job"), protocol.CodeUnsupportedVersion},
		{"version 2", rawAcquire(2, 1000, 3, "job"), protocol.CodeUnsupportedVersion},
		{"version 255 alone", []byte{0x01, 0xff}, protocol.CodeUnsupportedVersion},
		{"bad version before zero lease", rawAcquire(3, 0, 0, ""), protocol.CodeUnsupportedVersion},
		// Version 2 with lease 0 and name_len 0 is the version 2 preamble
		// (v2_test.go); version 2 with other bytes is refused.
		{"version 2 lease 0 name_len 1", rawAcquire(2, 0, 1, "j"), protocol.CodeUnsupportedVersion},
		{"heartbeat first", []byte{0x02}, protocol.CodeFirstNotAcquire},
		{"heartbeat then acquire", append([]byte{0x02}, acquireFrame("job", time.Second)...), protocol.CodeFirstNotAcquire},
		{"unknown type 0x00", []byte{0x00}, protocol.CodeUnknownMessage},
		{"unknown type 0x03", []byte{0x03}, protocol.CodeUnknownMessage},
		{"server type 0x12 from client", []byte{0x12}, protocol.CodeUnknownMessage},
		{"unknown type 0xff", []byte{0xff, 0x01, 0x01}, protocol.CodeUnknownMessage},
		{"lease 0", rawAcquire(1, 0, 3, "job"), protocol.CodeInvalidLease},
		{"lease 0 before empty name", rawAcquire(1, 0, 0, ""), protocol.CodeInvalidLease},
		{"empty name", rawAcquire(1, 1000, 0, ""), protocol.CodeEmptyName},
		{"name_len 256", rawAcquire(1, 1000, 256, long), protocol.CodeNameTooLong},
		{"name_len 256 without the name", rawAcquire(1, 1000, 256, ""), protocol.CodeNameTooLong},
		{"name_len 65535", rawAcquire(1, 1000, 65535, strings.Repeat("x", 65535)), protocol.CodeNameTooLong},
		{"name too long before invalid UTF-8", rawAcquire(1, 1000, 256, strings.Repeat("\xff", 256)), protocol.CodeNameTooLong},
		{"invalid UTF-8 0xff", rawAcquire(1, 1000, 1, "\xff"), protocol.CodeInvalidName},
		{"invalid UTF-8 truncated sequence", rawAcquire(1, 1000, 2, "a\xc3"), protocol.CodeInvalidName},
		{"invalid UTF-8 surrogate", rawAcquire(1, 1000, 3, "\xed\xa0\x80"), protocol.CodeInvalidName},
		{"invalid UTF-8 overlong", rawAcquire(1, 1000, 2, "\xc0\xaf"), protocol.CodeInvalidName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ts.dial(t)
			// The server may close before it has read a long input (it
			// stops at the first broken rule); the write may then fail,
			// which is fine: the frame must still arrive.
			go c.write(tc.input)
			c.expectErrorBytes(tc.code)
			ts.events.wait(t, "error_sent", func(e server.Event) bool {
				return e.Kind == server.EventErrorSent && e.Peer.Addr == c.addr() && e.Code == tc.code
			})
			ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
		})
	}
	// Cleanups run after the parallel subtests, before the shutdown.
	t.Cleanup(func() {
		if n := ts.Counts(); n != (server.Counts{}) {
			t.Errorf("after only bad ACQUIREs the table has %+v, want empty", n)
		}
	})
}

// TestLongestNameIsAccepted pins the boundary: 255 bytes is valid.
func TestLongestNameIsAccepted(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	name := strings.Repeat("é", 127) + "x" // 255 bytes of valid UTF-8
	c := ts.dial(t)
	c.mustOwn(name, longLease)
	if _, ok := ts.Lock(name); !ok {
		t.Fatalf("Lock(%d-byte name) not held", len(name))
	}
}

// TestDuplicateAcquireAsWaiter: a waiter's second ACQUIRE is 0x12 and
// costs it its place; the owner keeps the lock.
func TestDuplicateAcquireAsWaiter(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner, waiter, next := ts.dial(t), ts.dial(t), ts.dial(t)
	token := owner.mustOwn("dup", longLease)
	waiter.mustWait("dup", longLease)
	next.mustWait("dup", longLease)

	waiter.mustWrite(acquireFrame("dup", longLease))
	waiter.expectErrorBytes(protocol.CodeDuplicateAcquire)
	e := ts.events.wait(t, "dequeued", peerEvent(server.EventDequeued, waiter))
	if e.Reason != server.ReasonProtocolError {
		t.Errorf("dequeued with reason %v, want protocol_error", e.Reason)
	}

	// The owner still holds the lock with the same token, and the
	// waiter behind the offender is next.
	owner.mustWrite(heartbeats(1))
	if f := owner.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
		t.Fatalf("owner's heartbeat answered %v, want ACQUIRED(%d)", f, token)
	}
	owner.close()
	if tok := next.expectAcquired(); tok <= token {
		t.Fatalf("next waiter got token %d, want > %d", tok, token)
	}
}

// TestDuplicateAcquireAsOwner: the owner's second ACQUIRE is 0x12 and the
// lock passes to the next waiter at once.
func TestDuplicateAcquireAsOwner(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner, waiter := ts.dial(t), ts.dial(t)
	token := owner.mustOwn("dup", longLease)
	waiter.mustWait("dup", longLease)

	owner.mustWrite(acquireFrame("dup", longLease))
	owner.expectErrorBytes(protocol.CodeDuplicateAcquire)
	if tok := waiter.expectAcquired(); tok <= token {
		t.Fatalf("waiter got token %d, want > %d", tok, token)
	}
	e := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
	if e.Reason != server.ReasonProtocolError || e.Token != token {
		t.Errorf("released %s, want reason protocol_error token %d", formatEvent(e), token)
	}
}

// TestUnknownTypeAfterAcquire: an unknown type byte from an owner is 0x13
// and the lock passes on; from a waiter it is 0x13 too.
func TestUnknownTypeAfterAcquire(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner, waiter, last := ts.dial(t), ts.dial(t), ts.dial(t)
	owner.mustOwn("unk", longLease)
	waiter.mustWait("unk", longLease)
	last.mustWait("unk", longLease)

	waiter.mustWrite([]byte{0x7f})
	waiter.expectErrorBytes(protocol.CodeUnknownMessage)

	owner.mustWrite([]byte{0x11})
	owner.expectErrorBytes(protocol.CodeUnknownMessage)
	last.expectAcquired()
}

// denyPrefix is an Authorizer that refuses names with a prefix and
// records what it was asked.
type denyPrefix struct {
	prefix string
	mu     sync.Mutex
	asked  []string
}

func (a *denyPrefix) Allow(identity, lock string) bool {
	a.mu.Lock()
	a.asked = append(a.asked, lock)
	a.mu.Unlock()
	return !strings.HasPrefix(lock, a.prefix)
}

// TestNotAuthorized: an Authorizer's refusal is 0x18 with an EventDenied;
// invalid ACQUIREs are refused by validation before it is asked.
func TestNotAuthorized(t *testing.T) {
	t.Parallel()
	authz := &denyPrefix{prefix: "secret/"}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })

	denied := ts.dial(t)
	denied.mustWrite(acquireFrame("secret/payroll", longLease))
	denied.expectErrorBytes(protocol.CodeNotAuthorized)
	e := ts.events.wait(t, "denied", peerEvent(server.EventDenied, denied))
	if e.Lock != "secret/payroll" {
		t.Errorf("denied event for lock %q, want secret/payroll", e.Lock)
	}
	if _, ok := ts.Lock("secret/payroll"); ok {
		t.Errorf("a denied ACQUIRE holds the lock")
	}

	invalid := ts.dial(t)
	invalid.mustWrite(rawAcquire(1, 1000, 1, "\xff"))
	invalid.expectErrorBytes(protocol.CodeInvalidName)

	allowed := ts.dial(t)
	allowed.mustOwn("public/report", longLease)

	authz.mu.Lock()
	asked := authz.asked
	authz.mu.Unlock()
	if want := []string{"secret/payroll", "public/report"}; !slices.Equal(asked, want) {
		t.Errorf("Authorizer asked about %q, want %q (never about an invalid name)", asked, want)
	}
	if n := ts.events.count(kind(server.EventDenied)); n != 1 {
		t.Errorf("%d denied events, want 1", n)
	}
}
