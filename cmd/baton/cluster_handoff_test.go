package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/freeport"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// Planned changes with real processes (docs/design/2026-12-02-cluster-fail-closed-model.md, "Planned
// moves"): a join or a leave freezes the names that move on their prior
// owner, ends the version 1 claims on them there (ERROR 0x01) and hands
// the version 2 claims over, and only then switches the ring; the new
// owner serves them at once, never while a client of the prior owner
// still holds one, and the version 2 claims continue there with their
// tokens (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2 claims across a planned
// change").

// v2Claim claims name on session s until it is granted: a new cluster
// holds claims while it warms up (QUEUED, then PROMOTED; or REFUSED
// 0x03), and s pings while it waits. It returns the claim id granted
// and its token.
func v2Claim(t *testing.T, s *opstest.Conn, addr, name string) (uint32, uint64) {
	t.Helper()
	var id uint32
	for deadline := time.Now().Add(2 * opstest.Timeout); ; {
		id++
		s.Claim(id, protocol.ModeExclusive, 0, name)
		f := s.ReadV2()
		for f.Type == protocol.TypeQueued || f.Type == protocol.TypePong {
			if time.Now().After(deadline) {
				t.Fatalf("v2 claim of %s at %s: not granted within %v", name, addr, 2*opstest.Timeout)
			}
			s.Send(protocol.AppendPing(nil, 1))
			f = s.ReadV2()
		}
		if (f.Type == protocol.TypeGranted || f.Type == protocol.TypePromoted) && f.Claim == id {
			return id, f.Token
		}
		if f.Type != protocol.TypeRefused || time.Now().After(deadline) {
			t.Fatalf("v2 claim of %s at %s: %v", name, addr, f)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// v2Holder opens a version 2 session on addr and claims name until it is
// granted (a new cluster refuses with 0x03 while it warms up), then pings
// every 200 ms. It returns the claim's token; revoked returns the REVOKED
// of the claim, if any came; release releases it.
func v2Holder(t *testing.T, addr, name string, lease time.Duration) (token uint64, revoked func() *framed, release, stop func()) {
	t.Helper()
	s := opstest.DialV2(t, addr, lease, "holder")
	id, token := v2Claim(t, s, addr, name)
	frames := readAll(s.Conn, true)
	quit := make(chan struct{})
	var got atomic.Pointer[framed]
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-quit:
				return
			case <-tick.C:
				s.SetWriteDeadline(time.Now().Add(time.Second))
				s.Write(protocol.AppendPing(nil, seq))
			case f, ok := <-frames:
				if !ok {
					<-quit
					return
				}
				if f.err == nil && f.v2.Type == protocol.TypeRevoked && f.v2.Claim == id && got.Load() == nil {
					got.Store(&f)
				}
			}
		}
	}()
	release = func() {
		s.SetWriteDeadline(time.Now().Add(time.Second))
		s.Write(protocol.AppendRelease(nil, id))
	}
	return token, got.Load, release, func() { close(quit); <-done }
}

// logDrain keeps reading a node's log records so that its stderr never
// fills (a node that cannot write its logs stops), and lets a test wait
// for one.
type logDrain struct {
	mu   sync.Mutex
	recs []map[string]any
	more chan struct{}
}

func drainLogs(p *batonProc) *logDrain {
	d := &logDrain{more: make(chan struct{})}
	go func() {
		for rec := range p.logs {
			d.mu.Lock()
			d.recs = append(d.recs, rec)
			close(d.more)
			d.more = make(chan struct{})
			d.mu.Unlock()
		}
	}()
	return d
}

// find returns the records with message msg so far.
func (d *logDrain) find(msg string) []map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []map[string]any
	for _, r := range d.recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

var threeRing, fourRing = cluster.NewRing(0, []string{"n1", "n2", "n3"}), cluster.NewRing(0, []string{"n1", "n2", "n3", "n4"})

// movingName returns a name that n1, n2, n3 give to from and that a
// joining n4 takes.
func movingName(t *testing.T, from, prefix string) string {
	t.Helper()
	for i := range 10000 {
		if name := fmt.Sprintf("%s-%d", prefix, i); threeRing.Owner(name) == from && fourRing.Owner(name) == "n4" {
			return name
		}
	}
	t.Fatalf("no name moving from %s to n4", from)
	return ""
}

// framed is a frame with the instant its reader got it.
type framed struct {
	v1  protocol.ServerFrame
	v2  protocol.Frame
	at  time.Time
	err error
}

// readAll reads frames from c until it fails, stamping each on arrival.
func readAll(c net.Conn, v2 bool) <-chan framed {
	ch := make(chan framed, 1024)
	go func() {
		defer close(ch)
		for {
			c.SetReadDeadline(time.Now().Add(time.Minute))
			var f framed
			if v2 {
				f.v2, f.err = protocol.ReadServerFrameV2(c)
			} else {
				f.v1, f.err = protocol.ReadServerFrame(c)
			}
			f.at = time.Now()
			ch <- f
			if f.err != nil {
				return
			}
		}
	}()
	return ch
}

