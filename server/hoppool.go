package server

import (
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
)

// Pooled hop connections: a node keeps a few idle connections, opened
// ahead, to each owner it relays to, so a relayed ACQUIRE goes out at once
// instead of after a TCP (and TLS) handshake. Sizing and ageing are
// clustercore's HopPool; this file holds the connections, their watchers,
// the fillers and the sweep timers. A hop goes back to the pool only on the
// owner's hopAck, and an idle one never outlives half the owner's
// io-timeout (clustercore.HopMaxAge).
// The rule is "The hop pool" in docs/design/2026-12-07-cluster-relay.md;
// how the watcher hands over and a dead hop is retried under the relay is
// in docs/design/2026-12-07-cluster-relay.md#serverhoppoolgo.

// HopOwners is an optional interface of a Router: the protocol addresses
// of the owners it may relay to now (the ring's other members). A server
// whose Router implements it keeps no idle hop connection to any other
// address.
type HopOwners interface {
	HopOwners() []string
}

// hopPools are a Server's idle hop connections, by owner address.
type hopPools struct {
	mu     sync.Mutex
	owners map[string]*hopPool
	closed bool
	wg     sync.WaitGroup // fillers, watchers and armed sweeps
	idle   time.Duration  // clustercore.HopPoolIdle unless a test sets it
}

// hopPolicy is the bounds of srv's hop pools now.
func (srv *Server) hopPolicy() clustercore.HopPolicy {
	return clustercore.HopPolicy{MaxAge: clustercore.HopMaxAge(srv.IOTimeout), IdleAfter: srv.hops.idle, RetryAfter: holdRetry}
}

// hopPool is one owner's idle hop connections: the policy's state, and
// the timer of its next sweep when armed.
type hopPool struct {
	core  clustercore.HopPool[*idleHop]
	timer *time.Timer
}

type idleHop struct {
	c     net.Conn
	state atomic.Int32    // watchState
	relay chan *pooledHop // the relay that took it, sent once
}

// watchState is an idle hop connection's state: watched until either its
// watcher's read returns first (dead: the owner closed it or wrote before
// any ACQUIRE) or a relay takes it (taken: the watcher's read is the
// relay's first read of the owner's answer).
const (
	hopWatched int32 = iota
	hopDead
	hopTaken
)

// relayBuf is the size of the buffer the owner's bytes are copied through
// to the client.
const relayBuf = 512

// watchHop reads an idle connection. If the owner closes it, resets it or
// sends something before a relay took it, it is dead, out of the pool and
// closed. If a relay took it, what the read returned is the owner's
// answer (or the hop's failure): the watcher becomes the relay's copier
// (pooledHop.copyBack) and runs until the hop ends.
func (srv *Server) watchHop(addr string, h *idleHop) {
	p := &srv.hops
	buf := make([]byte, relayBuf)
	n, err := h.c.Read(buf)
	if h.state.CompareAndSwap(hopWatched, hopDead) {
		defer p.wg.Done()
		p.mu.Lock()
		if pool := p.owners[addr]; pool != nil {
			pool.core.Remove(h)
		}
		p.mu.Unlock()
		h.c.Close()
		return
	}
	// Taken: the relay's session waits for its copier, not the pools.
	ph := <-h.relay
	p.wg.Done()
	ph.pending, ph.pendingErr, ph.pendingConn = buf[:n], err, h.c
	ph.copyBack(buf)
}

// hopConn opens the hop to the owner at addr: a live pooled connection if
// there is one, else a fresh one from dialOwner.
func (srv *Server) hopConn(addr string) (net.Conn, error) {
	if h := srv.takeHop(addr); h != nil {
		ph := &pooledHop{srv: srv, addr: addr, c: h.c, copier: make(chan func([]byte), 1)}
		h.relay <- ph // buffered: the watcher reads it once its read returns
		return ph, nil
	}
	return srv.dialOwner(addr)
}

