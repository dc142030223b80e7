package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// hopDialer is a relay's DialOwner that counts dials and can refuse them
// or hand out dead connections.
type hopDialer struct {
	dials   atomic.Int64
	refuse  atomic.Bool // fail every dial
	deadOne atomic.Bool // hand out connections that fail on their first write
}

// deadOnWrite is a connection that looks open (a read waits for its
// deadline) and fails when written to: an owner that died between the
// relay's taking it and writing to it.
type deadOnWrite struct {
	net.Conn
	peer net.Conn
}

func (c *deadOnWrite) Write([]byte) (int, error) { return 0, syscall.ECONNRESET }
func (c *deadOnWrite) Close() error {
	c.peer.Close()
	return c.Conn.Close()
}

var errRefused = errors.New("test: dial refused")

func (d *hopDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.dials.Add(1)
	if d.refuse.Load() {
		return nil, errRefused
	}
	if d.deadOne.Load() {
		a, b := net.Pipe()
		return &deadOnWrite{Conn: a, peer: b}, nil
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

// hopRouter forwards every name to owner and lists the owners it may
// relay to (server.HopOwners).
type hopRouter struct {
	owner  string
	mu     sync.Mutex
	owners []string
}

func (r *hopRouter) Route(string, time.Duration, bool) server.Route {
	return server.Route{Action: server.RouteForward, Addr: r.owner}
}
func (r *hopRouter) RecordLease(time.Duration) bool { return true }
func (r *hopRouter) HopOwners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.owners)
}
func (r *hopRouter) setOwners(o []string) {
	r.mu.Lock()
	r.owners = o
	r.mu.Unlock()
}

// startHopPair starts an owner and a relay that forwards every name to it
// through d.
func startHopPair(t *testing.T, d *hopDialer, ownerOpts, relayOpts []func(*server.Server)) (owner, relay *testServer, r *hopRouter) {
	t.Helper()
	owner = startServer(t, append([]func(*server.Server){func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	}}, ownerOpts...)...)
	r = &hopRouter{owner: owner.addr, owners: []string{owner.addr}}
	relay = startServer(t, append([]func(*server.Server){func(s *server.Server) {
		s.Router = r
		s.DialOwner = d.dial
	}}, relayOpts...)...)
	return owner, relay, r
}

// waitUntil polls cond every few milliseconds for up to limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still not %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fillPool relays one acquire so that the relay fills its pool to the
// owner, releases it, and waits for the pool to be full.
func fillPool(t *testing.T, owner, relay *testServer, name string) {
	t.Helper()
	a := relay.dial(t)
	a.mustOwn(name, longLease)
	a.close()
	waitUntil(t, waitLimit, "a full pool", func() bool { return server.HopPoolLen(relay.Server, owner.addr) == server.HopPoolSize })
}

// A relayed acquire goes out on a pooled connection: with every new dial
// to the owner refused, it is still served, by the owner, under the
// client's address. Shutting the relay down closes its idle connections.
func TestHopPoolRelay(t *testing.T) {
	var d hopDialer
	// Long io-timeouts: nothing but the relay's shutdown closes the idle
	// connections within the test.
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(time.Minute)}, []func(*server.Server){withIOTimeout(time.Minute), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	if n := owner.Sessions(); n > server.HopPoolSize+1 {
		t.Fatalf("owner has %d connections, want at most the pool's %d and one relayed", n, server.HopPoolSize)
	}
	d.refuse.Store(true)
	dials := d.dials.Load()
	b := relay.dial(t)
	b.mustOwn("x", longLease)
	if l, ok := owner.Lock("x"); !ok || l.Holder.Peer.Addr != b.addr() {
		t.Fatalf("owner's lock x: %+v, %v; want held by the client's address %s", l, ok, b.addr())
	}
	t.Logf("relayed through a pooled connection; %d dials refused meanwhile (refills)", d.dials.Load()-dials)
	b.close()
	waitUntil(t, waitLimit, "x released at the owner", func() bool { _, ok := owner.Lock("x"); return !ok })

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := relay.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, waitLimit, "the owner without connections after the relay's shutdown", func() bool { return owner.Sessions() == 0 })
}

