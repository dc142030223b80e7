package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

const (
	excl = protocol.ModeExclusive
	shrd = protocol.ModeShared
	sema = protocol.ModeSemaphore
)

// TestV2EveryFrame walks one session through every client frame and every
// server frame but ERROR, with the answers in request order.
func TestV2EveryFrame(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	other := ts.dialV2(t, longLease, "other")
	other.mustHold(1, excl, 0, "job")

	c := ts.dialV2(t, longLease, "w1")
	c.mustWrite(protocol.AppendPing(nil, 42))
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 42 {
		t.Fatalf("PING(42) answered %v", f)
	}
	c.mustQueue(1, excl, 0, "job")
	t2 := c.mustHold(2, shrd, 0, "db")
	c.mustQueue(3, excl, 0, "job") // a second waiter of the same session
	c.release(3)                   // leaves the queue
	c.mustWrite(noWaitFrame(4, sema, 4, "pool-held"))
	c.expect(protocol.TypeGranted, 4)
	c.mustWrite(noWaitFrame(5, excl, 0, "job"))
	c.expect(protocol.TypeBusy, 5)

	other.release(1)
	t1 := c.expectPromoted(1)
	if t1 <= t2 {
		t.Errorf("PROMOTED token %d not above the earlier GRANTED token %d", t1, t2)
	}
	c.release(2)
	c.release(2) // not in use: RELEASED all the same
	c.mustWrite(claimFrame(6, sema, 0, "pool"))
	c.expectCode(protocol.TypeRefused, 6, protocol.CodeInvalidLimit)
	// Claim 1 is free again once released; the id may be reused.
	c.release(1)
	c.mustHold(1, shrd, 0, "job")
}

// TestV2SessionErrors sends one session-level fault per case and expects
// the version 2 ERROR with its code, then EOF, and nothing left in the
// table.
func TestV2SessionErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	hello := protocol.AppendHello(nil, 2000, "w1")
	frame := func(b ...byte) []byte { // length-prefixed body
		return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)
	}
	long := append([]byte{0x02, 0x01, 0x23}, make([]byte, 513)...)
	cases := []struct {
		name  string
		input []byte // after the preamble
		code  protocol.Code
	}{
		{"length 0 first", []byte{0, 0}, protocol.CodeInvalidFrame},
		{"length 513 first", []byte{0x02, 0x01}, protocol.CodeFrameTooLong},
		{"unknown type first", frame(0x2f), protocol.CodeUnknownMessage},
		{"server type from client", frame(0x31, 0, 0, 0, 0, 0, 0, 0, 7, 0), protocol.CodeUnknownMessage},
		{"PING first", protocol.AppendPing(nil, 1), protocol.CodeFirstNotHello},
		{"CLAIM first", claimFrame(1, excl, 0, "job"), protocol.CodeFirstNotHello},
		{"HELLO short", frame(0x21, 0, 0, 7, 0xd0, 0), protocol.CodeInvalidFrame},
		{"HELLO reserved flag", frame(0x21, 0, 0, 7, 0xd0, 0x80, 0), protocol.CodeUnsupportedFeature},
		{"HELLO flag before lease 0", frame(0x21, 0, 0, 0, 0, 0x04, 0), protocol.CodeUnsupportedFeature},
		{"HELLO lease 0", protocol.AppendHello(nil, 0, "w1"), protocol.CodeInvalidLease},
		{"HELLO lease 0 before bad length", frame(0x21, 0, 0, 0, 0, 0, 5), protocol.CodeInvalidLease},
		{"HELLO label_len beyond", frame(0x21, 0, 0, 7, 0xd0, 0, 3, 'a'), protocol.CodeInvalidFrame},
		{"HELLO label not UTF-8", frame(0x21, 0, 0, 7, 0xd0, 0, 1, 0xff), protocol.CodeInvalidLabel},
		{"HELLO twice", append(slicesClone(hello), hello...), protocol.CodeDuplicateHello},
		{"length 0 later", append(slicesClone(hello), 0, 0), protocol.CodeInvalidFrame},
		{"length 513 later", append(slicesClone(hello), long...), protocol.CodeFrameTooLong},
		{"unknown type later", append(slicesClone(hello), frame(0x20)...), protocol.CodeUnknownMessage},
		{"PING short", append(slicesClone(hello), frame(0x22, 0, 0, 0, 1)...), protocol.CodeInvalidFrame},
		{"RELEASE long", append(slicesClone(hello), frame(0x24, 0, 0, 0, 1, 0)...), protocol.CodeInvalidFrame},
		{"CLAIM shorter than claim and flags", append(slicesClone(hello), frame(0x23, 0, 0, 0, 1)...), protocol.CodeInvalidFrame},
		{"CLAIM name_len beyond", append(slicesClone(hello), frame(0x23, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 4, 'j')...), protocol.CodeInvalidFrame},
		{"CLAIM id in use", append(append(slicesClone(hello), claimFrame(1, excl, 0, "a")...), claimFrame(1, excl, 0, "b")...), protocol.CodeClaimInUse},
		{"CLAIM id in use before reserved flag", append(append(slicesClone(hello), claimFrame(1, excl, 0, "a")...), protocol.AppendClaim(nil, 1, excl, 0, 0x04, "b")...), protocol.CodeClaimInUse},
		{"CLAIM id in use before bad mode", append(append(slicesClone(hello), claimFrame(1, excl, 0, "a")...), claimFrame(1, 9, 0, "b")...), protocol.CodeClaimInUse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ts.dialV2Raw(t)
			go c.write(append(protocol.AppendPreamble(nil), tc.input...))
			c.expectSessionError(tc.code)
			ts.events.wait(t, "error_sent", func(e server.Event) bool {
				return e.Kind == server.EventErrorSent && e.Peer.Addr == c.addr() && e.Code == tc.code
			})
			ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c.client))
		})
	}
	t.Cleanup(func() {
		if n := ts.Counts(); n != (server.Counts{}) {
			t.Errorf("after only faulty sessions the table has %+v, want empty", n)
		}
	})
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// TestV2OpeningRefused: bytes 2–7 of the preamble not zero get the
// version 1 ERROR 0x10, as the spec's opening rules say.
func TestV2OpeningRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	for _, b := range [][]byte{
		{0x01, 0x02, 0, 0, 0, 0, 0, 1},
		{0x01, 0x02, 0, 0, 0, 1, 0, 0},
		{0x01, 0x03, 0, 0, 0, 0, 0, 0},
	} {
		c := ts.dial(t)
		c.mustWrite(b)
		c.expectErrorBytes(protocol.CodeUnsupportedVersion)
	}
}

