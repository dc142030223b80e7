package baton

import (
	"testing"
	"time"
)

// cutTo closes the connections made so far to addr.
func (d *connDialer) cutTo(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if c.RemoteAddr().String() == addr {
			c.Close()
		}
	}
}

// rewatched waits until w is in step on a session of the owner other
// than the one with id old (a resumed or a new session).
func rewatched(t *testing.T, w *Watch, old uint64) {
	t.Helper()
	deadline := time.Now().Add(fakeTimeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		ws := w.sub
		w.mu.Unlock()
		if ws != nil {
			ws.s.mu.Lock()
			done := ws.synced && ws.s.err == nil && ws.s.id != old && ws.s.watches[ws.id] == ws
			ws.s.mu.Unlock()
			if done {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the watch did not start again")
}

// A routed session watches a name at its owner, as it claims there. When
// its session with the owner breaks, the watch starts again (on the
// resumed session, or without resumption on a new one) and delivers
// nothing it delivered before, then the changes that follow.
func TestRouterWatchAtOwnerAgainAfterBreak(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts SessionOptions
	}{
		{"resumed", SessionOptions{Lease: 5 * time.Second}},
		{"new session", SessionOptions{Lease: 5 * time.Second, Resume: ResumeOff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := []string{"n1", "n2"}
			nodes := startRing(t, ids...)
			d := &connDialer{}
			c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect, Dialer: d})
			ctx := t.Context()
			s, err := c.OpenSession(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			name := namesOwnedBy(ids, "n2", 1)[0]
			w, err := s.Watch(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if st := nextState(t, w); len(st) != 0 {
				t.Fatalf("first state %+v", st)
			}
			if n1, n2 := nodes["n1"].srv.Watches(), nodes["n2"].srv.Watches(); n1 != 0 || n2 != 1 {
				t.Fatalf("watches on n1 %d, on the owner n2 %d; want it on n2", n1, n2)
			}

			holder, err := New(Config{Address: nodes["n2"].addr, Routing: RoutingOff}).OpenSession(ctx, SessionOptions{Lease: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			cl, err := holder.AcquireValue(ctx, name, Exclusive, "first")
			if err != nil {
				t.Fatal(err)
			}
			if st := nextState(t, w); len(st) != 1 || st[0].Token != cl.Token() || st[0].Value != "first" {
				t.Fatalf("state %+v, want the holder with token %d", st, cl.Token())
			}

			// n1 does not serve the name: a session with n2 that
			// resumes on n1 is refused the watch there.
			nodes["n1"].mu.Lock()
			nodes["n1"].refuse = map[string]bool{name: true}
			nodes["n1"].mu.Unlock()
			sub := s.nodeSessions()["n2"]
			if sub == nil {
				t.Fatal("no session with the owner n2")
			}
			d.cutTo(nodes["n2"].addr)
			rewatched(t, w, sub.ID())
			noState(t, w) // the same holder: not delivered again

			cl.Release(ctx)
			if st := nextState(t, w); len(st) != 0 {
				t.Fatalf("state %+v after the release, want free", st)
			}
			cl2, err := holder.AcquireValue(ctx, name, Exclusive, "second")
			if err != nil {
				t.Fatal(err)
			}
			if st := nextState(t, w); len(st) != 1 || st[0].Token != cl2.Token() || st[0].Token <= cl.Token() {
				t.Fatalf("state %+v, want the new holder, token %d", st, cl2.Token())
			}
		})
	}
}
