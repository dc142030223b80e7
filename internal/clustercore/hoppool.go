package clustercore

import (
	"slices"
	"time"
)

// The policy of a relaying node's pools of idle hop connections, one per
// owner: a pooled connection is kept for at most half the io-timeout (the
// owner closes one that sent nothing within its io-timeout), replaced only
// as far as relays use them (HopPool.Target), and the pool is dropped once
// its owner goes unrelayed for IdleAfter or leaves the Router's list. The
// connections themselves are server/hoppool.go's.
// Design: "The hop pool" and #internalclustercorehoppoolgo in
// docs/design/2026-12-07-cluster-relay.md.

// Bounds of the hop pools.
const (
	// HopPoolSize is the most idle hop connections kept per owner.
	HopPoolSize = 16
	// HopPoolLow: a pool that gave connections is refilled, in one batch,
	// once it is down to this many, so that most relays see no dial
	// running beside them; and the least a sweep lowers a pool's target
	// to (HopPool.Target).
	HopPoolLow = 4
	// HopPoolIdle is how long a pool is refilled after the last relay to
	// its owner, unless HopPolicy.IdleAfter says otherwise.
	HopPoolIdle = 10 * time.Second
)

// HopPolicy is what a node's hop pools are bounded by.
type HopPolicy struct {
	// MaxAge is how long an idle connection is kept (HopMaxAge).
	MaxAge time.Duration
	// IdleAfter is how long a pool is refilled after the last relay to
	// its owner; HopPoolIdle when zero.
	IdleAfter time.Duration
	// RetryAfter is how long a pool is not filled after a failed dial:
	// the relays dial for themselves meanwhile.
	RetryAfter time.Duration
}

// HopMaxAge is how long an idle hop connection is kept: half the
// io-timeout within which the owner wants the first ACQUIRE.
func HopMaxAge(ioTimeout time.Duration) time.Duration { return ioTimeout / 2 }

func (pol HopPolicy) idleAfter() time.Duration {
	if pol.IdleAfter > 0 {
		return pol.IdleAfter
	}
	return HopPoolIdle
}

// HopPool is one owner's pool of idle hop connections, each an opaque
// handle H of the caller's, with the time it was born. Its methods take
// the time and say what to do: which connections to close, whether to
// start a filler, when to arm the sweep. The caller serialises the calls.
type HopPool[H comparable] struct {
	idle     []hopIdle[H] // oldest first
	lastUsed time.Time
	filling  bool
	retryAt  time.Time // after a failed dial, no fill before
	armed    bool      // a sweep is armed (or under way)
	armedAt  time.Time // when it fires
	taken    int       // connections relays took since the last sweep
	want     int       // how many to fill to (Target); 0 before it is learned
}

type hopIdle[H comparable] struct {
	h    H
	born time.Time
}

// Len is how many idle connections the pool holds.
func (p *HopPool[H]) Len() int { return len(p.idle) }

// Target is how many idle connections the pool is filled to. It starts
// at HopPoolSize and follows the relays' use: a sweep that finds
// connections expired unused lowers it to the number relays took since
// the sweep before (at least HopPoolLow), and a relay that finds the
// pool empty doubles it. So a pool that relays rarely use keeps a few
// connections warm instead of replacing all HopPoolSize of them every
// half io-timeout, and one in steady use keeps what it uses, each taken
// again before it expires.
func (p *HopPool[H]) Target() int {
	if p.want == 0 {
		return HopPoolSize
	}
	return p.want
}

// Use records a relay to the pool's owner at now, and returns the idle
// connections expired by then, out of the pool, for the caller to close.
// The relay then takes connections with Next until one is live, and
// reports Took or Missed.
func (p *HopPool[H]) Use(now time.Time, pol HopPolicy) []H {
	p.lastUsed = now
	return p.dropExpired(now, pol)
}

// Next takes the oldest idle connection out of the pool; false when it
// is empty.
func (p *HopPool[H]) Next() (h H, ok bool) {
	if len(p.idle) == 0 {
		return h, false
	}
	h = p.idle[0].h
	p.idle = slices.Delete(p.idle, 0, 1)
	return h, true
}

// Took records that a relay took a live connection from the pool.
func (p *HopPool[H]) Took() { p.taken++ }

