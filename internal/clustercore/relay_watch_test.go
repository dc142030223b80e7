package clustercore

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

func TestWatchFirstStateIsTheAnswer(t *testing.T) {
	w := NewRelayedWatch(3, "a")
	held := protocol.Change{Kind: protocol.ChangeHeld, Token: 5}
	if out := w.Pass(held); out.Answered || out.Push != nil {
		t.Fatalf("a held frame before synced sent %+v", out)
	}
	out := w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
	want := protocol.AppendChange(protocol.AppendChange(nil, 3, held), 3, protocol.Change{Kind: protocol.ChangeSynced})
	if !out.Answered || !bytes.Equal(out.Answer, want) || out.Push != nil || w.Pending {
		t.Fatalf("synced: %+v pending %v; want the answer %x", out, w.Pending, want)
	}
	out = w.Pass(held)
	if out.Answered || !bytes.Equal(out.Push, protocol.AppendChange(nil, 3, held)) {
		t.Fatalf("a later change: %+v, want a push", out)
	}
}

func TestWatchReset(t *testing.T) {
	reset := protocol.AppendChange(nil, 3, protocol.Change{Kind: protocol.ChangeReset})
	w := NewRelayedWatch(3, "a")
	w.Pass(protocol.Change{Kind: protocol.ChangeHeld, Token: 5})
	if out := w.Reset(); out.Push != nil {
		t.Fatalf("a reset before any state was told sent %x", out.Push)
	}
	// The held frame read before the reset is not part of the next state.
	out := w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
	if want := protocol.AppendChange(nil, 3, protocol.Change{Kind: protocol.ChangeSynced}); !bytes.Equal(out.Answer, want) {
		t.Fatalf("answer %x, want only synced %x", out.Answer, want)
	}
	if out := w.Reset(); !bytes.Equal(out.Push, reset) {
		t.Fatalf("reset after a state: %x, want %x", out.Push, reset)
	}
	if out := w.Reset(); out.Push != nil {
		t.Fatalf("a second reset with nothing told since sent %x", out.Push)
	}
	local := NewLocalWatch(4, "a")
	if !local.FollowsLocal(protocol.CodeNotOwner, false) {
		t.Fatal("a local watch whose name left does not follow")
	}
	if out := local.Follow(); local.Local || !bytes.Equal(out.Push, protocol.AppendChange(nil, 4, protocol.Change{Kind: protocol.ChangeReset})) {
		t.Fatalf("follow: local %v push %x, want relayed and a reset", local.Local, out.Push)
	}
}

func TestWatchFollowsLocal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		w      Watch
		code   protocol.Code
		closed bool
		want   bool
	}{
		{"the name left: follows", NewLocalWatch(1, "a"), protocol.CodeNotOwner, false, true},
		{"another code ends it", NewLocalWatch(1, "a"), protocol.CodeSlowWatcher, false, false},
		{"its session's watches ended", NewLocalWatch(1, "a"), protocol.CodeNotOwner, true, false},
		{"ended", Watch{Local: true, Ended: true}, protocol.CodeNotOwner, false, false},
		{"a relayed watch is not the table's", NewRelayedWatch(1, "a"), protocol.CodeNotOwner, false, false},
	} {
		ownerCheck(t, tc.name, tc.w.FollowsLocal(tc.code, tc.closed), tc.want)
	}
}

func TestWatchEnds(t *testing.T) {
	answered := func() Watch {
		w := NewRelayedWatch(3, "a")
		w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
		return w
	}
	refused := func(c protocol.Code, msg string) []byte { return protocol.AppendRefused(nil, 3, c, msg) }
	revoked := func(c protocol.Code) []byte { return protocol.AppendRevoked(nil, 3, c, "") }
	for _, tc := range []struct {
		name   string
		w      Watch
		step   func(w *Watch) (WatchOut, bool)
		answer []byte // nil: not answered
		push   []byte
		ok     bool
	}{
		{"fail before the answer: REFUSED", NewRelayedWatch(3, "a"), func(w *Watch) (WatchOut, bool) { return w.Fail(protocol.CodeUnsupportedFeature) },
			refused(protocol.CodeUnsupportedFeature, ""), nil, true},
		{"fail after: REVOKED", answered(), func(w *Watch) (WatchOut, bool) { return w.Fail(protocol.CodeSlowWatcher) },
			nil, revoked(protocol.CodeSlowWatcher), true},
		{"release before the answer", NewRelayedWatch(3, "a"), (*Watch).Release,
			refused(protocol.CodeNotOwner, "watch released before its state"), nil, true},
		{"release after: nothing but RELEASED", answered(), (*Watch).Release, nil, nil, true},
		{"session ends before the answer: REFUSED 0x03", NewRelayedWatch(3, "a"), func(w *Watch) (WatchOut, bool) { return w.Revoke(0) },
			refused(protocol.CodeNotOwner, ""), nil, true},
		{"session ends after: silent", answered(), func(w *Watch) (WatchOut, bool) { return w.Revoke(0) }, nil, nil, true},
		{"slow watcher: REVOKED 0x08", answered(), func(w *Watch) (WatchOut, bool) { return w.Revoke(protocol.CodeSlowWatcher) },
			nil, revoked(protocol.CodeSlowWatcher), true},
		{"ended already: nothing", Watch{ID: 3, Ended: true}, func(w *Watch) (WatchOut, bool) { return w.Revoke(protocol.CodeSlowWatcher) }, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w
			out, ok := tc.step(&w)
			if ok != tc.ok || !w.Ended || out.Answered != (tc.answer != nil) || !bytes.Equal(out.Answer, tc.answer) || !bytes.Equal(out.Push, tc.push) {
				t.Fatalf("got %+v ok %v ended %v; want answer %x push %x ok %v", out, ok, w.Ended, tc.answer, tc.push, tc.ok)
			}
		})
	}
}