// A pooled connection that looked open while idle fails on its first
// write; the relay dials afresh and sends the hop header and ACQUIRE
// again, and the client never notices.
func TestHopPoolDeadConnRedials(t *testing.T) {
	var d hopDialer
	owner, relay, _ := startHopPair(t, &d, nil, nil)
	d.deadOne.Store(true)
	a := relay.dial(t) // its own fresh hop is dead too: whatever it gets
	a.mustWrite(acquireFrame("warm", longLease))
	waitUntil(t, waitLimit, "a full pool", func() bool { return server.HopPoolLen(relay.Server, owner.addr) == server.HopPoolSize })
	a.close()
	d.deadOne.Store(false)
	b := relay.dial(t)
	b.mustOwn("x", longLease)
	b.sendHeartbeat()
	if f := b.mustRead(); f.Type != protocol.TypeAcquired {
		t.Fatalf("heartbeat answered %v, want ACQUIRED", f)
	}
	if l, ok := owner.Lock("x"); !ok || l.Holder.Peer.Addr != b.addr() {
		t.Fatalf("owner's lock x: %+v, %v; want held by %s", l, ok, b.addr())
	}
}

// An owner restarted on its address: the pooled connections to the old
// process are dead (it sent them ERROR 0x01 and closed them); the relay
// closes them at once, so the owner's shutdown does not wait for it,
// dials the new process, and passes none of the old one's bytes to the
// client.
func TestHopPoolOwnerRestart(t *testing.T) {
	var d hopDialer
	owner, relay, _ := startHopPair(t, &d, nil, nil)
	fillPool(t, owner, relay, "warm")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	start := time.Now()
	if err := owner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The relay hangs up on the owner's ERROR 0x01 at once: the owner
	// does not wait out its 1s linger for each idle connection.
	took := time.Since(start)
	t.Logf("owner shut down in %v with %d idle connections from the relay", took, server.HopPoolSize)
	if took > 800*time.Millisecond {
		t.Fatalf("owner's shutdown took %v: it waited for the relay to hang up its idle connections", took)
	}
	waitUntil(t, waitLimit, "the dead connections out of the pool", func() bool { return server.HopPoolLen(relay.Server, owner.addr) == 0 })
	again := startOwnerAgain(t, owner.addr)
	// Every pooled connection is dead: each of the next acquires must
	// reach the new process, whichever connection it is given.
	for i := range server.HopPoolSize + 2 {
		c := relay.dial(t)
		name := "x" + string(rune('a'+i))
		c.mustOwn(name, longLease)
		if _, ok := again.Lock(name); !ok {
			t.Fatalf("acquire %d: not held at the restarted owner", i)
		}
	}
}

// Once the Router no longer lists an owner (it left the ring), its idle
// connections are closed and not replaced.
func TestHopPoolOwnerLeaves(t *testing.T) {
	var d hopDialer
	owner, relay, r := startHopPair(t, &d, []func(*server.Server){withIOTimeout(time.Minute)},
		[]func(*server.Server){withIOTimeout(time.Second), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	start := time.Now()
	r.setOwners(nil)
	waitUntil(t, waitLimit, "no idle connection to an owner that left", func() bool {
		return server.HopPoolLen(relay.Server, owner.addr) == 0 && owner.Sessions() == 0
	})
	t.Logf("pool closed %v after the owner left (oldest connection's age limit 500ms)", time.Since(start))
}

// A pool whose owner is not relayed to any more drains and is forgotten.
func TestHopPoolIdleDrains(t *testing.T) {
	var d hopDialer
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(time.Minute)},
		[]func(*server.Server){withIOTimeout(time.Minute), func(s *server.Server) { server.SetHopPoolIdle(s, 300*time.Millisecond) }})
	fillPool(t, owner, relay, "warm")
	start := time.Now()
	waitUntil(t, waitLimit, "an idle pool drained", func() bool {
		return server.HopPoolLen(relay.Server, owner.addr) == 0 && owner.Sessions() == 0
	})
	t.Logf("idle pool drained %v after it was full (idle limit 300ms)", time.Since(start))
}

// Pooled connections are replaced before the owner's io-timeout would
// close them: after they have all been replaced twice, a relay with every
// new dial refused is still served on one.
func TestHopPoolReplacedBeforeOwnerTimeout(t *testing.T) {
	var d hopDialer
	const timeout = 600 * time.Millisecond
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(timeout)},
		[]func(*server.Server){withIOTimeout(timeout), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	start := time.Now()
	base := d.dials.Load()
	waitUntil(t, waitLimit, "the pool replaced twice", func() bool { return d.dials.Load() >= base+2*server.HopPoolSize })
	t.Logf("%d replacements in %v (age limit %v, owner's io-timeout %v)", d.dials.Load()-base, time.Since(start), timeout/2, timeout)
	d.refuse.Store(true)
	b := relay.dial(t)
	b.mustOwn("x", longLease)
}

