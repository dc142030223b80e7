package clustercore

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

func TestWatchRoute(t *testing.T) {
	cases := []struct {
		r      RouteAction
		watch  WatchStep
		valued bool
	}{
		{RouteServe, WatchHere, true},
		{RouteForward, WatchRelay, true},
		{RouteHold, WatchRefuse, false},
		{RouteNotOwner, WatchRefuse, false},
		{RouteMoving, WatchRefuse, false},
	}
	for _, c := range cases {
		if got := WatchRoute(c.r); got != c.watch {
			t.Errorf("WatchRoute(%d) = %d, want %d", c.r, got, c.watch)
		}
		if got := ValuedServed(c.r); got != c.valued {
			t.Errorf("ValuedServed(%d) = %v, want %v", c.r, got, c.valued)
		}
	}
}

func TestWatchBounds(t *testing.T) {
	cases := []struct {
		name string
		b    WatchBounds
		want WatchLimit
	}{
		{"no bounds", WatchBounds{Claims: 1000, Relayed: 1000}, WatchNoLimit},
		{"under both", WatchBounds{MaxClaims: 3, Claims: 2, MaxRelayed: 5, Relayed: 4}, WatchNoLimit},
		{"claims full", WatchBounds{MaxClaims: 3, Claims: 3, MaxRelayed: 5, Relayed: 4}, WatchLimitClaims},
		{"claims over", WatchBounds{MaxClaims: 3, Claims: 4}, WatchLimitClaims},
		{"relayed full", WatchBounds{MaxClaims: 3, Claims: 2, MaxRelayed: 5, Relayed: 5}, WatchLimitRelayed},
		{"both full: claims first", WatchBounds{MaxClaims: 1, Claims: 1, MaxRelayed: 1, Relayed: 1}, WatchLimitClaims},
	}
	for _, c := range cases {
		if got := c.b.Relay(); got != c.want {
			t.Errorf("%s: Relay = %d, want %d", c.name, got, c.want)
		}
	}
}

// The upstream opens with a version 2 hop header without a resume hash,
// HELLO with values and the client's lease and label, and the WATCH.
func TestWatchUpstreamOpening(t *testing.T) {
	u := WatchUpstream{Addr: "10.0.0.9:4000", Identity: "alice", Node: "n1", Session: 17, Lease: 3 * time.Second, Label: "job"}
	b := u.Opening(5, "a")
	h, n, err := protocol.ParseHop(b)
	if err != nil || n == 0 {
		t.Fatalf("ParseHop: %v (n %d)", err, n)
	}
	if h.Version != protocol.HopVersion2 || h.Addr != u.Addr || h.Identity != u.Identity || h.Origin != "n1" || h.Session != 17 || h.Resume != nil {
		t.Fatalf("hop header %+v", h)
	}
	want := protocol.AppendPreamble(nil)
	want = protocol.AppendFrame(want, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 3000, Flags: protocol.HelloValues, Label: "job"})
	want = protocol.AppendWatch(want, 5, "a")
	if !bytes.Equal(b[n:], want) {
		t.Fatalf("after the hop header: % x, want % x", b[n:], want)
	}
	if got := u.PingEvery(); got != time.Second {
		t.Fatalf("PingEvery = %v, want a third of the lease", got)
	}
}