// TestV2ClaimErrors sends one claim-level fault per case: REFUSED with the
// code, and the session lives on (a PING after it is answered, and a
// held claim stays held).
func TestV2ClaimErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner := ts.dialV2(t, longLease, "owner")
	owner.mustHold(1, sema, 2, "sem")
	owner.mustHold(2, shrd, 0, "rw")
	c := ts.dialV2(t, longLease, "c")
	held := c.mustHold(100, excl, 0, "mine")
	cases := []struct {
		name  string
		frame []byte
		code  protocol.Code
	}{
		{"reserved flag", protocol.AppendClaim(nil, 7, excl, 0, 0x08, "job"), protocol.CodeUnsupportedFeature},
		{"ticket flag without re-assertion", protocol.AppendClaim(nil, 7, excl, 0, 0x04, "job"), protocol.CodeUnsupportedFeature},
		{"reserved flag before short payload", []byte{0, 6, 0x23, 0, 0, 0, 7, 0x80}, protocol.CodeUnsupportedFeature},
		{"reserved flag before bad mode", protocol.AppendClaim(nil, 7, 9, 0, 0x40, "job"), protocol.CodeUnsupportedFeature},
		{"mode 0", claimFrame(7, 0, 0, "job"), protocol.CodeUnknownMode},
		{"mode 4 before bad limit", claimFrame(7, 4, 0, "job"), protocol.CodeUnknownMode},
		{"semaphore limit 0", claimFrame(7, sema, 0, "job"), protocol.CodeInvalidLimit},
		{"exclusive limit 1", claimFrame(7, excl, 1, "job"), protocol.CodeInvalidLimit},
		{"shared limit 1 before empty name", claimFrame(7, shrd, 1, ""), protocol.CodeInvalidLimit},
		{"empty name", claimFrame(7, excl, 0, ""), protocol.CodeEmptyName},
		{"name not UTF-8", claimFrame(7, excl, 0, "a\xff"), protocol.CodeInvalidName},
		{"semaphore on a shared lock", claimFrame(7, sema, 2, "rw"), protocol.CodeModeConflict},
		{"exclusive on a semaphore", claimFrame(7, excl, 0, "sem"), protocol.CodeModeConflict},
		{"shared on a semaphore", noWaitFrame(7, shrd, 0, "sem"), protocol.CodeModeConflict},
		{"semaphore mix before limit", claimFrame(7, sema, 3, "rw"), protocol.CodeModeConflict},
		{"semaphore limit differs", claimFrame(7, sema, 3, "sem"), protocol.CodeLimitMismatch},
	}
	for i, tc := range cases {
		c.mustWrite(tc.frame)
		c.expectCode(protocol.TypeRefused, 7, tc.code)
		c.mustWrite(protocol.AppendPing(nil, uint64(i)))
		if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != uint64(i) {
			t.Fatalf("%s: PING after REFUSED answered %v", tc.name, f)
		}
	}
	// REFUSED never puts the id in use: claim 7 works now.
	c.mustHold(7, sema, 2, "sem")
	info, ok := ts.Lock("mine")
	if !ok || info.Holder.Token != held {
		t.Fatalf("claim 100 lost its lock after claim-level errors: %+v", info)
	}
}