// takeHop takes the oldest live idle connection to addr, or nil. An
// empty pool is filled at once; one that gave a connection is refilled
// once the owner has answered on it (refill; clustercore's
// HopPool.Refill says when).
func (srv *Server) takeHop(addr string) *idleHop {
	p := &srv.hops
	now := time.Now()
	p.mu.Lock()
	if p.closed || srv.inShutdown.Load() {
		p.mu.Unlock()
		return nil
	}
	if p.owners == nil {
		p.owners = map[string]*hopPool{}
	}
	pool := p.owners[addr]
	if pool == nil {
		pool = &hopPool{}
		p.owners[addr] = pool
	}
	pol := srv.hopPolicy()
	stale := pool.core.Use(now, pol)
	var h *idleHop
	for h == nil {
		next, ok := pool.core.Next()
		if !ok {
			break
		}
		if next.state.CompareAndSwap(hopWatched, hopTaken) {
			h = next
		} // else its watcher found it dead and closes it
	}
	if h != nil {
		pool.core.Took()
	} else if pool.core.Missed(now, pol) {
		srv.startFillLocked(addr, pool)
	}
	p.mu.Unlock()
	closeIdle(stale)
	return h
}

// refill has the pool of addr filled if it is low, after a relay on one
// of its connections got its answer.
func (srv *Server) refill(addr string) {
	p := &srv.hops
	p.mu.Lock()
	if pool := p.owners[addr]; pool != nil && !p.closed && pool.core.Refill(time.Now(), srv.hopPolicy()) {
		srv.startFillLocked(addr, pool)
	}
	p.mu.Unlock()
}

// startFillLocked starts a filler for pool, which its policy has counted
// as started. p.mu is held.
func (srv *Server) startFillLocked(addr string, pool *hopPool) {
	srv.hops.wg.Add(1)
	go srv.fillHops(addr, pool)
}