// Missed records that a relay found the pool empty at now: its target
// doubles (once learned), and it reports whether to start a filler now.
func (p *HopPool[H]) Missed(now time.Time, pol HopPolicy) bool {
	if p.want > 0 {
		p.want = min(2*p.want, HopPoolSize)
	}
	return p.Fill(now, pol)
}

// Refill reports whether to start a filler now that a relay on one of
// the pool's connections got its answer: only once the pool is down to
// HopPoolLow, so that the dials and the owner's accepts do not compete
// with the relays for the processors.
func (p *HopPool[H]) Refill(now time.Time, pol HopPolicy) bool {
	return len(p.idle) <= HopPoolLow && p.Fill(now, pol)
}

// Fill reports whether to start a filler now, and if so counts it as
// started: none runs yet, the pool lacks connections, its owner was
// relayed to within IdleAfter, and no failed dial is recent.
func (p *HopPool[H]) Fill(now time.Time, pol HopPolicy) bool {
	if p.filling || len(p.idle) >= p.Target() ||
		now.Sub(p.lastUsed) > pol.idleAfter() || now.Before(p.retryAt) {
		return false
	}
	p.filling = true
	return true
}

// FillNext reports whether the filler should dial one more connection
// at now; when not, the fill has ended. live says whether the caller
// still has the pool for its owner and the Router still lists the owner.
func (p *HopPool[H]) FillNext(now time.Time, pol HopPolicy, live bool) bool {
	if !live || len(p.idle) >= p.Target() || now.Sub(p.lastUsed) > pol.idleAfter() {
		p.filling = false
		return false
	}
	return true
}

// Dialled records the filler's dial, which ended at now: h joins the
// pool, and the fill goes on, if the dial succeeded (ok), the pool is
// still live and not full (a hop put back meanwhile may have filled it).
// Otherwise the fill ends, and the caller closes h if it has one; a
// failed dial holds further fills off for RetryAfter.
func (p *HopPool[H]) Dialled(now time.Time, pol HopPolicy, h H, ok, live bool) bool {
	if !ok {
		p.retryAt = now.Add(pol.RetryAfter)
	}
	if !ok || !live || len(p.idle) >= p.Target() {
		p.filling = false
		return false
	}
	p.idle = append(p.idle, hopIdle[H]{h: h, born: now})
	return true
}

// Remove takes h out of the pool: its watcher found it dead.
func (p *HopPool[H]) Remove(h H) {
	p.idle = slices.DeleteFunc(p.idle, func(x hopIdle[H]) bool { return x.h == h })
}

// Return puts h, a hop whose claim the owner acknowledged ended, back
// into the pool as an idle connection born at born (before the end went
// out, so before the owner's io-timeout for the next header began), and
// reports whether it did. It does not if the pool is full (HopPoolSize,
// whatever its target: the hop is already open) or h is as old as
// MaxAge; the caller closes it then.
func (p *HopPool[H]) Return(now time.Time, pol HopPolicy, h H, born time.Time) bool {
	if len(p.idle) >= HopPoolSize || now.Sub(born) >= pol.MaxAge {
		return false
	}
	// Oldest first, as dropExpired reads them.
	i := len(p.idle)
	for i > 0 && p.idle[i-1].born.After(born) {
		i--
	}
	p.idle = slices.Insert(p.idle, i, hopIdle[H]{h: h, born: born})
	return true
}

// dropExpired removes the idle connections as old as MaxAge at now and
// returns them.
func (p *HopPool[H]) dropExpired(now time.Time, pol HopPolicy) []H {
	var stale []H
	for len(p.idle) > 0 && now.Sub(p.idle[0].born) >= pol.MaxAge {
		stale = append(stale, p.idle[0].h)
		p.idle = slices.Delete(p.idle, 0, 1)
	}
	return stale
}

// Arm reports when the pool's sweep should fire, for when its oldest
// connection expires or the pool falls idle, and whether the caller must
// (re)arm its timer for that time: it must unless a sweep is armed no
// later. A sweep armed for a later time is moved earlier: a pool swept
// empty (its connections all expired, as a sweep that fires late finds
// them, or while its owner refused dials) has its sweep armed for when
// it would fall idle; the connections a filler or Return then adds must
// still be replaced within their age limit, before the owner's
// io-timeout closes them.
//
// If the caller's timer has already fired (its sweep waits to run), the
// caller arms nothing: that sweep arms the next one from what it finds.
func (p *HopPool[H]) Arm(pol HopPolicy) (at time.Time, arm bool) {
	at = p.lastUsed.Add(pol.idleAfter())
	if len(p.idle) > 0 {
		at = hopMinTime(at, p.idle[0].born.Add(pol.MaxAge))
	}
	if p.armed && !at.Before(p.armedAt) {
		return at, false
	}
	p.armed, p.armedAt = true, at
	return at, true
}