// A version 1 holder and two version 2 holders (one direct, one relayed
// by another node) hold names that move to a joining 4th node. The
// version 1 holder is told it lost its lock (ERROR 0x01) before the new
// owner grants it, at once (no warm-up: the names were handed over);
// the version 2 claims continue at the new owner with their tokens: a
// new claim there queues behind each, and is promoted when its holder
// releases. Before the hand-off existed, the prior owner kept the claims
// and kept confirming the version 1 holder's heartbeats, and the new
// owner granted the names after its warm-up: two holders.
func TestClusterJoinHandsOver(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t)
	const lease = 2 * time.Second
	from := "n1"
	name1, name2 := movingName(t, from, "hand-v1"), movingName(t, from, "hand-v2")

	// The version 1 holder heartbeats every 200 ms and notes each
	// ACQUIRED that confirms it, and when it learns it lost the lock.
	holder, _ := waitGrant(t, nodes[from].addr, name1, lease)
	granted0 := time.Now()
	frames := readAll(holder.Conn, false)
	var mu sync.Mutex
	var lastConfirmed, lostAt time.Time
	var lostCode protocol.Code
	stop := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				holder.SetWriteDeadline(time.Now().Add(time.Second))
				holder.Write(protocol.AppendHeartbeat(nil))
			case f, ok := <-frames:
				mu.Lock()
				switch {
				case !ok || f.err != nil:
					if lostAt.IsZero() {
						lostAt = f.at
					}
				case f.v1.Type == protocol.TypeAcquired:
					lastConfirmed = f.at
				case f.v1.Type == protocol.TypeError && lostAt.IsZero():
					lostAt, lostCode = f.at, f.v1.Code
				}
				mu.Unlock()
				if !ok || f.err != nil {
					<-stop
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-hbDone }()
	// A heartbeat confirmed before the move begins, so that the check
	// below (none confirmed after the new grant) can fail: nodes started
	// in one process join within a heartbeat interval.
	for confirmed := false; !confirmed; {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		confirmed = !lastConfirmed.IsZero()
		mu.Unlock()
		if !confirmed && time.Since(granted0) > 5*time.Second {
			t.Fatal("the v1 holder's heartbeats are not confirmed")
		}
	}

	// Version 2 holders, one on the owner and one relayed by another
	// node.
	tok2, revoked2, release2, stop2 := v2Holder(t, nodes[from].addr, name2, lease)
	defer stop2()
	name3 := movingName(t, from, "hand-relayed")
	tok3, revoked3, release3, stop3 := v2Holder(t, nodes["n3"].addr, name3, lease)
	defer stop3()

	joinStart := time.Now()
	n4 := startNodeLib(t, "n4", nodes["n2"].admin)
	for _, n := range []*clusterProc{nodes["n1"], nodes["n2"], nodes["n3"], n4} {
		waitStatus(t, n, "a ring of 4", func(st cluster.Status) bool { return len(st.Ring) == 4 })
	}
	t.Logf("n4 joined %v after it was started", time.Since(joinStart).Round(time.Millisecond))

	// Another client asks the new owner for each name, heartbeating
	// while it waits.
	c1, tok1 := waitGrant(t, n4.addr, name1, lease)
	granted1 := time.Now()
	defer c1.Close()
	// The version 2 claims continue at n4: a new claim there queues
	// behind each, and is promoted when its holder releases, with a token
	// above the holder's, which the move did not change.
	s2 := opstest.DialV2(t, n4.addr, lease, "next")
	s2.Claim(1, protocol.ModeExclusive, 0, name2)
	s2.ExpectV2(protocol.TypeQueued, 1, 0)
	s2.Claim(2, protocol.ModeExclusive, 0, name3)
	s2.ExpectV2(protocol.TypeQueued, 2, 0)

	// Give the old holder's heartbeats a chance to be confirmed after the
	// new grant (they were, before the hand-off).
	time.Sleep(600 * time.Millisecond)
	for _, c := range []struct {
		what, name string
		r          *framed
		release    func()
		id         uint32
		token      uint64
	}{{"v2", name2, revoked2(), release2, 1, tok2}, {"relayed v2", name3, revoked3(), release3, 2, tok3}} {
		if c.r != nil {
			t.Errorf("the %s holder of %s was told %v: its claim did not continue", c.what, c.name, c.r.v2)
		}
		released := time.Now()
		c.release()
		f := s2.ReadV2()
		for f.Type == protocol.TypePong {
			f = s2.ReadV2()
		}
		if f.Type != protocol.TypePromoted || f.Claim != c.id || f.Token <= c.token {
			t.Errorf("after the %s holder of %s (token %#x) released at n4: %v, want PROMOTED(%d) with a greater token", c.what, c.name, c.token, f, c.id)
		} else {
			t.Logf("%s: the holder's claim continued at n4 (token %#x); its release promoted the next claim there in %v, token %#x",
				c.what, c.token, time.Since(released).Round(time.Millisecond), f.Token)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("v1: holder last confirmed %v before the new grant, told it lost the lock (code 0x%02x) %v before; new token %#x",
		granted1.Sub(lastConfirmed).Round(time.Millisecond), uint8(lostCode), granted1.Sub(lostAt).Round(time.Millisecond), tok1)
	if lastConfirmed.IsZero() {
		t.Errorf("no heartbeat of the v1 holder of %s was ever confirmed: the check that it was not confirmed after the new grant proves nothing", name1)
	}
	if !lastConfirmed.Before(granted1) {
		t.Errorf("the prior owner confirmed the v1 holder of %s %v after the new owner granted it: two holders",
			name1, lastConfirmed.Sub(granted1))
	}
	if lostAt.IsZero() || lostAt.After(granted1) || lostCode != protocol.CodeShuttingDown {
		t.Errorf("the v1 holder of %s was not told it lost the lock (ERROR 0x01) before the new grant (lost at %v, code 0x%02x, granted at %v)",
			name1, lostAt, uint8(lostCode), granted1)
	}
}

// holding is one client's ownership of a lock, as the client saw it:
// from the grant's arrival to the release it sent, or to the arrival of
// the frame that told it it lost the lock.
type holding struct {
	name       string
	token      uint64
	start, end time.Time
	lost       bool
	v2         bool
	code       protocol.Code // lost: the ERROR or REVOKED code
	revoked    bool          // lost by a REVOKED of the claim, not its session's end
}

// grantLog collects holdings from many clients.
type grantLog struct {
	mu sync.Mutex
	hs []holding
	n  atomic.Int64
}

func (g *grantLog) add(h holding) {
	g.mu.Lock()
	g.hs = append(g.hs, h)
	g.mu.Unlock()
	g.n.Add(1)
}

// lostSlack is how much a holding that ended by a loss notice may
// overlap the next grant: the notice is sent before the name's new owner
// may grant, but its reader may be scheduled a moment later.
const lostSlack = 100 * time.Millisecond

// check fails the test if two holdings of one name overlap (beyond
// lostSlack after a loss notice) or if tokens do not increase in grant
// order.
func (g *grantLog) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	byName := map[string][]holding{}
	for _, h := range g.hs {
		byName[h.name] = append(byName[h.name], h)
	}
	for name, hs := range byName {
		sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
		var last holding // the holding that ends last of those before
		for i, h := range hs {
			if i > 0 {
				limit := last.end
				if last.lost {
					limit = limit.Add(-lostSlack)
				}
				if h.start.Before(limit) {
					t.Errorf("%s: token %#x granted %v before token %#x ended: two holders", name, h.token, last.end.Sub(h.start), last.token)
				}
				if prev := hs[i-1]; h.token <= prev.token {
					t.Errorf("%s: token %#x granted after %#x", name, h.token, prev.token)
				}
			}
			if i == 0 || h.end.After(last.end) {
				last = h
			}
		}
	}
}