// fillHops dials idle connections to addr, one at a time, as long as its
// pool's policy wants more (HopPool.FillNext).
func (srv *Server) fillHops(addr string, pool *hopPool) {
	p := &srv.hops
	defer p.wg.Done()
	for {
		kept := srv.hopOwnerKept(addr)
		p.mu.Lock()
		if !pool.core.FillNext(time.Now(), srv.hopPolicy(), !p.closed && p.owners[addr] == pool && kept) {
			srv.armLocked(addr, pool)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		c, err := srv.dialOwner(addr)
		h := &idleHop{c: c, relay: make(chan *pooledHop, 1)}
		p.mu.Lock()
		if !pool.core.Dialled(time.Now(), srv.hopPolicy(), h, err == nil, !p.closed && p.owners[addr] == pool) {
			if err != nil {
				srv.Logger.Debug("cannot open an idle hop to an owner", "owner_addr", addr, "err", err)
			}
			srv.armLocked(addr, pool)
			p.mu.Unlock()
			if c != nil {
				c.Close()
			}
			return
		}
		p.wg.Add(1)
		go srv.watchHop(addr, h)
		srv.armLocked(addr, pool)
		p.mu.Unlock()
	}
}

// armLocked sets pool's sweep for the time its policy says (HopPool.Arm),
// unless one is armed no later. p.mu is held.
func (srv *Server) armLocked(addr string, pool *hopPool) {
	p := &srv.hops
	if p.closed || p.owners[addr] != pool {
		return
	}
	at, arm := pool.core.Arm(srv.hopPolicy())
	if !arm {
		return
	}
	if pool.timer != nil {
		if !pool.timer.Stop() {
			// Its sweep is under way: that sweep waits for p.mu and
			// then arms the next one from what it finds.
			return
		}
		p.wg.Done() // the sweep stopped will not run
	}
	p.wg.Add(1)
	pool.timer = time.AfterFunc(time.Until(at), func() { srv.sweepHops(addr, pool) })
}

// sweepHops runs pool's sweep (HopPool.Sweep): it closes what the policy
// drops, starts a filler, and arms the next sweep or forgets the pool.
func (srv *Server) sweepHops(addr string, pool *hopPool) {
	p := &srv.hops
	defer p.wg.Done()
	kept := srv.hopOwnerKept(addr)
	now := time.Now()
	p.mu.Lock()
	pool.timer = nil
	if p.closed || p.owners[addr] != pool {
		p.mu.Unlock()
		return
	}
	sw := pool.core.Sweep(now, srv.hopPolicy(), kept)
	if sw.Forget {
		delete(p.owners, addr)
	}
	if !sw.Drained {
		if sw.Fill {
			srv.startFillLocked(addr, pool)
		}
		srv.armLocked(addr, pool)
	}
	p.mu.Unlock()
	closeIdle(sw.Close)
}

// hopOwnerKept tells whether the Router still lists addr among the owners
// (true when it does not say).
func (srv *Server) hopOwnerKept(addr string) bool {
	o, ok := srv.Router.(HopOwners)
	return !ok || slices.Contains(o.HopOwners(), addr)
}

// closeHops closes every idle hop connection and waits for the fillers
// and sweeps (a filler's dial is bounded by dialTimeout). Pools are not
// refilled after it.
func (srv *Server) closeHops() {
	p := &srv.hops
	p.mu.Lock()
	p.closed = true
	var idle []*idleHop
	for _, pool := range p.owners {
		idle = append(idle, pool.core.Drain()...)
		if pool.timer != nil && pool.timer.Stop() {
			p.wg.Done() // the sweep will not run
		}
		pool.timer = nil
	}
	p.owners = nil
	p.mu.Unlock()
	closeIdle(idle)
	p.wg.Wait()
}

// keepHop puts up, a hop whose claim the owner has acknowledged ended
// (hopAck), back into the pool of addr as an idle connection born at
// born (before hopClientGone went out, so before the owner's io-timeout
// for the next header began), watched as a new one is. It closes it
// instead if the pool is forgotten or closed, its owner has left, or
// the pool's policy does not take it back (HopPool.Return).
func (srv *Server) keepHop(addr string, up net.Conn, born time.Time) {
	c := up
	if ph, ok := up.(*pooledHop); ok {
		c = ph.detach()
	}
	c.SetWriteDeadline(time.Time{})
	kept := srv.hopOwnerKept(addr)
	p := &srv.hops
	p.mu.Lock()
	pool := p.owners[addr]
	h := &idleHop{c: c, relay: make(chan *pooledHop, 1)}
	if !kept || p.closed || srv.inShutdown.Load() || pool == nil ||
		!pool.core.Return(time.Now(), srv.hopPolicy(), h, born) {
		p.mu.Unlock()
		c.Close()
		return
	}
	srv.hopsKept.Add(1)
	p.wg.Add(1)
	go srv.watchHop(addr, h)
	srv.armLocked(addr, pool)
	p.mu.Unlock()
}

// hopPoolLen reports how many idle hop connections the server keeps to
// the owner at addr now.
func (srv *Server) hopPoolLen(addr string) int {
	p := &srv.hops
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool := p.owners[addr]; pool != nil {
		return pool.core.Len()
	}
	return 0
}

// hopPoolIdle returns the number of idle hop connections this node keeps
// open to owners now, in all its pools.
func (srv *Server) hopPoolIdle() (idle int) {
	p := &srv.hops
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pool := range p.owners {
		idle += pool.core.Len()
	}
	return idle
}

func closeIdle(hs []*idleHop) {
	for _, h := range hs {
		h.c.Close()
	}
}

// pooledHop is a hop taken from a pool. If its connection fails before
// the owner has sent a byte, it dials afresh and sends what the relay
// wrote again, as clustercore.HopReplay decides; the relay does not
// notice.
type pooledHop struct {
	srv  *Server
	addr string

	wmu sync.Mutex // serializes writes and the swap to a fresh connection

	mu     sync.Mutex // guards the fields below
	c      net.Conn
	replay clustercore.HopReplay // what a fresh dial sends again, and whether one may

	// Owned by the reader (the watcher, turned copier).
	pending     []byte   // what the watcher's read returned, not yet read
	pendingErr  error    // and its error
	pendingConn net.Conn // the connection it read
	refillDue   bool     // the owner answered: refill the pool at the next read
	copier      chan func(buf []byte)
}

// startCopy has the watcher of h's connection run copy, which reads the
// owner's bytes from h and writes them to the client, once its pending
// read returns; copy is handed buf, whose first bytes are pending.
func (h *pooledHop) startCopy(copy func(buf []byte)) {
	h.copier <- copy
}

// copyBack runs the relay's copier on the watcher's goroutine.
func (h *pooledHop) copyBack(buf []byte) {
	(<-h.copier)(buf)
}

func (h *pooledHop) conn() net.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

// Read reads from the owner; a failure before its first byte swaps in a
// fresh connection.
//
// The pool is refilled after the owner's first bytes, at the next read:
// once the copier has written them to the client, so that a filler
// started then does not delay the answer.
func (h *pooledHop) Read(b []byte) (int, error) {
	if h.refillDue {
		h.refillDue = false
		h.srv.refill(h.addr)
	}
	for {
		var c net.Conn
		var n int
		var err error
		if h.pendingConn != nil {
			c, err = h.pendingConn, h.pendingErr
			n = copy(b, h.pending)
			if h.pending = h.pending[n:]; len(h.pending) == 0 {
				h.pendingConn, h.pendingErr = nil, nil
			} else {
				err = nil
			}
		} else {
			c = h.conn()
			n, err = c.Read(b)
		}
		if n > 0 {
			h.mu.Lock()
			first := h.replay.Answer()
			h.mu.Unlock()
			if first {
				h.refillDue = true
			}
			return n, err
		}
		if err == nil {
			return 0, nil
		}
		h.wmu.Lock()
		ok := h.redialLocked(c, err)
		h.wmu.Unlock()
		if !ok {
			return 0, err
		}
	}
}

// Write writes to the owner, recording b until the owner answers; a
// failure before then swaps in a fresh connection.
func (h *pooledHop) Write(b []byte) (int, error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	c := h.c
	h.replay.Wrote(b)
	h.mu.Unlock()
	n, err := c.Write(b)
	if err != nil && h.redialLocked(c, err) {
		return len(b), nil // the recording, b included, went out afresh
	}
	return n, err
}

// redialLocked replaces failed, the current connection, by a fresh one
// and sends it the recording, if HopReplay allows. It reports whether the caller may go on (on the
// new connection, or on one another caller swapped in). h.wmu is held.
func (h *pooledHop) redialLocked(failed net.Conn, err error) bool {
	h.mu.Lock()
	if h.c != failed {
		h.mu.Unlock()
		return true // another caller already swapped it
	}
	replay, ok := h.replay.Redial(errors.Is(err, os.ErrDeadlineExceeded))
	h.mu.Unlock()
	if !ok {
		return false
	}
	h.srv.Logger.Debug("pooled hop to an owner failed before its answer; dialing afresh", "owner_addr", h.addr, "err", err)
	failed.Close()
	fresh, derr := h.srv.dialOwner(h.addr)
	if derr != nil {
		return false
	}
	fresh.SetWriteDeadline(time.Now().Add(h.srv.IOTimeout))
	if _, werr := fresh.Write(replay); werr != nil {
		fresh.Close()
		return false
	}
	fresh.SetWriteDeadline(time.Time{})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.replay.Closed() {
		fresh.Close()
		return false
	}
	h.c = fresh
	return true
}

// Close closes the hop; no redial follows. A hop closed before the
// owner answered has its pool refilled now.
func (h *pooledHop) Close() error {
	h.mu.Lock()
	answered := h.replay.Close()
	err := h.c.Close()
	h.mu.Unlock()
	if !answered {
		h.srv.refill(h.addr)
	}
	return err
}

// detach ends the hop's use by its relay without closing its
// connection, which it returns (keepHop).
func (h *pooledHop) detach() net.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.replay.Close()
	return h.c
}

func (h *pooledHop) LocalAddr() net.Addr                { return h.conn().LocalAddr() }
func (h *pooledHop) RemoteAddr() net.Addr               { return h.conn().RemoteAddr() }
func (h *pooledHop) SetDeadline(t time.Time) error      { return h.conn().SetDeadline(t) }
func (h *pooledHop) SetReadDeadline(t time.Time) error  { return h.conn().SetReadDeadline(t) }
func (h *pooledHop) SetWriteDeadline(t time.Time) error { return h.conn().SetWriteDeadline(t) }
