package server_test

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Resumable sessions and re-assertion over real TCP (docs/protocol-v2-resume.md,
// "v2 resumable sessions and re-assertion").

const (
	excl2 = protocol.ModeExclusive
	shrd2 = protocol.ModeShared
)

// dialResumable opens a resumable session and returns it with its
// WELCOME.
func (ts *testServer) dialResumable(t *testing.T, lease time.Duration, label string) (*v2client, protocol.Frame) {
	t.Helper()
	c := ts.dialV2Raw(t)
	c.mustWrite(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(lease), Flags: protocol.HelloResumable, Label: label}))
	w := c.mustReadV2()
	if w.Type != protocol.TypeWelcome || w.Flags != protocol.WelcomeResumable || w.Secret == ([protocol.SecretLen]byte{}) {
		t.Fatalf("%s: resumable opening answered %v, want WELCOME with a secret", c, w)
	}
	c.session = w.Session
	return c, w
}

// reassertFrame re-asserts claim id of the session prior welcomed.
func reassertFrame(id uint32, mode protocol.Mode, name string, token uint64, prior protocol.Frame) []byte {
	return protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: protocol.ClaimReassert,
		Mode: mode, Name: name, Token: token, Session: prior.Session, Secret: prior.Secret, Node: prior.Node})
}

// reassert sends a re-assertion and returns the answer.
func (c *v2client) reassert(id uint32, mode protocol.Mode, name string, token uint64, prior protocol.Frame) protocol.Frame {
	c.t.Helper()
	c.mustWrite(reassertFrame(id, mode, name, token, prior))
	f := c.mustReadV2()
	if f.Claim != id {
		c.t.Fatalf("%s: re-assertion %d answered %v", c, id, f)
	}
	return f
}

// breakConn closes the client side of the connection abruptly, as a
// client whose network died: a reset, not a RELEASE.
func (c *v2client) breakConn() {
	c.conn.SetLinger(0)
	c.conn.Close()
}

func keptEvent(session uint64) func(server.Event) bool {
	return func(e server.Event) bool {
		return e.Kind == server.EventSessionKept && uint64(e.Session) == session
	}
}

// A resumable session whose connection breaks keeps its claims, held and
// queued, and promotes nobody; a new session re-asserts them and carries
// on with the same tokens, a grant made meanwhile included.
func TestResumeKeepsClaimsAndAdopts(t *testing.T) {
	ts := startServer(t)
	b := ts.dialV2(t, longLease, "b")
	b.mustHold(1, excl2, 0, "q")
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	a.mustQueue(2, excl2, 0, "q")
	waiter := ts.dialV2(t, longLease, "c")
	waiter.mustQueue(1, excl2, 0, "job")

	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	if n := ts.KeptSessions(); n != 1 {
		t.Fatalf("KeptSessions = %d, want 1", n)
	}
	// Nobody is promoted in the kept claim's place.
	waiter.expectSilenceV2(300 * time.Millisecond)
	// A grant while kept is kept for the claim.
	b.release(1)

	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion of a held claim answered %v, want GRANTED(%d)", f, tok)
	}
	f := a2.reassert(2, excl2, "q", 0, w)
	if f.Type != protocol.TypeGranted || f.Token <= tok {
		t.Fatalf("re-assertion of a claim granted while kept answered %v, want GRANTED with a newer token", f)
	}
	// Every claim taken over: the kept session is gone.
	if n := ts.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions after every claim was adopted = %d", n)
	}
	ev := ts.events.wait(t, "re-assertion event", func(e server.Event) bool {
		return e.Kind == server.EventReasserted && e.Lock == "job"
	})
	if ev.Action != server.ReassertAdopted || ev.Token != tok {
		t.Errorf("re-assertion event %+v", ev)
	}
	// The claims live on in the new session: its release promotes.
	a2.release(1)
	if got := waiter.expectPromoted(1); got <= tok {
		t.Errorf("waiter promoted with token %d, not above %d", got, tok)
	}
	v1, v2 := ts.ProtocolCounts()
	if v1.Held != 0 || v2.Held != 2 || v2.Queued != 0 {
		t.Errorf("ProtocolCounts = %+v, %+v; want 2 v2 claims held, none queued", v1, v2)
	}
}

