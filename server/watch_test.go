package server_test

// Values and watches over real TCP (docs/protocol-v2-watches.md, "v2 values and
// watches").

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// dialValues opens a version 2 session that asks for values and watches,
// and checks that WELCOME grants them.
func (ts *testServer) dialValues(t *testing.T, label string) *v2client {
	t.Helper()
	c := ts.dialV2Raw(t)
	hello := protocol.Frame{Type: protocol.TypeHello, LeaseMS: 5000, Flags: protocol.HelloValues, Label: label}
	c.mustWrite(protocol.AppendFrame(protocol.AppendPreamble(nil), hello))
	f := c.mustReadValues()
	if f.Type != protocol.TypeWelcome || f.Flags&protocol.WelcomeValues == 0 {
		t.Fatalf("%s: HELLO with values answered %v", c, f)
	}
	c.session = f.Session
	return c
}

func (c *v2client) mustReadValues() protocol.Frame {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(waitLimit))
	f, err := protocol.ReadServerFrameV2Max(c.conn, protocol.MaxValuesFrameLen)
	if err != nil {
		c.t.Fatalf("%s: read: %v", c, err)
	}
	return f
}

// expectChange reads a CHANGE of watch and checks its kind, token (when
// not 0) and value.
func (c *v2client) expectChange(watch uint32, kind protocol.ChangeKind, token uint64, value string) protocol.Frame {
	c.t.Helper()
	f := c.mustReadValues()
	if f.Type != protocol.TypeChange || f.Claim != watch || f.Change != kind || token != 0 && f.Token != token || f.Value != value {
		c.t.Fatalf("%s: got %v, want CHANGE(%d %v token=%d value=%q)", c, f, watch, kind, token, value)
	}
	return f
}

// expectDropped reads the changes a slow watcher was sent, then expects
// REVOKED(watch, 0x08).
func (c *v2client) expectDropped(watch uint32) {
	c.t.Helper()
	for {
		f := c.mustReadValues()
		if f.Type == protocol.TypeChange {
			continue
		}
		if f.Type != protocol.TypeRevoked || f.Claim != watch || f.Code != protocol.CodeSlowWatcher {
			c.t.Fatalf("%s: after its changes the slow watcher read %v, want REVOKED(%d 0x08)", c, f, watch)
		}
		return
	}
}

func (c *v2client) expectValues(typ protocol.Type, claim uint32) protocol.Frame {
	c.t.Helper()
	f := c.mustReadValues()
	if f.Type != typ || f.Claim != claim {
		c.t.Fatalf("%s: got %v, want %v for claim %d", c, f, typ, claim)
	}
	return f
}