func TestWatchHere(t *testing.T) {
	w := NewRelayedWatch(3, "a")
	if out := w.Here(); !out.Answered || out.Answer != nil || !w.Local {
		t.Fatalf("here before the answer: %+v local %v; want an empty answer", out, w.Local)
	}
	// Told: leaving the table again resets the client.
	if out := w.Follow(); out.Push == nil {
		t.Fatal("a watch served here sends no reset when it follows its name")
	}
	w = NewRelayedWatch(3, "a")
	w.Pass(protocol.Change{Kind: protocol.ChangeSynced})
	if out := w.Here(); out.Answered {
		t.Fatalf("here after the answer answered again: %+v", out)
	}
}

func TestWatchOwnerFrame(t *testing.T) {
	for _, tc := range []struct {
		name        string
		f           protocol.Frame
		pass, done  bool
		again       bool
		code        protocol.Code
		errAnswered bool
	}{
		{"WELCOME with values", protocol.Frame{Type: protocol.TypeWelcome, Flags: protocol.WelcomeValues}, false, false, false, 0, false},
		{"WELCOME of an earlier revision", protocol.Frame{Type: protocol.TypeWelcome}, false, true, false, protocol.CodeUnsupportedFeature, false},
		{"PONG", protocol.Frame{Type: protocol.TypePong}, false, false, false, 0, false},
		{"ERROR: again elsewhere", protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeShuttingDown}, false, true, true, 0, false},
		{"CHANGE is passed on", protocol.Frame{Type: protocol.TypeChange, Claim: 3}, true, false, false, 0, false},
		{"another claim id", protocol.Frame{Type: protocol.TypeChange, Claim: 4}, false, true, true, 0, true},
		{"REFUSED 0x03: again", protocol.Frame{Type: protocol.TypeRefused, Claim: 3, Code: protocol.CodeNotOwner}, false, true, true, 0, false},
		{"REVOKED 0x03: again", protocol.Frame{Type: protocol.TypeRevoked, Claim: 3, Code: protocol.CodeNotOwner}, false, true, true, 0, false},
		{"REFUSED otherwise ends it", protocol.Frame{Type: protocol.TypeRefused, Claim: 3, Code: protocol.CodeNotAuthorized}, false, true, false, protocol.CodeNotAuthorized, false},
		{"an unexpected frame", protocol.Frame{Type: protocol.TypeGranted, Claim: 3}, false, true, true, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, done, a := WatchOwnerFrame(3, tc.f)
			if pass != tc.pass || done != tc.done || a.Again != tc.again || a.Code != tc.code || errors.Is(a.Err, ErrWatchAnswer) != tc.errAnswered {
				t.Fatalf("got pass %v done %v %+v", pass, done, a)
			}
		})
	}
}

func TestWatchOverBacklog(t *testing.T) {
	asked := false
	backlog := func() int { asked = true; return 10 }
	if WatchOverBacklog(0, backlog) || asked {
		t.Fatal("no bound: over, or the backlog was read")
	}
	if WatchOverBacklog(10, backlog) || !WatchOverBacklog(9, backlog) {
		t.Fatal("the bound is not: more than max bytes unsent")
	}
}

func TestWatchBackoff(t *testing.T) {
	var b WatchBackoff
	want := []time.Duration{20, 40, 80, 160, 250, 250}
	for i, w := range want {
		if got := b.Next(false); got != w*time.Millisecond {
			t.Fatalf("attempt %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := b.Next(true); got != WatchRetryMin {
		t.Fatalf("after a served attempt: %v, want %v", got, WatchRetryMin)
	}
}

func TestWatchRelayRoom(t *testing.T) {
	for _, tc := range []struct {
		bound   int
		relayed int64
		want    bool
	}{{0, 1 << 20, true}, {2, 1, true}, {2, 2, false}, {2, 3, false}} {
		ownerCheck(t, fmt.Sprintf("bound %d, %d relayed", tc.bound, tc.relayed), WatchRelayRoom(tc.bound, tc.relayed), tc.want)
	}
}