// A queued claim of a kept session keeps its place: re-asserted, it is
// QUEUED, and PROMOTED comes on the new session.
func TestResumeQueuedKeepsPlace(t *testing.T) {
	ts := startServer(t)
	holder := ts.dialV2(t, longLease, "h")
	holder.mustHold(1, excl2, 0, "job")
	a, w := ts.dialResumable(t, longLease, "a")
	a.mustQueue(5, excl2, 0, "job")
	later := ts.dialV2(t, longLease, "l")
	later.mustQueue(1, excl2, 0, "job")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))

	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(5, excl2, "job", 0, w); f.Type != protocol.TypeQueued {
		t.Fatalf("re-assertion of a queued claim answered %v, want QUEUED", f)
	}
	holder.release(1)
	a2.expectPromoted(5)
	later.expectSilenceV2(200 * time.Millisecond)
}

// A kept session ends a lease after the server last heard from it, and
// its locks pass on then, not before.
func TestResumeKeptSessionExpires(t *testing.T) {
	ts := startServer(t)
	const lease = 600 * time.Millisecond
	a, w := ts.dialResumable(t, lease, "a")
	a.mustHold(1, excl2, 0, "job")
	lastHeard := time.Now() // the server read the CLAIM before answering
	waiter := ts.dialV2(t, longLease, "w")
	waiter.mustQueue(1, excl2, 0, "job")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	waiter.expectPromoted(1)
	took := time.Since(lastHeard)
	t.Logf("promoted %v after the kept session was last heard from (lease %v)", took, lease)
	if took < lease-50*time.Millisecond || took > lease+5*time.Second {
		t.Errorf("promoted %v after the last frame, want about the lease %v", took, lease)
	}
	if n := ts.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions after expiry = %d", n)
	}
	// Too late: the re-assertion is refused.
	a2, _ := ts.dialResumable(t, longLease, "a")
	a2.mustWrite(reassertFrame(1, excl2, "job", 1, w))
	a2.expectCode(protocol.TypeRefused, 1, protocol.CodeReassertRefused)
}

// Without the flag a broken connection still releases at once.
func TestNotResumableReleasesAtOnce(t *testing.T) {
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "a")
	a.mustHold(1, excl2, 0, "job")
	waiter := ts.dialV2(t, longLease, "w")
	waiter.mustQueue(1, excl2, 0, "job")
	start := time.Now()
	a.breakConn()
	waiter.expectPromoted(1)
	t.Logf("promoted %v after the close", time.Since(start))
	if n := ts.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions = %d", n)
	}
}

// A session-level ERROR from the server ends a resumable session and
// its claims at once: it is not a broken connection.
func TestResumableEndsOnSessionError(t *testing.T) {
	ts := startServer(t)
	a, _ := ts.dialResumable(t, longLease, "a")
	a.mustHold(1, excl2, 0, "job")
	waiter := ts.dialV2(t, longLease, "w")
	waiter.mustQueue(1, excl2, 0, "job")
	if n := server.LiveResumable(ts.Server); n != 1 {
		t.Errorf("LiveResumable = %d, want 1", n)
	}
	a.mustWrite([]byte{0, 1, 0x7f}) // unknown frame type
	a.expectSessionError(protocol.CodeUnknownMessage)
	waiter.expectPromoted(1)
	if n := ts.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions = %d", n)
	}
	ts.events.wait(t, "disconnected", kind(server.EventDisconnected))
	if n := server.LiveResumable(ts.Server); n != 0 {
		t.Errorf("LiveResumable after the session ended = %d, want 0", n)
	}
}