// TestV2SplitAndCoalesced sends one session's frames byte by byte, then
// another's all in one write: the answers are the same.
func TestV2SplitAndCoalesced(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	var in []byte
	in = append(in, openingV2(longLease, "split")...)
	in = append(in, protocol.AppendPing(nil, 1)...)
	in = append(in, claimFrame(1, excl, 0, "s1")...)
	in = append(in, claimFrame(2, shrd, 0, "s2")...)
	in = append(in, claimFrame(3, sema, 3, strings.Repeat("n", 255))...)
	in = append(in, releaseFrame(1)...)
	in = append(in, claimFrame(1, excl, 0, "s1")...)
	in = append(in, releaseFrame(9)...)
	in = append(in, protocol.AppendPing(nil, 2)...)
	want := []protocol.Type{protocol.TypeWelcome, protocol.TypePong, protocol.TypeGranted, protocol.TypeGranted,
		protocol.TypeGranted, protocol.TypeReleased, protocol.TypeGranted, protocol.TypeReleased, protocol.TypePong}
	wantClaim := []uint32{0, 0, 1, 2, 3, 1, 1, 9, 0}

	check := func(c *v2client) {
		t.Helper()
		for i, typ := range want {
			f := c.mustReadV2()
			if f.Type != typ || f.Claim != wantClaim[i] {
				t.Fatalf("%s: answer %d is %v, want %v for claim %d", c, i, f, typ, wantClaim[i])
			}
		}
	}

	split := ts.dialV2Raw(t)
	split.conn.SetNoDelay(true)
	go func() {
		for i := range in {
			if split.write(in[i:i+1]) != nil {
				return
			}
			if i%7 == 0 {
				time.Sleep(time.Millisecond) // let some bytes arrive alone
			}
		}
	}()
	check(split)
	split.close()

	whole := ts.dialV2Raw(t)
	whole.mustWrite(bytes.ReplaceAll(in, []byte("s1"), []byte("w1")))
	// Different names so both sessions are granted: s2 and the long name
	// are shared or a semaphore.
	check(whole)
}

// TestV2OneFIFO puts a version 1 client, version 2 exclusive and shared
// claims on one name and checks that they are granted in one strict
// order: readers behind a queued writer wait for it.
func TestV2OneFIFO(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	v1 := ts.dial(t)
	v1tok := v1.mustOwn("mix", longLease)
	a := ts.dialV2(t, longLease, "a")
	b := ts.dialV2(t, longLease, "b")
	a.mustQueue(1, shrd, 0, "mix") // reader 1
	b.mustQueue(1, excl, 0, "mix") // writer
	a.mustQueue(2, shrd, 0, "mix") // reader 2, behind the writer
	v1b := ts.dial(t)
	v1b.mustWait("mix", longLease) // version 1 writer, last
	b.mustQueue(2, shrd, 0, "mix") // reader 3, behind the v1 writer

	v1.close() // reader 1 only: the writer is next
	r1 := a.expectPromoted(1)
	a.expectSilenceV2(50 * time.Millisecond)
	a.release(1)
	w := b.expectPromoted(1)
	a.release(2) // reader 2 leaves the queue before its turn
	b.release(1)
	v1w := v1b.expectAcquired()
	v1b.close()
	r3 := b.expectPromoted(2)
	if !(v1tok < r1 && r1 < w && w < v1w && v1w < r3) {
		t.Fatalf("tokens out of order: v1 %d, reader %d, writer %d, v1 writer %d, reader %d", v1tok, r1, w, v1w, r3)
	}
}

