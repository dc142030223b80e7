package server_test

import (
	"crypto/tls"
	"testing"

	"github.com/batonlock/baton/internal/testpki"

	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// startLimited starts a server with configure applied and the real
// Prometheus metrics installed beside the event log; it returns a
// function that reads baton_limit_refusals_total{limit}.
func startLimited(t *testing.T, configure func(*server.Server)) (*testServer, func(limit string) float64) {
	t.Helper()
	var m *ops.Metrics
	ts := startServer(t, configure, func(s *server.Server) {
		m = ops.NewMetrics(ops.MetricsConfig{Source: s})
		s.Observer = server.Observers{s.Observer, m}
	})
	return ts, func(limit string) float64 {
		t.Helper()
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "baton_limit_refusals_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "limit" && l.GetValue() == limit {
						return s.GetCounter().GetValue()
					}
				}
			}
		}
		t.Fatalf("no baton_limit_refusals_total{limit=%q}", limit)
		return 0
	}
}

// TestLimitSessionClaims: a version 2 session with MaxSessionClaims
// claims, held and queued, has its next CLAIM refused 0x07 and lives on
// with every claim it had; another client's claims are untouched, and
// the session may claim again once it released one.
func TestLimitSessionClaims(t *testing.T) {
	t.Parallel()
	ts, refusals := startLimited(t, func(s *server.Server) { s.MaxSessionClaims = 3 })
	other := ts.dialV2(t, longLease, "other")
	otherTok := other.mustHold(1, excl2, 0, "q")

	c := ts.dialV2(t, longLease, "greedy")
	c.mustHold(1, excl2, 0, "a")
	c.mustHold(2, excl2, 0, "b")
	c.mustQueue(3, excl2, 0, "q")
	c.mustWrite(claimFrame(4, excl2, 0, "c"))
	c.expectCode(protocol.TypeRefused, 4, protocol.CodeLimitReached)
	if _, ok := ts.Lock("c"); ok {
		t.Errorf("a refused claim holds its lock")
	}
	if got := refusals(server.LimitSessionClaims); got != 1 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 1", server.LimitSessionClaims, got)
	}
	if li, ok := ts.Lock("q"); !ok || len(li.Holders) != 1 || li.Holders[0].Token != otherTok {
		t.Errorf("the other client's lock after the refusal: %+v", li)
	}
	// The session lives on with its claims: a release frees a place.
	c.release(1)
	c.mustHold(4, excl2, 0, "c")
	other.release(1)
	c.expectPromoted(3)
}

// TestLimitWaiters: a lock whose queue holds MaxWaiters refuses one more
// waiter: a version 2 CLAIM is REFUSED 0x07 (no-wait: BUSY), a version 1
// ACQUIRE is answered ERROR 0x07 and closed. The holder and the waiters
// keep their places.
func TestLimitWaiters(t *testing.T) {
	t.Parallel()
	ts, refusals := startLimited(t, func(s *server.Server) { s.MaxWaiters = 2 })
	holder := ts.dial(t)
	tok := holder.mustOwn("w", longLease)
	w1 := ts.dialV2(t, longLease, "w1")
	w1.mustQueue(1, excl2, 0, "w")
	w2 := ts.dial(t)
	w2.mustWait("w", longLease)

	c := ts.dialV2(t, longLease, "third")
	c.mustWrite(claimFrame(1, excl2, 0, "w"))
	c.expectCode(protocol.TypeRefused, 1, protocol.CodeLimitReached)
	c.mustWrite(noWaitFrame(2, excl2, 0, "w"))
	c.expect(protocol.TypeBusy, 2)
	v1 := ts.dial(t)
	v1.mustWrite(acquireFrame("w", longLease))
	v1.expectErrorBytes(protocol.CodeLimitReached)
	// Another name has its own queue.
	c.mustHold(3, excl2, 0, "other")

	if got := refusals(server.LimitWaiters); got != 2 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 2", server.LimitWaiters, got)
	}
	if err := holder.sendHeartbeat(); err != nil {
		t.Fatal(err)
	}
	if got := holder.expectAcquired(); got != tok {
		t.Errorf("holder's token after the refusals: %d, want %d", got, tok)
	}
	// The queue is in its order: w1, then w2.
	holder.close()
	w1.expectPromoted(1)
	w1.release(1)
	w2.expectAcquired()
}