// Every bad re-assertion is refused with 0x04 and changes nothing: the
// kept claim is still there for the right one.
func TestReassertRefusals(t *testing.T) {
	ts := startServer(t)
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	a.mustHold(2, shrd2, 0, "rw")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))

	c, _ := ts.dialResumable(t, longLease, "c")
	wrongSecret := w
	wrongSecret.Secret[0] ^= 1
	unknown := w
	unknown.Session += 1000
	otherNode := w
	otherNode.Node = "elsewhere"
	cases := []struct {
		name  string
		frame []byte
	}{
		{"wrong secret", reassertFrame(1, excl2, "job", tok, wrongSecret)},
		{"unknown session", reassertFrame(1, excl2, "job", tok, unknown)},
		{"another node", reassertFrame(1, excl2, "job", tok, otherNode)},
		{"wrong token", reassertFrame(1, excl2, "job", tok+1, w)},
		{"wrong name", reassertFrame(1, excl2, "other", tok, w)},
		{"wrong mode", reassertFrame(1, shrd2, "job", tok, w)},
		{"unknown claim id", reassertFrame(9, excl2, "job", tok, w)},
		{"held claim re-asserted as queued with a token of another", reassertFrame(2, shrd2, "rw", tok, w)},
	}
	for _, tc := range cases {
		c.mustWrite(tc.frame)
		if f := c.mustReadV2(); f.Type != protocol.TypeRefused || f.Code != protocol.CodeReassertRefused {
			t.Errorf("%s: answered %v, want REFUSED 0x04", tc.name, f)
		}
	}
	if n := ts.KeptSessions(); n != 1 {
		t.Fatalf("KeptSessions after refusals = %d, want 1", n)
	}
	// The refusals changed nothing: the right re-assertion still works.
	if f := c.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion after refusals answered %v", f)
	}
	// A re-assertion whose claim id is in use is the session-level 0x1f.
	c.mustWrite(reassertFrame(1, shrd2, "rw", 0, w))
	c.expectSessionError(protocol.CodeClaimInUse)
}

// A re-assertion with bit 1 and malformed fields ends the session with
// ERROR 0x19, and changes nothing of the kept session.
func TestReassertMalformed(t *testing.T) {
	ts := startServer(t)
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	// Bit 1 set, the re-assertion's fields missing.
	bad := []byte{0, 15, 0x23, 0, 0, 0, 1, protocol.ClaimReassert, 1, 0, 0, 0, 0, 3, 'j', 'o', 'b'}
	c := ts.dialV2(t, longLease, "c")
	c.mustWrite(bad)
	c.expectSessionError(protocol.CodeInvalidFrame)
	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion after a malformed one answered %v", f)
	}
}

// A re-assertion naming a resumable session still open here (its client
// saw the connection break first) keeps that session, closes its
// connection without a frame, and takes the claim over.
func TestReassertTakesOverLiveSession(t *testing.T) {
	ts := startServer(t)
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	a.mustHold(2, excl2, 0, "other")
	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion of a live session's claim answered %v", f)
	}
	a.expectEOFV2()
	// Its other claim is kept for a re-assertion too.
	if n := ts.KeptSessions(); n != 1 {
		t.Fatalf("KeptSessions = %d, want 1", n)
	}
	if f := a2.reassert(2, excl2, "other", 0, w); f.Type != protocol.TypeGranted {
		t.Fatalf("second re-assertion answered %v", f)
	}
}

// A re-assertion on a plain server, for a session it never had, on a
// single server: refused, 0x04.
func TestReassertUnknownOnFreshServer(t *testing.T) {
	ts := startServer(t)
	c := ts.dialV2(t, longLease, "c")
	c.mustWrite(reassertFrame(1, excl2, "job", 7, protocol.Frame{Session: 3}))
	c.expectCode(protocol.TypeRefused, 1, protocol.CodeReassertRefused)
	// The name is untouched.
	c.mustHold(2, excl2, 0, "job")
}

// failWritesListener lets a test make the server's writes to one client
// fail, as a write to a connection the network broke does.
type failWritesListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*failWritesConn // by the client's address
}

type failWritesConn struct {
	net.Conn
	fail atomic.Bool
}

func (c *failWritesConn) Write(b []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(b)
}