// A pool that an owner's outage emptied (its connections expired, every
// dial refused) and that a relay filled again once the owner was back is
// still replaced before the owner's io-timeout: its sweep is armed for
// its new connections' age limit, not left for when the pool would fall
// idle. (A sweep that fires late, on a loaded machine, and finds every
// connection expired empties the pool the same way.)
func TestHopPoolReplacedAfterOutage(t *testing.T) {
	var d hopDialer
	const timeout = 600 * time.Millisecond
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(timeout)},
		[]func(*server.Server){withIOTimeout(timeout), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	d.refuse.Store(true)
	waitUntil(t, waitLimit, "a pool emptied by the outage", func() bool { return server.HopPoolLen(relay.Server, owner.addr) == 0 })
	d.refuse.Store(false)
	// A relay to an empty pool has it filled, once the retry delay after
	// the last refused dial has passed: relay until it is full (to its
	// target, which the unused connections of the outage lowered).
	i := 0
	waitUntil(t, waitLimit, "the pool filled again after the outage", func() bool {
		if server.HopPoolLen(relay.Server, owner.addr) == 0 {
			c := relay.dial(t)
			c.mustOwn(fmt.Sprintf("after%d", i), longLease)
			c.close()
			i++
		}
		n := server.HopPoolLen(relay.Server, owner.addr)
		return n > 0 && n >= server.HopPoolTarget(relay.Server, owner.addr)
	})
	start := time.Now()
	base := d.dials.Load()
	refilled := int64(server.HopPoolLen(relay.Server, owner.addr))
	waitUntil(t, waitLimit, "the refilled pool replaced", func() bool { return d.dials.Load() >= base+refilled })
	t.Logf("refilled pool replaced %v after it was full (age limit %v)", time.Since(start), timeout/2)
	d.refuse.Store(true)
	b := relay.dial(t)
	b.mustOwn("x", longLease)
}

// A pool follows its use. Left unused, it keeps HopPoolLow connections
// warm instead of replacing all HopPoolSize of them each age limit; a
// burst of relays that finds it empty raises its target again, and the
// relays are all served.
func TestHopPoolFollowsUse(t *testing.T) {
	var d hopDialer
	const timeout = 600 * time.Millisecond // connections expire after 300 ms
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(timeout)},
		[]func(*server.Server){withIOTimeout(timeout), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	// The first sweep lowers the target; the connections filled with the
	// first expire by the next ones, milliseconds later.
	waitUntil(t, waitLimit, "the unused pool's target lowered, and the pool to it", func() bool {
		return server.HopPoolTarget(relay.Server, owner.addr) == server.HopPoolLow &&
			server.HopPoolLen(relay.Server, owner.addr) <= server.HopPoolLow
	})
	// Six age limits: the replacements of HopPoolLow connections, about
	// six times (24 dials); all HopPoolSize of them (96) before. The pool
	// never holds more than HopPoolLow meanwhile.
	base := d.dials.Load()
	most := 0
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		most = max(most, server.HopPoolLen(relay.Server, owner.addr))
	}
	dials := d.dials.Load() - base
	t.Logf("%d dials in 6 age limits of an unused pool (target %d), at most %d idle",
		dials, server.HopPoolTarget(relay.Server, owner.addr), most)
	if dials < 1 || dials > 7*server.HopPoolLow {
		t.Fatalf("%d dials in 6 age limits of an unused pool, want 1 to %d", dials, 7*server.HopPoolLow)
	}
	if most > server.HopPoolLow {
		t.Fatalf("an unused pool held %d connections, want at most %d", most, server.HopPoolLow)
	}
	waitUntil(t, waitLimit, "an unused pool keeping a connection warm", func() bool {
		return server.HopPoolLen(relay.Server, owner.addr) > 0
	})
	// A burst of 12 relays at once, more than the pool has: those that
	// find it empty dial for themselves and raise its target. Each holds
	// its claim until all have theirs. On a loaded machine the pool's
	// refill may keep up with one burst (then nobody found it empty and
	// the target rightly stays): up to three bursts.
	burst := func(round int) {
		var wg sync.WaitGroup
		results := make(chan error, 12)
		release := make(chan struct{})
		for i := range 12 {
			wg.Go(func() {
				c, err := relay.tryDial(t)
				if err != nil {
					results <- err
					return
				}
				defer c.close()
				if err := c.sendAcquire(fmt.Sprintf("burst%d-%d", round, i), longLease); err != nil {
					results <- err
					return
				}
				if f, err := c.read(waitLimit); err != nil || f.Type != protocol.TypeAcquired {
					results <- errors.Join(err, errors.New("want ACQUIRED, got "+f.Type.String()))
					return
				}
				results <- nil
				<-release
			})
		}
		var failed error
		for range 12 {
			failed = errors.Join(failed, <-results)
		}
		close(release)
		wg.Wait()
		if failed != nil {
			t.Fatal(failed)
		}
	}
	for round := range 3 {
		burst(round)
		if server.HopPoolTarget(relay.Server, owner.addr) > server.HopPoolLow {
			break
		}
	}
	if got := server.HopPoolTarget(relay.Server, owner.addr); got <= server.HopPoolLow {
		t.Fatalf("after three bursts of 12 relays at once on a pool of %d, its target is %d, want more", server.HopPoolLow, got)
	}
	t.Logf("target after a burst of 12 relays at once: %d", server.HopPoolTarget(relay.Server, owner.addr))
	// HopPoolIdle and OwnerDials, behind the node's metrics, count what
	// it keeps and what it opened (once no dial of a filler is under way).
	waitUntil(t, waitLimit, "HopPoolIdle and OwnerDials counting the pool and the dials", func() bool {
		return relay.HopPoolIdle() == server.HopPoolLen(relay.Server, owner.addr) && relay.OwnerDials() == d.dials.Load()
	})
}

