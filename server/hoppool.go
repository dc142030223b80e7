package server

import (
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pooled hop connections (docs/cluster.md, "Relaying a version 1
// connection").
//
// Opening the hop is most of what a relay costs over a direct acquire: a
// TCP handshake (and a TLS one, with TLS) before the hop header can go.
// So a node keeps a few idle hop connections, opened ahead with
// dialOwner, for each owner it relays to, and a relayed ACQUIRE takes one:
// the hop header and the ACQUIRE go out on it at once, and the relay adds
// only the extra hop of each frame.
//
// An idle hop connection has sent nothing, and the owner closes a
// connection whose first ACQUIRE has not arrived within its io-timeout of
// accept. A node therefore keeps a pooled connection for at most half its
// own io-timeout (the nodes of a cluster share -io-timeout) and then
// replaces it, as far as relays use them (hopPool.target), for as long as
// relays to that owner keep coming: pools are filled after a relay, and
// not refilled once their owner has not been relayed to for hopPoolIdle,
// nor when the Router (HopOwners) no longer lists it; their connections
// are then closed and the pool forgotten.
//
// An idle connection is watched: a goroutine reads it, so that the
// owner's close, a reset or anything the owner sends before an ACQUIRE
// (its ERROR 0x01 when it shuts down) closes it at once and takes it out
// of the pool; the owner then need not wait for this node to hang up.
// Taking a connection does not stop its watcher: the relay hands it the
// copying of the owner's bytes to the client, so the watcher's pending
// read returns the owner's answer and the watcher writes it on. A relayed
// ACQUIRE thus costs no wake-up of a goroutine to take the connection and
// no new goroutine to read it, only the read that any relay needs.
// Whether the watcher's read or the relay came first is settled by one
// compare-and-swap on the connection's state (watchState). One that
// still fails before the owner has sent a byte (it died between the watch
// and the relay) is replaced by a fresh dial under the relay's feet, and
// what was written to it is sent again: the owner never answered it, and
// a connection that closes ends its claim, so no claim of it survives.
//
// A hop outlives its claim: when the client hangs up, the relay sends
// hopClientGone and the owner, having released the claim, answers hopAck
// as the last byte it writes for it and waits for the next hop header as
// on a new connection. Only on that ack, read as the last byte of the
// owner's stream at a frame boundary, does the relay put the connection
// back (keepHop), as an idle one born when hopClientGone went out, so
// that the age limit above still keeps it within the owner's io-timeout.
// Without the ack (an owner of an earlier version closes the hop, one
// older still answers ERROR 0x13; or no answer within linger) the hop is
// closed as before. A relayed acquire thus costs no connection at either
// node once the pool is warm.

// Bounds of the hop pools.
const (
	// hopPoolSize is the most idle hop connections kept per owner.
	hopPoolSize = 16
	// hopPoolLow: a pool that gave connections is refilled, in one batch,
	// once it is down to this many, so that most relays see no dial
	// running beside them; and the least a sweep lowers a pool's target
	// to (hopPool.target).
	hopPoolLow = 4
	// hopPoolIdle is how long a pool is refilled after the last relay to
	// its owner.
	hopPoolIdle = 10 * time.Second
	// hopReplayMax bounds what a pooled hop records to send again on a
	// fresh connection: the hop header, the ACQUIRE and a few heartbeats.
	hopReplayMax = 4 << 10
)

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
	idle   time.Duration  // hopPoolIdle unless a test sets it
}

// idleAfter is how long a pool is refilled after the last relay to its
// owner.
func (p *hopPools) idleAfter() time.Duration {
	if p.idle > 0 {
		return p.idle
	}
	return hopPoolIdle
}

// hopPool is one owner's idle hop connections.
type hopPool struct {
	idle     []*idleHop // oldest first
	lastUsed time.Time
	filling  bool
	retryAt  time.Time   // after a failed dial, no fill before
	timer    *time.Timer // the next sweep, when armed
	timerAt  time.Time   // when it fires
	taken    int         // connections relays took since the last sweep
	want     int         // how many to fill to (target); 0 before it is learned
}

// target is how many idle connections pool is filled to. It starts at
// hopPoolSize and follows the relays' use: a sweep that finds
// connections expired unused lowers it to the number relays took since
// the sweep before (at least hopPoolLow), and a relay that finds the
// pool empty doubles it. So a pool that relays rarely use keeps a few
// connections warm instead of replacing all hopPoolSize of them every
// half io-timeout, and one in steady use keeps what it uses, each taken
// again before it expires.
func (pool *hopPool) target() int {
	if pool.want == 0 {
		return hopPoolSize
	}
	return pool.want
}

type idleHop struct {
	c     net.Conn
	born  time.Time
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
			pool.idle = slices.DeleteFunc(pool.idle, func(x *idleHop) bool { return x == h })
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

// hopMaxAge is how long an idle hop connection is kept: half the
// io-timeout within which the owner wants the first ACQUIRE.
func (srv *Server) hopMaxAge() time.Duration { return srv.IOTimeout / 2 }

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
// once the owner has answered on it (refill) and the pool is down to
// hopPoolLow: the dials and the owner's accepts then do not compete with
// the relay for the processors, and most relays run with none beside
// them.
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
	pool.lastUsed = now
	stale := pool.dropExpired(now, srv.hopMaxAge())
	var h *idleHop
	for h == nil && len(pool.idle) > 0 {
		h = pool.idle[0]
		pool.idle = slices.Delete(pool.idle, 0, 1)
		if !h.state.CompareAndSwap(hopWatched, hopTaken) {
			h = nil // its watcher found it dead and closes it
		}
	}
	if h == nil {
		if pool.want > 0 {
			pool.want = min(2*pool.want, hopPoolSize)
		}
		srv.fillLocked(addr, pool, now)
	} else {
		pool.taken++
	}
	p.mu.Unlock()
	closeAll(stale)
	return h
}

// refill has the pool of addr filled if it is down to hopPoolLow, after
// a relay on one of its connections got its answer.
func (srv *Server) refill(addr string) {
	p := &srv.hops
	p.mu.Lock()
	if pool := p.owners[addr]; pool != nil && len(pool.idle) <= hopPoolLow {
		srv.fillLocked(addr, pool, time.Now())
	}
	p.mu.Unlock()
}

// dropExpired removes the idle connections older than maxAge and returns
// them, to be closed outside the lock.
func (pool *hopPool) dropExpired(now time.Time, maxAge time.Duration) []net.Conn {
	var stale []net.Conn
	for len(pool.idle) > 0 && now.Sub(pool.idle[0].born) >= maxAge {
		stale = append(stale, pool.idle[0].c)
		pool.idle = slices.Delete(pool.idle, 0, 1)
	}
	return stale
}

// fillLocked starts a filler for pool if it lacks connections and its
// owner is being relayed to. p.mu is held.
func (srv *Server) fillLocked(addr string, pool *hopPool, now time.Time) {
	p := &srv.hops
	if p.closed || pool.filling || len(pool.idle) >= pool.target() ||
		now.Sub(pool.lastUsed) > p.idleAfter() || now.Before(pool.retryAt) {
		return
	}
	pool.filling = true
	p.wg.Add(1)
	go srv.fillHops(addr, pool)
}

// fillHops dials idle connections to addr, one at a time, until its pool
// is full or no longer wanted.
func (srv *Server) fillHops(addr string, pool *hopPool) {
	p := &srv.hops
	defer p.wg.Done()
	for {
		kept := srv.hopOwnerKept(addr)
		p.mu.Lock()
		if p.closed || p.owners[addr] != pool || !kept || len(pool.idle) >= pool.target() ||
			time.Since(pool.lastUsed) > p.idleAfter() {
			pool.filling = false
			srv.armLocked(addr, pool)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		c, err := srv.dialOwner(addr)
		p.mu.Lock()
		// A hop put back meanwhile (keepHop) may have filled the pool.
		if err != nil || p.closed || p.owners[addr] != pool || len(pool.idle) >= pool.target() {
			if err != nil {
				// The relays dial for themselves meanwhile (and hold
				// their clients when that fails too).
				pool.retryAt = time.Now().Add(holdRetry)
				srv.Logger.Debug("cannot open an idle hop to an owner", "owner_addr", addr, "err", err)
			}
			pool.filling = false
			srv.armLocked(addr, pool)
			p.mu.Unlock()
			if c != nil {
				c.Close()
			}
			return
		}
		h := &idleHop{c: c, born: time.Now(), relay: make(chan *pooledHop, 1)}
		pool.idle = append(pool.idle, h)
		p.wg.Add(1)
		go srv.watchHop(addr, h)
		srv.armLocked(addr, pool)
		p.mu.Unlock()
	}
}

// armLocked sets pool's sweep for when its oldest connection expires or
// the pool falls idle, unless one is armed no later. p.mu is held.
//
// A sweep armed for a later time is moved earlier: a pool swept empty
// (its connections all expired, as a sweep that fires late finds them,
// or while its owner refused dials) has its sweep armed for when it
// would fall idle; the connections a filler or keepHop then adds must
// still be replaced within their age limit, before the owner's
// io-timeout closes them.
func (srv *Server) armLocked(addr string, pool *hopPool) {
	p := &srv.hops
	if p.closed || p.owners[addr] != pool {
		return
	}
	at := pool.lastUsed.Add(p.idleAfter())
	if len(pool.idle) > 0 {
		at = minTime(at, pool.idle[0].born.Add(srv.hopMaxAge()))
	}
	if pool.timer != nil {
		if !at.Before(pool.timerAt) || !pool.timer.Stop() {
			// Armed early enough, or its sweep is under way: that sweep
			// waits for p.mu and then arms the next one from what it
			// finds.
			return
		}
		p.wg.Done() // the sweep stopped will not run
	}
	p.wg.Add(1)
	pool.timer, pool.timerAt = time.AfterFunc(time.Until(at), func() { srv.sweepHops(addr, pool) }), at
}

// sweepHops closes pool's expired connections and has them replaced
// while its owner is relayed to; it forgets the pool once it is not.
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
	stale := pool.dropExpired(now, srv.hopMaxAge())
	if !kept || now.Sub(pool.lastUsed) > p.idleAfter() {
		for _, h := range pool.idle {
			stale = append(stale, h.c)
		}
		pool.idle = nil
		if !pool.filling {
			delete(p.owners, addr) // a filler still running finds it gone
		}
	} else {
		if len(stale) > 0 {
			// Connections expired that no relay took: fill to what
			// the relays took since the last sweep.
			pool.want = min(max(pool.taken, hopPoolLow), hopPoolSize)
		}
		pool.taken = 0
		// Replace what expired, or top up a pool that is low; not a
		// pool short only of the hops out on relays, which come back
		// (keepHop) and would find it full.
		if len(stale) > 0 || len(pool.idle) <= hopPoolLow {
			srv.fillLocked(addr, pool, now)
		}
		srv.armLocked(addr, pool)
	}
	p.mu.Unlock()
	closeAll(stale)
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
	var conns []net.Conn
	for _, pool := range p.owners {
		for _, h := range pool.idle {
			conns = append(conns, h.c)
		}
		pool.idle = nil
		if pool.timer != nil && pool.timer.Stop() {
			p.wg.Done() // the sweep will not run
		}
		pool.timer = nil
	}
	p.owners = nil
	p.mu.Unlock()
	closeAll(conns)
	p.wg.Wait()
}

// keepHop puts up, a hop whose claim the owner has acknowledged ended
// (hopAck), back into the pool of addr as an idle connection born at
// born (before hopClientGone went out, so before the owner's io-timeout
// for the next header began), watched as a new one is. It closes it
// instead if the pool is full, forgotten or closed, or its owner has
// left.
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
	if !kept || p.closed || srv.inShutdown.Load() || pool == nil || len(pool.idle) >= hopPoolSize ||
		time.Since(born) >= srv.hopMaxAge() {
		p.mu.Unlock()
		c.Close()
		return
	}
	h := &idleHop{c: c, born: born, relay: make(chan *pooledHop, 1)}
	// Oldest first, as dropExpired reads them.
	i := len(pool.idle)
	for i > 0 && pool.idle[i-1].born.After(born) {
		i--
	}
	pool.idle = slices.Insert(pool.idle, i, h)
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
		return len(pool.idle)
	}
	return 0
}

