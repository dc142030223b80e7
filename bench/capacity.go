package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// capPoint is the server's memory with Held locks held, each by its own
// client session.
type capPoint struct {
	Target       int     `json:"target"`
	Held         int     `json:"held"`
	IdleKiB      int64   `json:"idle_kib"`
	RSSKiB       int64   `json:"rss_kib"`
	PerLockBytes float64 `json:"per_lock_bytes"`
	Seconds      float64 `json:"seconds"`
	Stop         string  `json:"stop"`
	Method       string  `json:"method"`
	// Sessions is how many client sessions held the locks when that is
	// fewer than the locks (a baton version 2 session carries many
	// claims); 0: each lock its own session.
	Sessions int `json:"sessions,omitempty"`
	// ClientKiB is how much the harness process (the client side) grew
	// while taking the locks, VmRSS; 0 where the client side runs in
	// other processes.
	ClientKiB int64 `json:"client_kib,omitempty"`
}

// guard stops a capacity run before the machine runs short of memory or
// the run overstays its budget.
type guard struct {
	deadline  time.Time
	minAvail  int64 // KiB
	reason    atomic.Value
	srv       *server
	stopWatch chan struct{}
}

func newGuard(budget time.Duration, minAvailKiB int64, srv *server) *guard {
	g := &guard{deadline: time.Now().Add(budget), minAvail: minAvailKiB, srv: srv, stopWatch: make(chan struct{})}
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-g.stopWatch:
				return
			case <-t.C:
				g.check()
			}
		}
	}()
	return g
}

func (g *guard) check() {
	switch {
	case time.Now().After(g.deadline):
		g.stop("time budget used up")
	case memAvailableKiB() < g.minAvail:
		g.stop(fmt.Sprintf("machine's available memory fell below %d MiB", g.minAvail>>10))
	case g.srv.proc.exited():
		g.stop("server exited: " + g.srv.proc.tail())
	}
}

func (g *guard) stop(reason string) { g.reason.CompareAndSwap(nil, reason) }

func (g *guard) stopped() (string, bool) {
	r, ok := g.reason.Load().(string)
	return r, ok
}

func (g *guard) close() { close(g.stopWatch) }

// capacity holds target locks on srv, each by its own client session,
// and measures the server's memory. It leaves the sessions to the caller
// to tear down by stopping the server, which is far quicker than a
// polite goodbye from each session.
func capacity(ctx context.Context, s *system, srv *server, target int, budget time.Duration, minAvailKiB int64) (*capPoint, func()) {
	idle, method, _ := srv.memory()
	pt := &capPoint{Target: target, IdleKiB: idle, Method: method}
	dial := func(ctx context.Context) (locker, error) {
		return s.dial(ctx, srv.addr, clientOpts{capacity: true, dialer: capacityDialer})
	}
	var closePool func()
	if s.capacityPool != nil {
		d, c, sessions, err := s.capacityPool(ctx, srv.addr, target)
		if err != nil {
			pt.Stop = "could not open client pool: " + err.Error()
			return pt, func() {}
		}
		dial, closePool, pt.Sessions = d, c, sessions
	}
	workers := s.capacityWorkers
	if workers == 0 {
		workers = 64
	}
	clientBefore := selfRSSKiB()
	g := newGuard(budget, minAvailKiB, srv)
	defer g.close()

	type session struct {
		l locker
		h unlocker
	}
	sessions := make([]session, target)
	var next, held atomic.Int64
	var lastErr atomic.Value
	var errCount atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				if _, stop := g.stopped(); stop || ctx.Err() != nil {
					return
				}
				i := next.Add(1) - 1
				if i >= int64(target) {
					return
				}
				c, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := dial(c)
				if err == nil {
					var h unlocker
					h, err = l.lock(c, fmt.Sprintf("cap-%d", i))
					if err == nil {
						sessions[i] = session{l, h}
						held.Add(1)
					} else {
						l.close()
					}
				}
				cancel()
				if err != nil {
					lastErr.Store(err.Error())
					if errCount.Add(1) > 100 {
						g.stop(fmt.Sprintf("more than 100 failed sessions, last: %v", err))
					}
				}
			}
		})
	}
	wg.Wait()
	pt.Seconds = time.Since(start).Seconds()
	pt.Held = int(held.Load())
	if r, ok := g.stopped(); ok {
		pt.Stop = r
	} else {
		pt.Stop = "target reached"
	}
	if e, ok := lastErr.Load().(string); ok && errCount.Load() > 0 {
		pt.Stop += fmt.Sprintf(" (%d failed sessions, last: %s)", errCount.Load(), e)
	}
	// Let the server settle (GC, keepalives) before reading its memory.
	time.Sleep(3 * time.Second)
	if after := selfRSSKiB(); after > clientBefore && clientBefore > 0 {
		pt.ClientKiB = after - clientBefore
	}
	if kib, _, err := srv.memory(); err == nil {
		pt.RSSKiB = kib
		if pt.Held > 0 {
			pt.PerLockBytes = float64((pt.RSSKiB-pt.IdleKiB)*1024) / float64(pt.Held)
		}
	}
	teardown := func() {
		// The caller stops the server first; closing the client side
		// then only frees local state.
		var cw sync.WaitGroup
		ch := make(chan session)
		for range 64 {
			cw.Go(func() {
				for s := range ch {
					s.l.close()
				}
			})
		}
		for _, s := range sessions {
			if s.l != nil {
				ch <- s
			}
		}
		close(ch)
		done := make(chan struct{})
		go func() { cw.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			log.Printf("capacity: some %s client sessions did not close within 60s; leaving them", s.name)
		}
		if closePool != nil {
			closePool()
		}
	}
	return pt, teardown
}

// selfRSSKiB is the harness process's own resident memory, 0 if unknown.
func selfRSSKiB() int64 {
	kib, _ := procStatusKiB(os.Getpid(), "VmRSS")
	return kib
}

// capacityDialer spreads the capacity scenario's connections over 200
// loopback source addresses.
var capacityDialer = newSpreadDialer(200)