// TestV2SharedTogether: readers queued behind a writer are promoted
// together when it releases, each with its own token.
func TestV2SharedTogether(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	w := ts.dialV2(t, longLease, "w")
	w.mustHold(1, excl, 0, "rw")
	r := ts.dialV2(t, longLease, "r")
	for id := uint32(1); id <= 3; id++ {
		r.mustQueue(id, shrd, 0, "rw")
	}
	w.release(1)
	seen := map[uint64]bool{}
	for id := uint32(1); id <= 3; id++ {
		tok := r.expectPromoted(id)
		if seen[tok] {
			t.Fatalf("token %d given twice", tok)
		}
		seen[tok] = true
	}
	if info, _ := ts.Lock("rw"); len(info.Holders) != 3 {
		t.Fatalf("holders %+v, want 3", info.Holders)
	}
}

// TestV2SemaphoreLimit: at most limit holders; the next waits; version 1
// on a semaphore name gets the version 1 ERROR 0x23.
func TestV2SemaphoreLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "a")
	a.mustHold(1, sema, 2, "pool")
	a.mustHold(2, sema, 2, "pool")
	b := ts.dialV2(t, longLease, "b")
	b.mustWrite(noWaitFrame(1, sema, 2, "pool"))
	b.expect(protocol.TypeBusy, 1)
	b.mustQueue(1, sema, 2, "pool")

	v1 := ts.dial(t)
	v1.mustWrite(acquireFrame("pool", longLease))
	v1.expectErrorBytes(protocol.CodeModeConflict)

	a.release(2)
	b.expectPromoted(1)
	if info, _ := ts.Lock("pool"); len(info.Holders) != 2 || info.Limit != 2 {
		t.Fatalf("lock %+v, want 2 holders of limit 2", info)
	}
}

// TestV2ExpiryEndsEveryClaim: one lease of silence ends the session and
// all its claims, held and queued, and promotes their waiters; the
// connection is closed with no frame.
func TestV2ExpiryEndsEveryClaim(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	const lease = 300 * time.Millisecond
	waiter := ts.dialV2(t, longLease, "waiter")
	blocker := ts.dialV2(t, longLease, "blocker")
	blocker.mustHold(1, excl, 0, "q")
	// The silent session's frames in one write, so that no pause of this
	// process between them can let it expire early.
	silent := ts.dialV2(t, lease, "silent")
	start := time.Now()
	var sb, wb []byte
	for id := uint32(1); id <= 5; id++ {
		sb = append(sb, claimFrame(id, excl, 0, "e"+itoa(id))...)
		wb = append(wb, claimFrame(id, excl, 0, "e"+itoa(id))...)
	}
	sb = append(sb, claimFrame(6, excl, 0, "q")...)
	wb = append(wb, claimFrame(6, excl, 0, "q")...)
	silent.mustWrite(sb)
	for id := uint32(1); id <= 5; id++ {
		silent.expect(protocol.TypeGranted, id)
	}
	silent.expect(protocol.TypeQueued, 6)
	waiter.mustWrite(wb)
	for id := uint32(1); id <= 6; id++ {
		waiter.expect(protocol.TypeQueued, id)
	}

	for id := uint32(1); id <= 5; id++ {
		waiter.expectPromoted(id)
	}
	took := time.Since(start)
	silent.expectEOFV2()
	if took < lease {
		t.Fatalf("claims ended after %v, before the lease %v", took, lease)
	}
	ts.events.wait(t, "expired", func(e server.Event) bool {
		return e.Kind == server.EventDequeued && e.Lock == "q" && e.Reason == server.ReasonExpired
	})
	blocker.release(1)
	waiter.expectPromoted(6) // the expired waiter left the queue
	t.Logf("session expired after %v (lease %v)", took, lease)
}