// load is a set of loadClients.
type load struct {
	t       *testing.T
	g       *grantLog
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

// startLoad starts n loadClients; kind says which are version 2 and which
// hold long.
func startLoad(t *testing.T, n int, names []string, nodes func() []string, g *grantLog, kind func(i int) (v2, long bool)) *load {
	ld := &load{t: t, g: g, quit: make(chan struct{})}
	for i := range n {
		v2, long := kind(i)
		ld.wg.Go(func() { loadClient(t, v2, long, uint64(i), names, nodes, g, ld.quit) })
	}
	return ld
}

// stop stops the clients and waits for them; again, it does nothing.
func (ld *load) stop() {
	if !ld.stopped {
		ld.stopped = true
		close(ld.quit)
		ld.wg.Wait()
	}
}

// waitGrants waits, bounded, until the clients have recorded n holdings.
func (ld *load) waitGrants(what string, n int64) {
	ld.t.Helper()
	deadline := time.Now().Add(4 * opstest.Timeout)
	for ld.g.n.Load() < n {
		if time.Now().After(deadline) {
			ld.t.Fatalf("%s: %d grants, want %d within %v", what, ld.g.n.Load(), n, 4*opstest.Timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadLease is the lease of the load's clients.
const loadLease = 2 * time.Second

// loadClient takes and releases random names until stop closes, through
// random nodes of nodes(), each relaying to the name's owner; a claim
// refused with the retryable 0x03 (the name is held) is tried again.
func loadClient(t *testing.T, v2, long bool, seed uint64, names []string, nodes func() []string, g *grantLog, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 0x10ad))
	const lease = loadLease
	for {
		select {
		case <-stop:
			return
		default:
		}
		addrs := nodes()
		addr := addrs[rng.IntN(len(addrs))]
		name := names[rng.IntN(len(names))]
		hold := time.Duration(2+rng.IntN(15)) * time.Millisecond
		if long {
			// Longer than a take-over's warm-up (largest lease + 2 s): a
			// holder a change left on its prior owner would still hold
			// when the new owner grants.
			hold = 5*time.Second + time.Duration(rng.IntN(1000))*time.Millisecond
		}
		var err error
		if v2 {
			err = v2Once(addr, name, lease, hold, g, stop)
		} else {
			err = v1Once(addr, name, lease, hold, g, stop)
		}
		if err != nil && !errors.Is(err, errRetry) {
			t.Errorf("client on %s: %v", name, err)
			return
		}
		if errors.Is(err, errRetry) {
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		}
	}
}

var errRetry = errors.New("retry")

// v1Once takes name once on addr (heartbeating while it waits), holds
// it for hold and hangs up.
func v1Once(addr, name string, lease, hold time.Duration, g *grantLog, stop <-chan struct{}) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return errRetry
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(opstest.AcquireFrame(name, lease)); err != nil {
		return errRetry
	}
	frames := readAll(c, false)
	beat := time.NewTicker(lease / 5)
	defer beat.Stop()
	var h *holding
	var release <-chan time.Time
	for {
		select {
		case <-stop:
			if h != nil {
				h.end = time.Now()
				g.add(*h)
			}
			return nil
		case <-beat.C:
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(protocol.AppendHeartbeat(nil))
		case <-release:
			h.end = time.Now()
			g.add(*h)
			return nil
		case f, ok := <-frames:
			switch {
			case !ok || f.err != nil:
				if h != nil {
					return fmt.Errorf("%s: the connection of holder %#x ended without a frame: %v", name, h.token, f.err)
				}
				return errRetry
			case f.v1.Type == protocol.TypeWaiting:
			case f.v1.Type == protocol.TypeAcquired && h == nil:
				h = &holding{name: name, token: f.v1.Token, start: f.at}
				release = time.After(hold)
			case f.v1.Type == protocol.TypeAcquired:
			case f.v1.Type == protocol.TypeError && h != nil:
				h.end, h.lost, h.code = f.at, true, f.v1.Code
				g.add(*h)
				return errRetry
			case f.v1.Type == protocol.TypeError:
				return errRetry
			default:
				return fmt.Errorf("%s: unexpected %v", name, f.v1)
			}
		}
	}
}

// v2Once opens a session on addr, claims name, holds it for hold and
// releases it.
func v2Once(addr, name string, lease, hold time.Duration, g *grantLog, stop <-chan struct{}) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return errRetry
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	b := protocol.AppendHello(protocol.AppendPreamble(nil), uint32(lease/time.Millisecond), "load")
	if _, err := c.Write(protocol.AppendClaim(b, 1, protocol.ModeExclusive, 0, 0, name)); err != nil {
		return errRetry
	}
	frames := readAll(c, true)
	ping := time.NewTicker(lease / 5)
	defer ping.Stop()
	var h *holding
	var release <-chan time.Time
	released := false
	for {
		select {
		case <-stop:
			if h != nil && !released {
				h.end = time.Now()
				g.add(*h)
			}
			return nil
		case <-ping.C:
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(protocol.AppendPing(nil, 1))
		case <-release:
			release = nil
			h.end = time.Now()
			g.add(*h)
			released = true
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(protocol.AppendRelease(nil, 1))
		case f, ok := <-frames:
			switch {
			case !ok || f.err != nil:
				if h != nil && !released {
					return fmt.Errorf("%s: the session of holder %#x ended without a frame: %v", name, h.token, f.err)
				}
				return errRetry
			case f.v2.Type == protocol.TypeWelcome, f.v2.Type == protocol.TypePong, f.v2.Type == protocol.TypeQueued:
			case f.v2.Type == protocol.TypeGranted, f.v2.Type == protocol.TypePromoted:
				h = &holding{name: name, token: f.v2.Token, start: f.at, v2: true}
				release = time.After(hold)
			case f.v2.Type == protocol.TypeReleased:
				return nil
			case f.v2.Type == protocol.TypeRefused, f.v2.Type == protocol.TypeSessionError && h == nil:
				return errRetry
			case (f.v2.Type == protocol.TypeRevoked || f.v2.Type == protocol.TypeSessionError) && h != nil && !released:
				// REVOKED ends the claim; a session-level ERROR (a node
				// shutting down) ends the session and its claims.
				h.end, h.lost, h.code, h.revoked = f.at, true, f.v2.Code, f.v2.Type == protocol.TypeRevoked
				g.add(*h)
				return errRetry
			case f.v2.Type == protocol.TypeRevoked:
				return errRetry // a waiter's claim, or one crossing its RELEASE
			case f.v2.Type == protocol.TypeSessionError && released:
				// The session's node stopped before it answered the
				// RELEASE: a claim moving to a new owner has its RELEASE
				// answered only once adopted there.
				return errRetry
			default:
				return fmt.Errorf("%s: unexpected %v", name, f.v2)
			}
		}
	}
}

// A 4th node joins and leaves again while 50 clients (35 version 1, 15
// version 2; 10 of them holding for longer than a take-over's warm-up)
// take and release 16 names through every node: never two
// holders of a name, tokens increasing in grant order; no version 2 claim
// lost but by the documented bound, a claim not adopted at its new owner
// within half its lease of its prior owner's export, which a loaded
// machine can exceed at these 2 s leases (those held across a change,
// and those given up, are counted); every version 1 claim that ended
// other than by its client's release was told so (ERROR 0x01), and only
// on a name that moved.
func TestClusterJoinLeaveUnderLoad(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t)
	var names []string
	for i := range 16 {
		names = append(names, fmt.Sprintf("load-%d", i))
	}
	var addrs atomic.Pointer[[]string]
	three := []string{nodes["n1"].addr, nodes["n2"].addr, nodes["n3"].addr}
	addrs.Store(&three)
	g := &grantLog{}
	ld := startLoad(t, 50, names, func() []string { return *addrs.Load() }, g, func(i int) (v2, long bool) {
		return i%10 >= 7, i%10 == 0 || i%10 == 9
	})
	defer ld.stop()
	waitGrants := func(what string, n int64) { t.Helper(); ld.waitGrants(what, n) }
	waitGrants("warm-up", 200)
	t.Logf("%d grants before the join", g.n.Load())

	start := time.Now()
	joinBegan := start
	n4 := startNodeLib(t, "n4", nodes["n1"].admin)
	all := []*clusterProc{nodes["n1"], nodes["n2"], nodes["n3"], n4}
	for _, n := range all {
		waitStatus(t, n, "a ring of 4", func(st cluster.Status) bool { return len(st.Ring) == 4 })
	}
	joined := time.Now()
	t.Logf("n4 in the ring %v after it was started", time.Since(start).Round(time.Millisecond))
	four := []string{nodes["n1"].addr, nodes["n2"].addr, nodes["n3"].addr, n4.addr}
	addrs.Store(&four)
	// Long enough for a take-over's warm-up and the long holds.
	phase := time.Now().Add(7 * time.Second)
	waitGrants("with 4 nodes", g.n.Load()+150)
	time.Sleep(time.Until(phase))
	addrs.Store(&three)

	start = time.Now()
	leaveBegan := start
	if code, out, errOut := cli("cluster", "leave", "--admin", n4.admin); code != 0 {
		t.Fatalf("cluster leave: %d %q %q", code, out, errOut)
	}
	for _, n := range all[:3] {
		waitStatus(t, n, "a ring of 3 again", func(st cluster.Status) bool { return len(st.Ring) == 3 && !slices.Contains(st.Ring, "n4") })
	}
	left := time.Now()
	t.Logf("n4 out of the ring %v after the leave began", time.Since(start).Round(time.Millisecond))
	phase = time.Now().Add(7 * time.Second)
	waitGrants("after the leave", g.n.Load()+150)
	time.Sleep(time.Until(phase))
	ld.stop()

	g.check(t)
	moved := func(name string) bool { return threeRing.Owner(name) != fourRing.Owner(name) }
	procs := map[string]*clusterProc{"n1": nodes["n1"], "n2": nodes["n2"], "n3": nodes["n3"], "n4": n4}
	// exported is when node id exported the claims on its moving names for
	// the change that began at from (before to, unless zero): a moving
	// claim's host starts its half-lease clock then or later.
	in := func(at, from, to time.Time) bool { return !at.Before(from) && (to.IsZero() || at.Before(to)) }
	exported := func(id string, from, to time.Time) time.Time {
		for _, r := range procs[id].logged("planned change: claims on names moving to another node handed over") {
			if at := logTime(t, r); in(at, from, to) {
				return at
			}
		}
		return time.Time{}
	}
	// settled is when that change last took effect on a node: its ring
	// applied, or a new owner serving (its first or a fresh token epoch).
	// Only then can the last moving claims be adopted.
	settled := func(from, to time.Time) (last time.Time) {
		for _, p := range procs {
			for _, msg := range []string{"ring applied", "cluster node serving", "fresh token epoch for names gained"} {
				for _, r := range p.logged(msg) {
					if at := logTime(t, r); in(at, from, to) && at.After(last) {
						last = at
					}
				}
			}
		}
		return last
	}
	var v1, v2, lost1, continued, gaveUp int
	for _, h := range g.hs {
		if h.v2 {
			v2++
		} else {
			v1++
		}
		if h.v2 && !h.lost && moved(h.name) && (spans(h, joinBegan, joined) || spans(h, leaveBegan, left)) {
			continued++
		}
		if !h.lost {
			continue
		}
		switch {
		case !moved(h.name):
			t.Errorf("%s, which did not move, lost token %#x (code 0x%02x)", h.name, h.token, uint8(h.code))
		case h.v2:
			// The only loss allowed (docs/cluster.md, "What is
			// guaranteed"): REVOKED 0x03 from a host that waited half the
			// lease after the prior owner's export for the adoption.
			prior, from, to := "n4", leaveBegan, time.Time{}
			if h.end.Before(leaveBegan) {
				prior, from, to = threeRing.Owner(h.name), joinBegan, leaveBegan
			}
			at := exported(prior, from, to)
			switch {
			case !h.revoked || h.code != protocol.CodeNotOwner:
				t.Errorf("%s: version 2 token %#x lost across a planned change (code 0x%02x, revoked %v)", h.name, h.token, uint8(h.code), h.revoked)
			case at.IsZero():
				t.Errorf("%s: version 2 token %#x revoked (0x03), but %s logged no export for the change", h.name, h.token, prior)
			case h.end.Sub(at) < loadLease/2:
				t.Errorf("%s: version 2 token %#x revoked (0x03) %v after %s's export, before half its lease (%v)",
					h.name, h.token, h.end.Sub(at).Round(time.Millisecond), prior, loadLease/2)
			case settled(from, to).Sub(at) < loadLease/4:
				// A hand-off that took effect everywhere well within the
				// bound (a quarter lease of slack for the hosts' 100 ms
				// retries, late on a loaded machine) must adopt its claims.
				t.Errorf("%s: version 2 token %#x revoked (0x03), though the change took effect everywhere %v after %s's export",
					h.name, h.token, settled(from, to).Sub(at).Round(time.Millisecond), prior)
			default:
				gaveUp++
				t.Logf("%s: version 2 token %#x not adopted within half its lease: revoked (0x03) %v after %s's export; the change took effect everywhere %v after it",
					h.name, h.token, h.end.Sub(at).Round(time.Millisecond), prior, settled(from, to).Sub(at).Round(time.Millisecond))
			}
		case h.code != protocol.CodeShuttingDown:
			t.Errorf("%s lost token %#x with code 0x%02x (v1)", h.name, h.token, uint8(h.code))
		default:
			lost1++
		}
	}
	t.Logf("%d holdings (%d v1, %d v2), no two holders; claims ended by the moves: %d v1 (ERROR 0x01), %d v2 not adopted in half their lease (REVOKED 0x03); "+
		"%d v2 holdings on moved names held across a change with their tokens", len(g.hs), v1, v2, lost1, gaveUp, continued)
	if v1 == 0 || v2 == 0 {
		t.Errorf("v1 holdings %d, v2 holdings %d: the load missed a protocol", v1, v2)
	}
}