// Three candidates and two watchers on one server: the watchers see each
// leader, with its value, label and a larger token each time, and the
// new value a leader proclaims; a watch ends with RELEASE.
func TestElectionOverTCP(t *testing.T) {
	ts := startServer(t)
	w1, w2 := ts.dialValues(t, "w1"), ts.dialValues(t, "w2")
	for _, w := range []*v2client{w1, w2} {
		w.mustWrite(protocol.AppendWatch(nil, 9, "primary"))
		w.expectChange(9, protocol.ChangeSynced, 0, "")
	}
	var cands []*v2client
	for i, addr := range []string{"10.0.0.1:5432", "10.0.0.2:5432", "10.0.0.3:5432"} {
		c := ts.dialValues(t, "c"+string(rune('1'+i)))
		c.mustWrite(protocol.AppendClaimValue(nil, 1, protocol.ModeExclusive, 0, 0, "primary", addr))
		if i == 0 {
			c.expectValues(protocol.TypeGranted, 1)
		} else {
			c.expectValues(protocol.TypeQueued, 1)
		}
		cands = append(cands, c)
	}
	first := w1.expectChange(9, protocol.ChangeHeld, 0, "10.0.0.1:5432")
	if first.Label != "c1" || first.Mode != protocol.ModeExclusive {
		t.Fatalf("first leader %v: want label c1, exclusive", first)
	}
	w2.expectChange(9, protocol.ChangeHeld, first.Token, "10.0.0.1:5432")

	// The leader proclaims: the watchers hear it before its answer.
	cands[0].mustWrite(protocol.AppendProclaim(nil, 1, "10.0.0.1:6432"))
	if f := cands[0].expectValues(protocol.TypeProclaimed, 1); f.Proclaim != protocol.ProclaimSet {
		t.Fatalf("PROCLAIM answered %v", f)
	}
	for _, w := range []*v2client{w1, w2} {
		w.expectChange(9, protocol.ChangeValue, first.Token, "10.0.0.1:6432")
	}

	// The leader's process dies: the next candidate leads, with a larger
	// token, and the watchers learn it in grant order.
	cands[0].close()
	second := cands[1].expectValues(protocol.TypePromoted, 1)
	if second.Token <= first.Token {
		t.Fatalf("second leader token %d, first %d", second.Token, first.Token)
	}
	for _, w := range []*v2client{w1, w2} {
		w.expectChange(9, protocol.ChangeFreed, first.Token, "")
		if f := w.expectChange(9, protocol.ChangeHeld, second.Token, "10.0.0.2:5432"); f.Label != "c2" {
			t.Fatalf("second leader %v: want label c2", f)
		}
	}

	// A watch started now begins with the current leader.
	late := ts.dialValues(t, "late")
	late.mustWrite(protocol.AppendWatch(nil, 1, "primary"))
	late.expectChange(1, protocol.ChangeHeld, second.Token, "10.0.0.2:5432")
	late.expectChange(1, protocol.ChangeSynced, 0, "")

	// RELEASE ends w2's watch: it hears nothing of the next change.
	w2.mustWrite(protocol.AppendRelease(nil, 9))
	w2.expectValues(protocol.TypeReleased, 9)
	cands[1].mustWrite(protocol.AppendRelease(nil, 1))
	cands[1].expectValues(protocol.TypeReleased, 1)
	third := cands[2].expectValues(protocol.TypePromoted, 1)
	w1.expectChange(9, protocol.ChangeFreed, second.Token, "")
	w1.expectChange(9, protocol.ChangeHeld, third.Token, "10.0.0.3:5432")
	w2.expectSilenceV2(100 * time.Millisecond)

	// PROCLAIM of an ended claim changes nothing.
	cands[1].mustWrite(protocol.AppendProclaim(nil, 1, "x"))
	if f := cands[1].expectValues(protocol.TypeProclaimed, 1); f.Proclaim != protocol.ProclaimNotInUse {
		t.Fatalf("PROCLAIM of a released claim answered %v", f)
	}
}

// A session that did not ask for values is answered as a server without
// them answers: WATCH and PROCLAIM are unknown types, a CLAIM with a
// value a reserved flag.
func TestValuesNeedTheHelloFlag(t *testing.T) {
	ts := startServer(t)
	c := ts.dialV2(t, 5*time.Second, "plain")
	c.mustWrite(protocol.AppendClaimValue(nil, 1, protocol.ModeExclusive, 0, 0, "a", "v"))
	c.expectCode(protocol.TypeRefused, 1, protocol.CodeUnsupportedFeature)
	c.mustWrite(protocol.AppendWatch(nil, 2, "a"))
	c.expectSessionError(protocol.CodeUnknownMessage)

	c = ts.dialV2(t, 5*time.Second, "plain")
	c.mustWrite(protocol.AppendProclaim(nil, 1, "v"))
	c.expectSessionError(protocol.CodeUnknownMessage)

	// A plain session's frame limit stays 512.
	c = ts.dialV2(t, 5*time.Second, "plain")
	c.mustWrite(protocol.AppendClaimValue(nil, 1, protocol.ModeExclusive, 0, 0, "a", strings.Repeat("v", 600)))
	c.expectSessionError(protocol.CodeFrameTooLong)
}