// TestLimitSessionsPerClient: a client (here: an address) with
// MaxSessionsPerClient open sessions has one more answered ERROR 0x07
// and closed, version 1 or 2; its open sessions keep their locks, and a
// session that ends frees a place.
func TestLimitSessionsPerClient(t *testing.T) {
	t.Parallel()
	ts, refusals := startLimited(t, func(s *server.Server) { s.MaxSessionsPerClient = 2 })
	a := ts.dial(t)
	tok := a.mustOwn("a", longLease)
	b := ts.dialV2(t, longLease, "b")
	b.mustHold(1, excl2, 0, "b")

	v1 := ts.dial(t)
	v1.mustWrite(acquireFrame("c", longLease))
	v1.expectErrorBytes(protocol.CodeLimitReached)
	v2 := ts.dialV2Raw(t)
	v2.mustWrite(openingV2(longLease, "too many"))
	v2.expectSessionError(protocol.CodeLimitReached)
	if got := refusals(server.LimitClientSession); got != 2 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 2", server.LimitClientSession, got)
	}
	if _, ok := ts.Lock("c"); ok {
		t.Errorf("a refused session holds its lock")
	}
	if err := a.sendHeartbeat(); err != nil {
		t.Fatal(err)
	}
	if got := a.expectAcquired(); got != tok {
		t.Errorf("open session's token after the refusals: %d, want %d", got, tok)
	}
	b.mustHold(2, excl2, 0, "b2")

	// A session that ends frees its place.
	b.close()
	ts.events.wait(t, "b disconnected", peerEvent(server.EventDisconnected, b.client))
	ts.dialV2(t, longLease, "again").mustHold(1, excl2, 0, "b")
}

// TestLimitKept: a resumable session whose connection breaks is kept only
// while the kept sessions stay within MaxKeptSessions and their claims
// within MaxKeptClaims; one that would pass either is ended as a plain
// session (its waiters promoted at once), and the sessions already kept
// keep their claims. Re-asserted claims free their place.
func TestLimitKept(t *testing.T) {
	t.Parallel()
	ts, refusals := startLimited(t, func(s *server.Server) { s.MaxKeptSessions = 2; s.MaxKeptClaims = 3 })
	waiter := ts.dialV2(t, longLease, "waiter")
	keep := func(label string, names ...string) (*v2client, protocol.Frame) {
		c, w := ts.dialResumable(t, longLease, label)
		for i, n := range names {
			c.mustHold(uint32(i+1), excl2, 0, n)
		}
		return c, w
	}
	notKept := func(c *v2client, name string, id uint32) {
		t.Helper()
		waiter.mustQueue(id, excl2, 0, name)
		c.breakConn()
		waiter.expectPromoted(id)
	}

	a, wa := keep("a", "a1", "a2")
	tokA, _ := ts.Lock("a1")
	a.breakConn()
	ts.events.wait(t, "a kept", keptEvent(wa.Session))

	// Two claims more would make four kept claims.
	b, _ := keep("b", "b1", "b2")
	notKept(b, "b1", 1)

	c, wc := keep("c", "c1")
	c.breakConn()
	ts.events.wait(t, "c kept", keptEvent(wc.Session))

	// A third kept session is one too many.
	e, _ := keep("e", "e1")
	notKept(e, "e1", 2)

	if got := refusals(server.LimitKeptClaims); got != 1 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 1", server.LimitKeptClaims, got)
	}
	if got := refusals(server.LimitKeptSessions); got != 1 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 1", server.LimitKeptSessions, got)
	}
	if n := ts.KeptSessions(); n != 2 {
		t.Errorf("KeptSessions = %d, want 2", n)
	}
	// The sessions kept keep their claims; re-asserted, they free places.
	a2, _ := ts.dialResumable(t, longLease, "a")
	tok := tokA.Holders[0].Token
	if f := a2.reassert(1, excl2, "a1", tok, wa); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion of a kept claim answered %v, want GRANTED(%d)", f, tok)
	}
	if f := a2.reassert(2, excl2, "a2", 0, wa); f.Type != protocol.TypeGranted {
		t.Fatalf("re-assertion of a kept claim answered %v, want GRANTED", f)
	}
	d, wd := keep("d", "d1", "d2")
	d.breakConn()
	ts.events.wait(t, "d kept", keptEvent(wd.Session))
}