func (l *failWritesListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	fc := &failWritesConn{Conn: c}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = fc
	l.mu.Unlock()
	return fc, nil
}

func (l *failWritesListener) failWrites(clientAddr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[clientAddr].fail.Store(true)
}

// A push that cannot be written to a resumable session (a PROMOTED) does
// not end it: the session is kept with the claim granted, and the
// re-assertion learns the grant.
func TestResumeKeptAfterFailedPush(t *testing.T) {
	fl := &failWritesListener{conns: map[string]*failWritesConn{}}
	ts := startServerWrapped(t, func(ln net.Listener) net.Listener { fl.Listener = ln; return fl })
	holder := ts.dialV2(t, longLease, "h")
	holder.mustHold(1, excl2, 0, "job")
	a, w := ts.dialResumable(t, longLease, "a")
	a.mustQueue(1, excl2, 0, "job")
	fl.failWrites(a.addr())
	holder.release(1) // promotes a: the push fails
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	a2, _ := ts.dialResumable(t, longLease, "a")
	f := a2.reassert(1, excl2, "job", 0, w)
	if f.Type != protocol.TypeGranted || f.Token == 0 {
		t.Fatalf("re-assertion after a failed push answered %v, want GRANTED", f)
	}
}

// A frame not completed within the io-timeout breaks the connection of
// a resumable session: it is kept, not ended.
func TestResumeKeptAfterPartialFrame(t *testing.T) {
	ts := startServer(t, withIOTimeout(200*time.Millisecond))
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "job")
	a.mustWrite(protocol.AppendPing(nil, 1)[:4]) // and nothing more
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion answered %v", f)
	}
}

// Shutdown ends kept sessions with every other claim, and their timers.
func TestResumeKeptEndsAtShutdown(t *testing.T) {
	ts := startServer(t)
	a, w := ts.dialResumable(t, longLease, "a")
	a.mustHold(1, excl2, 0, "job")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ts.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions after Close = %d", n)
	}
	if c := ts.Counts(); c.Locks != 0 {
		t.Errorf("counts after Close: %+v", c)
	}
}

// A kept session costs no goroutine and no connection: keeping many
// leaves the goroutine count where it was before they connected.
func TestKeptSessionsHoldNoGoroutine(t *testing.T) {
	ts := startServer(t)
	const n = 50
	before := runtime.NumGoroutine()
	for i := range n {
		a, w := ts.dialResumable(t, longLease, "a")
		a.mustHold(1, excl2, 0, fmt.Sprintf("k%d", i))
		a.breakConn()
		ts.events.wait(t, "session kept", keptEvent(w.Session))
	}
	deadline := time.Now().Add(waitLimit)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			t.Logf("%d sessions kept; goroutines %d before, %d after", ts.KeptSessions(), before, now)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d before %d sessions were kept, %d after", before, n, now)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if k := ts.KeptSessions(); k != n {
		t.Errorf("KeptSessions = %d, want %d", k, n)
	}
	if s := ts.Sessions(); s != 0 {
		t.Errorf("Sessions (open connections) = %d, want 0", s)
	}
}

// A re-assertion passes the access check as any CLAIM: a name the client
// may not take is refused 0x18 and the kept claim stays kept.
func TestReassertNotAuthorized(t *testing.T) {
	authz := &switchAuthz{}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	a, w := ts.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "secret/x")
	a.breakConn()
	ts.events.wait(t, "session kept", keptEvent(w.Session))
	authz.deny.Store(true)
	c, _ := ts.dialResumable(t, longLease, "c")
	c.mustWrite(reassertFrame(1, excl2, "secret/x", tok, w))
	c.expectCode(protocol.TypeRefused, 1, protocol.CodeNotAuthorized)
	if n := ts.KeptSessions(); n != 1 {
		t.Errorf("KeptSessions = %d, want 1", n)
	}
}

// switchAuthz allows everything until deny is set.
type switchAuthz struct{ deny atomic.Bool }

func (a *switchAuthz) Allow(string, string) bool { return !a.deny.Load() }