// HopSweep is what a sweep of a pool says to do.
type HopSweep[H comparable] struct {
	Close   []H  // connections to close, out of the pool
	Drained bool // the pool is no longer wanted: no fill, no next sweep
	Forget  bool // drained, and no filler runs: forget the pool
	Fill    bool // start a filler
}

// Sweep is the pool's sweep, fired at now: it closes the expired
// connections and has them replaced while the owner is relayed to
// (ownerKept: the Router still lists it), else closes them all and the
// pool is drained and forgotten (once its filler, if one runs, has
// ended: the filler then finds the pool unwanted). The caller arms the
// next sweep (Arm) unless the pool is drained.
func (p *HopPool[H]) Sweep(now time.Time, pol HopPolicy, ownerKept bool) HopSweep[H] {
	p.armed = false
	var sw HopSweep[H]
	sw.Close = p.dropExpired(now, pol)
	if !ownerKept || now.Sub(p.lastUsed) > pol.idleAfter() {
		sw.Close = append(sw.Close, p.Drain()...)
		sw.Drained, sw.Forget = true, !p.filling
		return sw
	}
	if len(sw.Close) > 0 {
		// Connections expired that no relay took: fill to what the
		// relays took since the last sweep.
		p.want = min(max(p.taken, HopPoolLow), HopPoolSize)
	}
	p.taken = 0
	// Replace what expired, or top up a pool that is low; not a pool
	// short only of the hops out on relays, which come back (Return)
	// and would find it full.
	if len(sw.Close) > 0 || len(p.idle) <= HopPoolLow {
		sw.Fill = p.Fill(now, pol)
	}
	return sw
}

// Drain takes every idle connection out of the pool and returns them,
// for the caller to close.
func (p *HopPool[H]) Drain() []H {
	hs := make([]H, 0, len(p.idle))
	for _, x := range p.idle {
		hs = append(hs, x.h)
	}
	p.idle = nil
	return hs
}

func hopMinTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// HopReplayMax bounds what a pooled hop records to send again on a fresh
// connection: the hop header, the ACQUIRE and a few heartbeats.
const HopReplayMax = 4 << 10

// HopReplay is when a hop taken from a pool is dialled afresh. Until the
// owner has sent a byte, what the relay writes is recorded, and if the
// connection fails (the owner had closed it while it sat idle) the hop
// is dialled afresh, once, and the recording sent again: the owner never
// answered it, and a connection that closes ends its claim, so no claim
// of it survives. Not after the owner answered, nor once the recording
// outgrew HopReplayMax, nor on the relay's own deadline, nor once the
// hop is closed.
type HopReplay struct {
	sent     []byte // written, while the owner has not answered
	answered bool   // the owner sent a byte: no more redials
	redialed bool   // once only
	overflow bool   // the recording outgrew HopReplayMax
	closed   bool
}

// Wrote records b, written to the owner, while a redial may still send
// it again.
func (r *HopReplay) Wrote(b []byte) {
	switch {
	case r.answered || r.redialed || r.overflow:
	case len(r.sent)+len(b) > HopReplayMax:
		r.overflow, r.sent = true, nil
	default:
		r.sent = append(r.sent, b...)
	}
}

// Answer records that the owner sent a byte, and reports whether it is
// the first time.
func (r *HopReplay) Answer() (first bool) {
	first = !r.answered
	r.answered, r.sent = true, nil
	return first
}

// Redial reports whether to dial afresh after the connection failed
// (timedOut: on a deadline of the relay's), and what to send first on
// the fresh one.
func (r *HopReplay) Redial(timedOut bool) (replay []byte, ok bool) {
	if r.closed || r.answered || r.redialed || r.overflow || timedOut {
		return nil, false
	}
	r.redialed = true
	replay, r.sent = r.sent, nil
	return replay, true
}

// Close records that the hop is closed (or handed back to its pool): no
// redial follows; it reports whether the owner had answered.
func (r *HopReplay) Close() (answered bool) {
	r.closed = true
	return r.answered
}

// Closed reports whether the hop was closed.
func (r *HopReplay) Closed() bool { return r.closed }