// TestLimitSessionsPerIdentity: under mutual TLS the sessions count per
// certificate identity, not per address: one identity at its limit is
// refused, another from the same address is served.
func TestLimitSessionsPerIdentity(t *testing.T) {
	t.Parallel()
	ca, err := testpki.NewCA("baton test CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(l testpki.Leaf) tls.Certificate {
		c, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		return c.TLS
	}
	srvCert := issue(testpki.Localhost("baton server"))
	a := &testPKI{pool: ca.Pool(), server: srvCert, client: issue(testpki.Leaf{CommonName: "a", URIs: []string{"spiffe://baton.test/a"}})}
	b := &testPKI{pool: ca.Pool(), server: srvCert, client: issue(testpki.Leaf{CommonName: "b", URIs: []string{"spiffe://baton.test/b"}})}
	ts, refusals := startLimited(t, func(s *server.Server) {
		s.MaxSessionsPerClient = 1
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	})
	acquire := func(p *testPKI, name string) protocol.ServerFrame {
		t.Helper()
		c, _ := ts.dialTLS(t, p)
		if _, err := c.Write(acquireFrame(name, longLease)); err != nil {
			t.Fatal(err)
		}
		return readTLSFrame(t, c)
	}
	if f := acquire(a, "a1"); f.Type != protocol.TypeAcquired {
		t.Fatalf("first session of identity a: %v", f)
	}
	if f := acquire(a, "a2"); f.Type != protocol.TypeError || f.Code != protocol.CodeLimitReached {
		t.Fatalf("second session of identity a: %v, want ERROR 0x07", f)
	}
	if f := acquire(b, "b1"); f.Type != protocol.TypeAcquired {
		t.Fatalf("first session of identity b, same address: %v", f)
	}
	if got := refusals(server.LimitClientSession); got != 1 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 1", server.LimitClientSession, got)
	}
	if li, ok := ts.Lock("a1"); !ok || li.Holder.Peer.Identity != "spiffe://baton.test/a" {
		t.Errorf("identity a's lock after the refusal: %+v", li)
	}
}

// TestLimitKeptAbandoned: a resumable session still open whose client
// re-asserts elsewhere, with a claim and a range lock, while the kept
// sessions are at their limit: its range lock is kept for the resume
// (that is the range table's business), and its claim, not kept, ends
// at once (its waiter is promoted) rather than staying with no reader.
func TestLimitKeptAbandoned(t *testing.T) {
	t.Parallel()
	ts, refusals := startLimited(t, func(s *server.Server) { s.MaxKeptSessions = 1 })
	k, wk := ts.dialResumable(t, longLease, "kept")
	k.mustHold(1, excl2, 0, "k")
	k.breakConn()
	ts.events.wait(t, "kept", keptEvent(wk.Session))

	a, wa := ts.dialResumable(t, longLease, "a")
	a.mustHold(1, excl2, 0, "job")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 9, "f"))
	a.expectRange(1, protocol.RangeGranted)
	waiter := ts.dialV2(t, longLease, "waiter")
	waiter.mustQueue(1, excl2, 0, "job")

	// Its client re-asserts the claim on a new session: the open one is
	// abandoned, its claim not kept (the limit), so the re-assertion
	// finds nothing and the waiter is promoted.
	a2, _ := ts.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "job", 0, wa); f.Type != protocol.TypeRefused || f.Code != protocol.CodeReassertRefused {
		t.Fatalf("re-assertion of a claim not kept answered %v, want REFUSED 0x04", f)
	}
	waiter.expectPromoted(1)
	a2.mustWrite(resumeRangeFrame(1, 0, protocol.LockWrite, 7, 0, 9, "f", wa))
	a2.expectRange(1, protocol.RangeDone)
	if got := refusals(server.LimitKeptSessions); got != 1 {
		t.Errorf("baton_limit_refusals_total{limit=%q} = %v, want 1", server.LimitKeptSessions, got)
	}
	if _, ok := ts.Lock("k"); !ok {
		t.Errorf("the session kept first lost its claim")
	}
}