// spans reports whether holding h began before from and ended after to:
// it was held across a change that ran from from to to.
func spans(h holding, from, to time.Time) bool { return h.start.Before(from) && h.end.After(to) }

// logTime is the time of a log record.
func logTime(t *testing.T, rec map[string]any) time.Time {
	t.Helper()
	s, _ := rec["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log record without a time: %v", rec)
	}
	return at
}

// A join with 100,000 held claims (100 version 2 sessions of 1,000
// claims, on the three owners) moves its share of them, about a quarter,
// within a second: from the proposal of the new ring to its commit, the
// prior owners freeze the names, export the claims on them and hand them
// over; then each session adopts its moved claims at the new owner, with
// their tokens (none is revoked). A PING sent after the ring switched is
// answered only once its session's claims are adopted (a moving claim
// is an unconfirmed upstream): the last PONG dates the last adoption.
func TestClusterJoinHundredThousandClaims(t *testing.T) {
	// Serial (no t.Parallel): it bounds the hand-off's time.
	if testing.Short() {
		t.Skip("100,000 claims: not in -short")
	}
	nodes := startCluster(t)
	logs := map[string]*logDrain{}
	for id, n := range nodes {
		logs[id] = drainLogs(n.batonProc)
	}
	const sessions, perSession, lease = 100, 1000, 10 * time.Second
	owners := []string{"n1", "n2", "n3"}
	// Names for each owner, and the sessions, on the owners.
	byOwner := map[string][]string{}
	for i := 0; len(byOwner["n1"]) < sessions*perSession/3+perSession || len(byOwner["n2"]) < sessions*perSession/3+perSession || len(byOwner["n3"]) < sessions*perSession/3+perSession; i++ {
		name := fmt.Sprintf("bulk/%d", i)
		o := threeRing.Owner(name)
		byOwner[o] = append(byOwner[o], name)
	}
	// Wait until each owner grants (a new cluster warms up).
	for _, id := range owners {
		s := opstest.DialV2(t, nodes[id].addr, lease, "probe")
		v2Claim(t, s, nodes[id].addr, byOwner[id][len(byOwner[id])-1])
		s.Close()
	}
	start := time.Now()
	type sess struct {
		c     net.Conn
		names []string
	}
	var ss []sess
	used := map[string]int{}
	for i := range sessions {
		id := owners[i%3]
		c := opstest.DialV2(t, nodes[id].addr, lease, fmt.Sprint("bulk-", i))
		names := byOwner[id][used[id] : used[id]+perSession]
		used[id] += perSession
		var b []byte
		for k, name := range names {
			b = protocol.AppendClaim(b, uint32(k+1), protocol.ModeExclusive, 0, 0, name)
		}
		c.Send(b)
		ss = append(ss, sess{c.Conn, names})
	}
	for _, s := range ss {
		for range s.names {
			s.c.SetReadDeadline(time.Now().Add(opstest.Timeout))
			f, err := protocol.ReadServerFrameV2(s.c)
			if err != nil || f.Type != protocol.TypeGranted {
				t.Fatalf("bulk claim: %v %v", f, err)
			}
		}
	}
	t.Logf("%d claims held in %d sessions (%v to take them)", sessions*perSession, sessions, time.Since(start).Round(time.Millisecond))
	// Every session pings, and counts what it is told it lost.
	var revoked, pongs atomic.Int64
	var lastRevoked, lastPong atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range ss {
		frames := readAll(s.c, true)
		wg.Go(func() {
			tick := time.NewTicker(lease / 5)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					s.c.SetWriteDeadline(time.Now().Add(time.Second))
					s.c.Write(protocol.AppendPing(nil, 1))
				case f, ok := <-frames:
					if !ok || f.err != nil {
						return
					}
					if f.v2.Type == protocol.TypePong && f.v2.Seq == 2 {
						pongs.Add(1)
						lastPong.Store(f.at.UnixNano())
					}
					if f.v2.Type == protocol.TypeRevoked {
						if f.v2.Code != protocol.CodeNotOwner {
							t.Errorf("REVOKED code 0x%02x", uint8(f.v2.Code))
						}
						revoked.Add(1)
						lastRevoked.Store(f.at.UnixNano())
					}
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	moving := 0
	for _, s := range ss {
		for _, name := range s.names {
			if fourRing.Owner(name) == "n4" {
				moving++
			}
		}
	}

	joinStart := time.Now()
	n4 := startNode(t, "n4", nodes["n1"].admin)
	logs["n4"] = drainLogs(n4.batonProc)
	for _, n := range []*clusterProc{nodes["n1"], nodes["n2"], nodes["n3"], n4} {
		waitStatus(t, n, "a ring of 4", func(st cluster.Status) bool { return len(st.Ring) == 4 })
	}
	for _, s := range ss {
		s.c.SetWriteDeadline(time.Now().Add(time.Second))
		s.c.Write(protocol.AppendPing(nil, 2))
	}
	var proposed, committed time.Time
	for _, d := range logs {
		for _, r := range d.find("planned change proposed") {
			if v, _ := r["member"].(string); v == "n4" {
				proposed = logTime(t, r)
			}
		}
		for _, r := range d.find("planned change: every prior owner handed over; committing") {
			if v, _ := r["member"].(string); v == "n4" {
				committed = logTime(t, r)
			}
		}
	}
	if proposed.IsZero() || committed.IsZero() {
		t.Fatalf("the join was not handed over in full (proposed %v, committed %v)", proposed, committed)
	}
	for _, id := range owners {
		for _, r := range logs[id].find("planned change: names handed over") {
			t.Logf("%s handed its names over in %v", id, time.Duration(r["took"].(float64)).Round(time.Millisecond))
		}
	}
	deadline := time.Now().Add(opstest.Timeout)
	for pongs.Load() < sessions && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	took := committed.Sub(proposed)
	adopted := time.Unix(0, lastPong.Load()).Sub(proposed)
	t.Logf("join with %d held claims: %d on names moving to n4, %d revoked; proposal to commit of the ring %v; n4 in every ring %v after its start; "+
		"every session answered again (its moved claims adopted at n4) %v after the proposal",
		sessions*perSession, moving, revoked.Load(), took.Round(time.Millisecond), time.Since(joinStart).Round(time.Millisecond),
		adopted.Round(time.Millisecond))
	if revoked.Load() != 0 {
		t.Errorf("%d claims revoked (last %v after the proposal), want none: they continue at n4", revoked.Load(),
			time.Unix(0, lastRevoked.Load()).Sub(proposed).Round(time.Millisecond))
	}
	if n := pongs.Load(); n != sessions {
		t.Errorf("%d of %d sessions answered a PING sent after the join", n, sessions)
	}
	if took > 3*time.Second {
		t.Errorf("the hand-off of %d claims took %v (target under 1 s, bound 3 s for a loaded machine)", moving, took)
	}
}

// startNodeAt starts node id on data directory dir and Raft address
// raftAddr (both kept across restarts); join as startNode, or "" with
// bootstrap false for a restart.
func startNodeAt(t *testing.T, id, dir, raftAddr, join string, bootstrap bool) *clusterProc {
	t.Helper()
	args := []string{"-node-id", id, "-listen", "127.0.0.1:0", "-raft-listen", raftAddr,
		"-admin-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0", "-data-dir", dir}
	switch {
	case bootstrap:
		args = append(args, "-bootstrap")
	case join != "":
		args = append(args, "-join", join)
	}
	p := startBaton(t, args...)
	rec := p.waitLog(t, "baton listening")
	c := &clusterProc{batonProc: p, id: id}
	c.addr, _ = rec["addr"].(string)
	c.admin, _ = rec["admin_addr"].(string)
	c.ops, _ = rec["ops_addr"].(string)
	return c
}

// startRestartable starts nodes n1, n2 and n3 on data directories and
// Raft addresses that a restart keeps, and waits for their ring of three.
func startRestartable(t *testing.T) (ids []string, dirs, rafts map[string]string, nodes map[string]*clusterProc, logs map[string]*logDrain) {
	t.Helper()
	base := t.TempDir()
	ids = []string{"n1", "n2", "n3"}
	dirs, rafts = map[string]string{}, map[string]string{}
	for _, id := range ids {
		dirs[id], rafts[id] = filepath.Join(base, id), freeport.Addr(t)
	}
	nodes = map[string]*clusterProc{}
	nodes["n1"] = startNodeAt(t, "n1", dirs["n1"], rafts["n1"], "", true)
	nodes["n2"] = startNodeAt(t, "n2", dirs["n2"], rafts["n2"], nodes["n1"].admin, false)
	nodes["n3"] = startNodeAt(t, "n3", dirs["n3"], rafts["n3"], nodes["n2"].admin, false)
	logs = map[string]*logDrain{}
	for _, id := range ids {
		waitStatus(t, nodes[id], "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
		logs[id] = drainLogs(nodes[id].batonProc)
	}
	return ids, dirs, rafts, nodes, logs
}

// A rolling restart of all three nodes, one at a time, under 30 clients:
// SIGTERM is a planned stop (the node hands its names over and leaves the
// ring, staying a voter), the node started again on its data directory
// comes back into the ring by itself; never two holders, tokens
// increasing; no version 2 claim revoked: those whose session is on
// another node continue through the new owners (counted), those whose
// session is on the stopping node end with it (the session's ERROR 0x01;
// docs/cluster.md); every other claim that ended other than by its
// client's release was told so (version 1: ERROR 0x01).
func TestClusterRollingRestart(t *testing.T) {
	t.Parallel()
	ids, dirs, rafts, nodes, logs := startRestartable(t)
	var names []string
	for i := range 16 {
		names = append(names, fmt.Sprintf("roll-%d", i))
	}
	var addrs atomic.Pointer[[]string]
	setAddrs := func(except string) {
		var a []string
		for _, id := range ids {
			if id != except {
				a = append(a, nodes[id].addr)
			}
		}
		addrs.Store(&a)
	}
	setAddrs("")
	g := &grantLog{}
	ld := startLoad(t, 30, names, func() []string { return *addrs.Load() }, g, func(i int) (v2, long bool) {
		return i%3 == 2, i%6 == 5
	})
	defer ld.stop()
	waitGrants := func(what string, n int64) { t.Helper(); ld.waitGrants(what, n) }
	waitGrants("warm-up", 100)
	type change struct{ from, to time.Time }
	var changes []change
	for _, id := range ids {
		setAddrs(id)
		start := time.Now()
		if err := nodes[id].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-nodes[id].exited
		if code := nodes[id].cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited with %d after SIGTERM", id, code)
		}
		if len(logs[id].find("names handed over; left the ring until this node starts again")) == 0 {
			t.Fatalf("%s stopped without handing its names over", id)
		}
		changes = append(changes, change{start, time.Now()})
		t.Logf("%s handed over and stopped in %v", id, time.Since(start).Round(time.Millisecond))
		for _, o := range ids {
			if o != id {
				waitStatus(t, nodes[o], "a ring without "+id, func(st cluster.Status) bool { return len(st.Ring) == 2 })
			}
		}
		waitGrants("with "+id+" stopped", g.n.Load()+50)
		// The node starts again at once, within the lease for which the
		// claims of its own plain sessions stay kept at their names' new
		// owners: the change that gives its names back hands them over
		// still kept, and holds nobody's moving claims up.
		start = time.Now()
		changes = append(changes, change{start, time.Time{}})
		nodes[id] = startNodeAt(t, id, dirs[id], rafts[id], "", false)
		logs[id] = drainLogs(nodes[id].batonProc)
		for _, o := range ids {
			waitStatus(t, nodes[o], "a ring with "+id+" again", func(st cluster.Status) bool { return len(st.Ring) == 3 })
		}
		changes[len(changes)-1].to = time.Now()
		t.Logf("%s back in the ring %v after its start", id, time.Since(start).Round(time.Millisecond))
		setAddrs("")
		waitGrants("with "+id+" back", g.n.Load()+50)
	}
	ld.stop()
	g.check(t)
	var lost1, lost2, v2, continued int
	for _, h := range g.hs {
		if h.v2 {
			v2++
			for _, c := range changes {
				if !h.lost && spans(h, c.from, c.to) {
					continued++
					break
				}
			}
		}
		switch {
		case !h.lost:
		case h.v2 && h.code == protocol.CodeShuttingDown:
			// The session was on the stopping node: it ends with its
			// connection (the session's ERROR 0x01); its claims are not
			// continued (docs/cluster.md).
			lost2++
		case !h.v2 && h.code == protocol.CodeShuttingDown:
			lost1++
		default:
			t.Errorf("%s lost token %#x with code 0x%02x (v2 %v)", h.name, h.token, uint8(h.code), h.v2)
		}
	}
	t.Logf("%d holdings (%d v2) over three restarts, no two holders; claims ended by the moves: %d v1 (ERROR 0x01), "+
		"%d v2 whose session was on the stopping node (its ERROR 0x01), no v2 REVOKED; %d v2 holdings held across a change with their tokens",
		len(g.hs), v2, lost1, lost2, continued)
}

// A node stopped and started again at once, while a plain version 2
// session on it held one of its names: that claim stays kept at the
// name's new owner for the lease (its client may still believe), and
// the change that gives the node its names back hands it over still
// kept instead of waiting for it to expire. So the node is back in the
// ring well within the lease, a claim relayed by another node on
// another of its names continues through both changes (not REVOKED at
// half the lease, as when that change waited), and the kept name is
// granted to a waiter only once the lease has passed since the stop.
func TestClusterRestartSoonAfterStop(t *testing.T) {
	// Serial (no t.Parallel): it bounds the time the node takes to be back in the ring.
	ids, dirs, rafts, nodes, _ := startRestartable(t)
	const lease = 10 * time.Second
	kept, relayed := nameOwnedBy(t, "n1", "soon-kept"), nameOwnedBy(t, "n1", "soon-relayed")
	// A plain session on n1 holds kept; one on n2 holds relayed through n1.
	keptTok, _, _, stopKept := v2Holder(t, nodes["n1"].addr, kept, lease)
	defer stopKept()
	relTok, relRevoked, relRelease, stopRel := v2Holder(t, nodes["n2"].addr, relayed, lease)
	defer stopRel()

	stopped := time.Now()
	if err := nodes["n1"].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-nodes["n1"].exited
	if code := nodes["n1"].cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("n1 exited with %d after SIGTERM", code)
	}
	// A waiter for kept, on n3: granted only once the lease has passed.
	w := opstest.DialV2(t, nodes["n3"].addr, lease, "waiter")
	w.Claim(1, protocol.ModeExclusive, 0, kept)
	frames := readAll(w.Conn, true)

	started := time.Now()
	nodes["n1"] = startNodeAt(t, "n1", dirs["n1"], rafts["n1"], "", false)
	drainLogs(nodes["n1"].batonProc)
	for _, id := range ids {
		waitStatus(t, nodes[id], "a ring with n1 again", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	}
	back := time.Since(started)
	t.Logf("n1 stopped %v after the SIGTERM, back in the ring %v after its start (lease %v)",
		started.Sub(stopped).Round(time.Millisecond), back.Round(time.Millisecond), lease)
	if back > lease/2 {
		t.Errorf("n1 back in the ring %v after its start: the change waited for the kept claim (lease %v)", back, lease)
	}

	var granted time.Time
	var tok uint64
	ping := time.NewTicker(time.Second)
	defer ping.Stop()
	// The waiter's claim moves twice while it waits. A claim revoked
	// (0x03) is claimed again, as a client does; counted, not failed.
	// (About one run in twenty did, when a claim that reached a prior
	// owner after its export was revoked there: it now follows its name,
	// server/relay2hold.go, rehold, and fourteen runs under load had none.)
	claim, again := uint32(1), 0
	for deadline := time.After(lease + opstest.Timeout); granted.IsZero(); {
		select {
		case f, ok := <-frames:
			if !ok || f.err != nil {
				t.Fatalf("waiter: connection ended: %v", f.err)
			}
			switch {
			case (f.v2.Type == protocol.TypeGranted || f.v2.Type == protocol.TypePromoted) && f.v2.Claim == claim:
				granted, tok = f.at, f.v2.Token
			case f.v2.Type == protocol.TypeQueued || f.v2.Type == protocol.TypePong:
			case (f.v2.Type == protocol.TypeRevoked || f.v2.Type == protocol.TypeRefused) && f.v2.Code == protocol.CodeNotOwner && f.v2.Claim == claim:
				t.Logf("waiter: %v %v after the stop; claiming again", f.v2, f.at.Sub(stopped).Round(time.Millisecond))
				again++
				claim++
				time.Sleep(100 * time.Millisecond)
				w.Claim(claim, protocol.ModeExclusive, 0, kept)
			default:
				t.Fatalf("waiter: %v", f.v2)
			}
		case <-ping.C:
			w.SetWriteDeadline(time.Now().Add(time.Second))
			w.Write(protocol.AppendPing(nil, 1))
		case <-deadline:
			t.Fatal("the waiter was not granted the kept name")
		}
	}
	t.Logf("the waiter was granted %s %v after the stop, token %#x (the ended session's %#x), after %d claims again",
		kept, granted.Sub(stopped).Round(time.Millisecond), tok, keptTok, again)
	if granted.Sub(stopped) < lease {
		t.Errorf("the waiter was granted %v after the stop, within the ended session's lease %v", granted.Sub(stopped), lease)
	}
	if tok <= keptTok {
		t.Errorf("granted with token %#x, not above the ended session's %#x", tok, keptTok)
	}
	if r := relRevoked(); r != nil {
		t.Errorf("the relayed claim on %s (token %#x) was revoked: %v", relayed, relTok, r.v2)
	}
	relRelease()
}