// Many concurrent relays: the pool never holds more than its bound, the
// owner never has more connections than the relayed claims (open and
// closing) plus the pool, and once the clients are gone only the pool is
// left.
func TestHopPoolBounds(t *testing.T) {
	var d hopDialer
	owner, relay, _ := startHopPair(t, &d, []func(*server.Server){withIOTimeout(time.Minute)}, nil)
	fillPool(t, owner, relay, "warm")
	const clients = 24
	var (
		wg       sync.WaitGroup
		maxPool  atomic.Int64
		maxOwner atomic.Int64
		stop     = make(chan struct{})
		sampled  = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		for {
			if n := int64(server.HopPoolLen(relay.Server, owner.addr)); n > maxPool.Load() {
				maxPool.Store(n)
			}
			if n := int64(owner.Sessions()); n > maxOwner.Load() {
				maxOwner.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			for j := range 5 {
				c, err := relay.tryDial(t)
				if err != nil {
					errs <- err
					return
				}
				name := string(rune('a'+i)) + string(rune('a'+j))
				if err := c.sendAcquire(name, longLease); err != nil {
					errs <- err
					return
				}
				f, err := c.read(waitLimit)
				c.close()
				if err != nil || f.Type != protocol.TypeAcquired {
					errs <- errors.Join(err, errors.New("want ACQUIRED, got "+f.Type.String()))
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("largest pool %d (bound %d), most connections at the owner %d", maxPool.Load(), server.HopPoolSize, maxOwner.Load())
	if maxPool.Load() > server.HopPoolSize {
		t.Fatalf("pool held %d idle connections, bound %d", maxPool.Load(), server.HopPoolSize)
	}
	// Each client has at most one hop open and one closing (the owner
	// counts a connection until its session has finished).
	if maxOwner.Load() > 2*clients+server.HopPoolSize {
		t.Fatalf("owner had %d connections, want at most 2 x %d clients + %d pooled", maxOwner.Load(), clients, server.HopPoolSize)
	}
	waitUntil(t, waitLimit, "only the pool left at the owner", func() bool { return owner.Sessions() <= server.HopPoolSize })
}

// startOwnerAgain starts a new owner process on addr, the address of one
// that was closed: a relay's pooled connections to the old one are dead.
func startOwnerAgain(t *testing.T, addr string) *testServer {
	t.Helper()
	return startServerWrapped(t, func(ln net.Listener) net.Listener {
		ln.Close()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening again on the owner's address: %v", err)
		}
		return l
	}, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
}
