package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// ringRouter serves every name here and answers RING with view.
type ringRouter struct {
	router
	vmu  sync.Mutex
	view server.RingView
}

func (r *ringRouter) RingView() server.RingView {
	r.vmu.Lock()
	defer r.vmu.Unlock()
	return r.view
}

func (r *ringRouter) setView(v server.RingView) {
	r.vmu.Lock()
	r.view = v
	r.vmu.Unlock()
}

func newRingRouter(v server.RingView) *ringRouter {
	r := &ringRouter{view: v}
	r.route = func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }
	return r
}

// expectRing reads the MEMBER frames and the RINGEND of one ring and
// checks them against want and flags.
func (c *v2client) expectRing(want server.RingView, flags uint8) {
	c.t.Helper()
	for i, m := range want.Members {
		f := c.mustReadV2()
		inRing := f.Flags&protocol.MemberInRing != 0
		if f.Type != protocol.TypeRingMember || f.MemberID() != m.ID || f.MemberAddr() != m.Addr || inRing != m.InRing {
			c.t.Fatalf("%s: member %d is %v, want %+v", c, i, f, m)
		}
	}
	f := c.mustReadV2()
	if f.Type != protocol.TypeRingEnd || f.RingVersion() != want.Version || f.RingCount() != len(want.Members) || f.Flags != flags {
		c.t.Fatalf("%s: got %v, want RINGEND(version=%d count=%d flags=0x%02x)", c, f, want.Version, len(want.Members), flags)
	}
}

// TestRingSingleServer: a server that is not a cluster node answers RING
// with an empty ring of version 0, in the session's answer order, and
// never pushes one.
func TestRingSingleServer(t *testing.T) {
	ts := startServer(t)
	c := ts.dialV2(t, longLease, "ring")
	b := claimFrame(1, protocol.ModeExclusive, 0, "single")
	b = protocol.AppendRing(b, protocol.RingWatch)
	b = protocol.AppendPing(b, 7)
	c.mustWrite(b)
	c.expect(protocol.TypeGranted, 1)
	c.expectRing(server.RingView{}, 0)
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 7 {
		t.Fatalf("got %v, want PONG(7)", f)
	}
	ts.RingChanged() // no ring source: an empty ring, pushed to the watcher
	c.expectRing(server.RingView{}, protocol.RingPushed)
}

// TestRingAnswerAndPush: a cluster node answers RING with its members;
// a session that watches gets each new ring pushed, one that does not
// gets nothing.
func TestRingAnswerAndPush(t *testing.T) {
	v3 := server.RingView{Version: 3, Members: []server.RingMember{
		{ID: "n1", Addr: "127.0.0.1:7070", InRing: true},
		{ID: "n2", Addr: "127.0.0.1:7170", InRing: true},
		{ID: "n3", Addr: "127.0.0.1:7270"},
	}}
	r := newRingRouter(v3)
	ts := startServer(t, func(s *server.Server) { s.Router = r })
	watcher := ts.dialV2(t, longLease, "watch")
	other := ts.dialV2(t, longLease, "once")
	watcher.mustWrite(protocol.AppendRing(nil, protocol.RingWatch))
	watcher.expectRing(v3, 0)
	other.mustWrite(protocol.AppendRing(nil, 0))
	other.expectRing(v3, 0)

	v4 := server.RingView{Version: 4, Members: v3.Members[:2]}
	r.setView(v4)
	ts.RingChanged()
	watcher.expectRing(v4, protocol.RingPushed)
	// RingChanged has written every push when it returns: the next frame
	// of the session that does not watch is the answer to its PING.
	other.mustWrite(protocol.AppendPing(nil, 1))
	if f := other.mustReadV2(); f.Type != protocol.TypePong {
		t.Fatalf("session without watch: got %v, want PONG", f)
	}
	// The watch lives on; the session goes on making claims.
	watcher.mustHold(1, protocol.ModeExclusive, 0, "after-push")
	ts.RingChanged()
	watcher.expectRing(v4, protocol.RingPushed)
}

// TestRingBadInput: RING frames this revision does not define end the
// session with the documented session-level code.
func TestRingBadInput(t *testing.T) {
	ts := startServer(t, func(s *server.Server) { s.Router = newRingRouter(server.RingView{Version: 1}) })
	for _, c := range []struct {
		name  string
		hello bool
		frame []byte
		code  protocol.Code
	}{
		{"reserved flag", true, protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRing, Flags: 0x02}), protocol.CodeUnsupportedFeature},
		{"no flags byte", true, []byte{0, 1, byte(protocol.TypeRing)}, protocol.CodeInvalidFrame},
		{"payload too long", true, []byte{0, 3, byte(protocol.TypeRing), 1, 0}, protocol.CodeInvalidFrame},
		{"before HELLO", false, protocol.AppendRing(nil, 0), protocol.CodeFirstNotHello},
		{"type 0x27", true, []byte{0, 2, 0x27, 0}, protocol.CodeUnknownMessage},
		{"MEMBER from the client", true, protocol.AppendRingMember(nil, "n1", "a:1", true), protocol.CodeUnknownMessage},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cl *v2client
			if c.hello {
				cl = ts.dialV2(t, longLease, "bad")
			} else {
				cl = ts.dialV2Raw(t)
				cl.mustWrite(protocol.AppendPreamble(nil))
			}
			cl.mustWrite(c.frame)
			cl.expectSessionError(c.code)
		})
	}
}

// TestRingKeepsLease: a session that sends only RING frames stays open:
// like every frame read in full, RING refreshes the lease.
func TestRingKeepsLease(t *testing.T) {
	ts := startServer(t)
	const lease = 300 * time.Millisecond
	c := ts.dialV2(t, lease, "ring-only")
	for range 8 { // 8 × lease/3: well past one lease
		time.Sleep(lease / 3)
		c.mustWrite(protocol.AppendRing(nil, 0))
		c.expectRing(server.RingView{}, 0)
	}
}

// TestRingRelayingSession: on a session whose claims are relayed, RING
// is answered in order behind the relayed claim's answer.
func TestRingRelayingSession(t *testing.T) {
	_, relay := startRelayPair(t, nil)
	c := relay.dialV2(t, longLease, "relayed")
	b := claimFrame(1, protocol.ModeExclusive, 0, "relayed-name")
	b = protocol.AppendRing(b, 0)
	b = protocol.AppendPing(b, 3)
	c.mustWrite(b)
	c.expect(protocol.TypeGranted, 1)
	c.expectRing(server.RingView{}, 0)
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 3 {
		t.Fatalf("got %v, want PONG(3)", f)
	}
}

// TestRingChangedBeforeServe: a cluster node may apply a ring (and push
// it) while its hand-off loop is the first to touch the server; the race
// detector fails this test if RingChanged reads the server's maps before
// they are made.
func TestRingChangedBeforeServe(t *testing.T) {
	srv := &server.Server{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.RingChanged()
	}()
	srv.Snapshot(nil)
	<-done
}