// The reader parses the answer to HELLO first, then a values session's
// frames, and remembers a synced for every outcome after it.
func TestWatchReader(t *testing.T) {
	welcome := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Flags: protocol.WelcomeValues, LeaseMS: 3000})
	held := protocol.AppendChange(nil, 5, protocol.Change{Kind: protocol.ChangeHeld, Token: 2})
	synced := protocol.AppendChange(nil, 5, protocol.Change{Kind: protocol.ChangeSynced})

	// A value longer than a plain session's frame passes only once the
	// answer to HELLO was read.
	big := protocol.AppendChange(nil, 5, protocol.Change{Kind: protocol.ChangeValue, Value: string(make([]byte, 1000))})
	var r WatchReader
	if _, _, err := r.Parse(big); err == nil {
		t.Fatal("a values frame parsed as the answer to HELLO")
	}
	r = WatchReader{}
	if _, n, err := r.Parse(welcome[:2]); n != 0 || err != nil {
		t.Fatalf("half a WELCOME: n %d err %v, want read more", n, err)
	}
	b := append(append(append(append([]byte{}, welcome...), held...), big...), synced...)
	var kinds []protocol.Type
	for len(b) > 0 {
		f, n, err := r.Parse(b)
		if err != nil || n == 0 {
			t.Fatalf("Parse: n %d err %v", n, err)
		}
		kinds = append(kinds, f.Type)
		if f.Type == protocol.TypeChange && f.ChangeOf().Kind == protocol.ChangeHeld {
			if a := r.Ended(WatchAttempt{Again: true}); a.Served {
				t.Fatal("served before the synced")
			}
		}
		b = b[n:]
	}
	if len(kinds) != 4 || kinds[0] != protocol.TypeWelcome {
		t.Fatalf("frames %v", kinds)
	}
	if a := r.Ended(WatchAttempt{Code: 7}); !a.Served || a.Code != 7 || a.Again {
		t.Fatalf("Ended after synced = %+v", a)
	}
	a := r.Broke(os.ErrDeadlineExceeded, true)
	if !a.Again || !a.Served || !errors.Is(a.Err, os.ErrDeadlineExceeded) {
		t.Fatalf("Broke on the lease = %+v", a)
	}
	if a := r.Malformed(errors.New("x")); !a.Again || !a.Served || a.Err == nil {
		t.Fatalf("Malformed = %+v", a)
	}
	var fresh WatchReader
	if a := fresh.Broke(errors.New("reset"), false); !a.Again || a.Served {
		t.Fatalf("Broke before any synced = %+v", a)
	}
}

func TestWatchAttempted(t *testing.T) {
	reset := protocol.AppendChange(nil, 3, protocol.Change{Kind: protocol.ChangeReset})
	served := func() Watch {
		w := NewRelayedWatch(3, "a")
		w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
		return w
	}
	// Again: a reset, and the watch goes on.
	w := served()
	if out, ended := w.Attempted(WatchAttempt{Again: true}); ended || w.Ended || !bytes.Equal(out.Push, reset) {
		t.Fatalf("again: %+v ended %v", out, ended)
	}
	// Not again: REVOKED with the code, and the watch ends.
	w = served()
	out, ended := w.Attempted(WatchAttempt{Code: protocol.CodeUnsupportedFeature})
	if !ended || !w.Ended || !bytes.Equal(out.Push, protocol.AppendRevoked(nil, 3, protocol.CodeUnsupportedFeature, "")) {
		t.Fatalf("for good: %+v ended %v", out, ended)
	}
	// Not answered yet: REFUSED into its slot.
	w = NewRelayedWatch(3, "a")
	out, ended = w.Attempted(WatchAttempt{Code: protocol.CodeUnsupportedFeature})
	if !ended || !out.Answered || !bytes.Equal(out.Answer, protocol.AppendRefused(nil, 3, protocol.CodeUnsupportedFeature, "")) {
		t.Fatalf("pending, for good: %+v ended %v", out, ended)
	}
	// Ended meanwhile (released): nothing.
	w = served()
	w.Release()
	if out, ended := w.Attempted(WatchAttempt{Again: true}); ended || out.Push != nil || out.Answered {
		t.Fatalf("after release: %+v ended %v", out, ended)
	}
}

func TestWatchChanged(t *testing.T) {
	c := protocol.Change{Kind: protocol.ChangeHeld, Token: 9}
	w := NewRelayedWatch(3, "a")
	w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
	if out, stop, slow := w.Changed(c, false); stop || slow || !bytes.Equal(out.Push, protocol.AppendChange(nil, 3, c)) {
		t.Fatalf("under the bound: %+v stop %v slow %v", out, stop, slow)
	}
	out, stop, slow := w.Changed(c, true)
	if !stop || !slow || !w.Ended || !bytes.Equal(out.Push, protocol.AppendRevoked(nil, 3, protocol.CodeSlowWatcher, "")) {
		t.Fatalf("over the bound: %+v stop %v slow %v", out, stop, slow)
	}
	if out, stop, slow := w.Changed(c, true); !stop || slow || out.Push != nil {
		t.Fatalf("ended: %+v stop %v slow %v", out, stop, slow)
	}
}