// TestV2PingKeepsSessionAlive: PINGs refresh the lease of every claim:
// a session pinging every lease/8 keeps its claim for six leases. A
// session lost while this process stalled for most of a lease is a
// missed timing bound (retried), not a failure.
func TestV2PingKeepsSessionAlive(t *testing.T) {
	t.Parallel()
	const lease = 400 * time.Millisecond
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t)
		c := ts.dialV2(t, lease, "pinger")
		tok := c.mustHold(1, excl, 0, "alive")
		m := startStallMeter()
		for i := range 48 {
			time.Sleep(lease / 8)
			err := c.write(protocol.AppendPing(nil, uint64(i)))
			var f protocol.Frame
			if err == nil {
				f, err = c.readV2(waitLimit)
			}
			if err != nil {
				if stall := m.worst(); stall > lease/2 {
					late("session lost after a stall of %v (lease %v): %v", stall, lease, err)
					return
				}
				t.Fatalf("PING %d: %v, with no stall of this process to explain it", i, err)
			}
			if f.Type != protocol.TypePong || f.Seq != uint64(i) {
				t.Fatalf("PING(%d) answered %v", i, f)
			}
		}
		m.worst()
		if info, ok := ts.Lock("alive"); !ok || info.Holder.Token != tok {
			t.Fatalf("claim lost while pinging: %+v", info)
		}
	})
}

// TestV2CloseReleasesThousand closes a session with 1,000 held claims and
// checks that every waiter is promoted; it reports the time.
func TestV2CloseReleasesThousand(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	const n = 1000
	holder := ts.dialV2(t, longLease, "holder")
	waiter := ts.dialV2(t, longLease, "waiter")
	var hb, wb []byte
	for id := uint32(1); id <= n; id++ {
		name := "k" + strings.Repeat("x", int(id%7)) + string(rune('a'+id%26)) + itoa(id)
		hb = append(hb, claimFrame(id, excl, 0, name)...)
		wb = append(wb, claimFrame(id, excl, 0, name)...)
	}
	holder.mustWrite(hb)
	for id := uint32(1); id <= n; id++ {
		holder.expect(protocol.TypeGranted, id)
	}
	waiter.mustWrite(wb)
	for id := uint32(1); id <= n; id++ {
		waiter.expect(protocol.TypeQueued, id)
	}
	m := startStallMeter()
	start := time.Now()
	holder.close()
	for id := uint32(1); id <= n; id++ {
		waiter.expectPromoted(id)
	}
	took, stall := time.Since(start), m.worst()
	t.Logf("closing a session with %d held claims promoted every waiter in %v (process stalled up to %v)", n, took, stall)
	if took > time.Second+stall {
		t.Errorf("promoting %d waiters took %v, want well under 1s + stall %v", n, took, stall)
	}
}

func itoa(n uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestV2Shutdown: every version 2 session gets ERROR 0x01 and is
// closed, holders and waiters alike; nobody is promoted.
func TestV2Shutdown(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "a")
	a.mustHold(1, excl, 0, "sd")
	b := ts.dialV2(t, longLease, "b")
	b.mustQueue(1, excl, 0, "sd")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	a.expectSessionError(protocol.CodeShuttingDown)
	b.expectSessionError(protocol.CodeShuttingDown)
	if n := ts.events.count(kind(server.EventGranted)); n != 1 {
		t.Fatalf("%d grants, want 1 (nobody promoted in shutdown)", n)
	}
}

// TestV2EOFInsideFrame: a client that half-closes in the middle of a
// frame ends its session at once (graceful), not after io-timeout: the
// frames before are answered and its claims released.
func TestV2EOFInsideFrame(t *testing.T) {
	t.Parallel()
	ts := startServer(t) // io-timeout 5s
	c := ts.dialV2(t, longLease, "eof")
	tok := c.mustHold(1, excl, 0, "eof")
	start := time.Now()
	c.mustWrite(claimFrame(2, excl, 0, "eof2")[:6])
	c.conn.CloseWrite()
	c.expectEOFV2()
	e := ts.events.wait(t, "released", lockEvent(server.EventReleased, "eof"))
	if took := time.Since(start); took > time.Second || e.Reason != server.ReasonGraceful || e.Token != tok {
		t.Fatalf("session ended after %v with %v, want at once, graceful", took, e.Reason)
	}
}