// HopPoolIdle returns the number of idle hop connections this node keeps
// open to owners now, in all its pools.
func (srv *Server) HopPoolIdle() (idle int) {
	p := &srv.hops
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pool := range p.owners {
		idle += len(pool.idle)
	}
	return idle
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// pooledHop is a hop taken from a pool. Until the owner has sent a byte,
// it records what the relay writes, and if the connection fails (the
// owner had closed it while it sat idle) it dials afresh, once, and sends
// the recording again; the relay does not notice.
type pooledHop struct {
	srv  *Server
	addr string

	wmu sync.Mutex // serializes writes and the swap to a fresh connection

	mu       sync.Mutex // guards the fields below
	c        net.Conn
	sent     []byte // written, while the owner has not answered
	answered bool   // the owner sent a byte: no more redials
	redialed bool   // once only
	overflow bool   // the recording outgrew hopReplayMax
	closed   bool

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
			first := !h.answered
			h.answered, h.sent = true, nil
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
	if !h.answered && !h.redialed && !h.overflow {
		if len(h.sent)+len(b) > hopReplayMax {
			h.overflow, h.sent = true, nil
		} else {
			h.sent = append(h.sent, b...)
		}
	}
	h.mu.Unlock()
	n, err := c.Write(b)
	if err != nil && h.redialLocked(c, err) {
		return len(b), nil // the recording, b included, went out afresh
	}
	return n, err
}

// redialLocked replaces failed, the current connection, by a fresh one
// and sends it the recording, if the owner has not answered and this hop
// has not redialed yet. It reports whether the caller may go on (on the
// new connection, or on one another caller swapped in). h.wmu is held.
func (h *pooledHop) redialLocked(failed net.Conn, err error) bool {
	h.mu.Lock()
	if h.c != failed {
		h.mu.Unlock()
		return true // another caller already swapped it
	}
	if h.closed || h.answered || h.redialed || h.overflow || errors.Is(err, os.ErrDeadlineExceeded) {
		h.mu.Unlock()
		return false
	}
	h.redialed = true
	replay := h.sent
	h.sent = nil
	h.mu.Unlock()
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
	if h.closed {
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
	h.closed = true
	answered := h.answered
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
	h.closed = true
	return h.c
}

func (h *pooledHop) LocalAddr() net.Addr                { return h.conn().LocalAddr() }
func (h *pooledHop) RemoteAddr() net.Addr               { return h.conn().RemoteAddr() }
func (h *pooledHop) SetDeadline(t time.Time) error      { return h.conn().SetDeadline(t) }
func (h *pooledHop) SetReadDeadline(t time.Time) error  { return h.conn().SetReadDeadline(t) }
func (h *pooledHop) SetWriteDeadline(t time.Time) error { return h.conn().SetWriteDeadline(t) }