func TestWatchRefusals(t *testing.T) {
	ts := startServer(t, func(s *server.Server) {
		s.Authorizer = &denyPrefix{prefix: "secret/"}
		s.MaxSessionClaims = 2
	})
	c := ts.dialValues(t, "c")
	long := strings.Repeat("v", protocol.MaxValueLen+1)
	c.mustWrite(protocol.AppendWatch(nil, 1, ""))
	c.expectValues(protocol.TypeRefused, 1)
	c.mustWrite(protocol.AppendWatch(nil, 1, "secret/x"))
	if f := c.expectValues(protocol.TypeRefused, 1); f.Code != protocol.CodeNotAuthorized {
		t.Fatalf("watch of a denied name: %v", f)
	}
	c.mustWrite(protocol.AppendClaimValue(nil, 2, protocol.ModeExclusive, 0, 0, "a", long))
	if f := c.expectValues(protocol.TypeRefused, 2); f.Code != protocol.CodeValueTooLong {
		t.Fatalf("claim with a %d-byte value: %v", len(long), f)
	}
	// The longest value fits a values session's frame.
	c.mustWrite(protocol.AppendClaimValue(nil, 3, protocol.ModeExclusive, 0, 0, strings.Repeat("n", 255), long[1:]))
	c.expectValues(protocol.TypeGranted, 3)
	c.mustWrite(protocol.AppendProclaim(nil, 3, long))
	if f := c.expectValues(protocol.TypeRefused, 3); f.Code != protocol.CodeValueTooLong {
		t.Fatalf("PROCLAIM of a %d-byte value: %v", len(long), f)
	}
	// A watch counts against the session's claims.
	c.mustWrite(protocol.AppendWatch(nil, 4, "a"))
	c.expectChange(4, protocol.ChangeSynced, 0, "")
	c.mustWrite(protocol.AppendWatch(nil, 5, "b"))
	if f := c.expectValues(protocol.TypeRefused, 5); f.Code != protocol.CodeLimitReached {
		t.Fatalf("a watch over the claims limit: %v", f)
	}
	// A watch's id is in use, for a CLAIM as for a WATCH.
	c.mustWrite(protocol.AppendClaim(nil, 4, protocol.ModeShared, 0, 0, "b"))
	c.expectSessionError(protocol.CodeClaimInUse)

	c = ts.dialValues(t, "c")
	c.mustWrite(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeProclaim, Claim: 1, Value: strings.Repeat("v", protocol.MaxValuesFrameLen)}))
	c.expectSessionError(protocol.CodeFrameTooLong)
}

// A watcher that stops reading is dropped with REVOKED 0x08 once its
// backlog passes the bound, while the server goes on serving everyone
// else at its usual speed.
func TestSlowWatcherDropped(t *testing.T) {
	events := newEventLog()
	ts := startServer(t, func(s *server.Server) {
		s.MaxWatchBacklog = 64 << 10
		s.Observer = events
	})
	slow := ts.dialValues(t, "slow")
	slow.mustWrite(protocol.AppendWatch(nil, 7, "hot"))
	slow.expectChange(7, protocol.ChangeSynced, 0, "")
	slow.mustWrite(protocol.AppendClaim(nil, 8, protocol.ModeExclusive, 0, 0, "mine"))
	slow.expectValues(protocol.TypeGranted, 8)

	leader := ts.dialValues(t, "leader")
	leader.mustWrite(protocol.AppendClaimValue(nil, 1, protocol.ModeExclusive, 0, 0, "hot", "v"))
	leader.expectValues(protocol.TypeGranted, 1)
	other := ts.dialV2(t, 5*time.Second, "other")
	value := strings.Repeat("x", protocol.MaxValueLen)
	var worst time.Duration
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if i == 100_000 || time.Now().After(deadline) {
			t.Fatalf("no watch dropped after %d PROCLAIMs", i)
		}
		leader.mustWrite(protocol.AppendProclaim(nil, 1, value[:len(value)-i%2]))
		leader.expectValues(protocol.TypeProclaimed, 1)
		if i%500 == 0 { // everyone else is served meanwhile
			start := time.Now()
			other.mustHold(uint32(i+1), protocol.ModeShared, 0, "elsewhere")
			worst = max(worst, time.Since(start))
		}
		if events.count(func(e server.Event) bool { return e.Kind == server.EventLimit && e.Action == server.LimitWatchBacklog }) > 0 {
			t.Logf("dropped after %d PROCLAIMs of %d bytes (%v); slowest other claim %v", i+1, len(value), time.Since(deadline.Add(-20*time.Second)), worst)
			break
		}
	}
	if worst > 2*time.Second {
		t.Errorf("another session's claim took %v while the watcher did not read", worst)
	}
	// The slow session, reading at last: its changes, then the REVOKED,
	// and its own claim is untouched.
	slow.expectDropped(7)
	slow.mustWrite(protocol.AppendProclaim(nil, 8, "still mine"))
	if f := slow.expectValues(protocol.TypeProclaimed, 8); f.Proclaim != protocol.ProclaimSet {
		t.Fatalf("the slow session's claim after the drop: %v", f)
	}
}
