package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

// sessionCapacityClaims is how many claims one session carries in the
// capacity scenario: 1,000 sessions × 1,000 claims make a million.
const sessionCapacityClaims = 1000

// sessionCapacityWorkers is how many goroutines take the capacity
// scenario's claims: about eight in flight on each of 1,000 sessions, so
// that a session's CLAIMs share writes (and the server's answers share
// its writes) as a busy process's would; with one claim in flight per
// session every claim costs its own round trip of system calls.
const sessionCapacityWorkers = 8192

func batonSessionSystem() *system {
	return &system{
		name:   "baton-session",
		client: "github.com/batonlock/baton (this repository), protocol version 2: Client.OpenSession once per worker, then Session.Acquire(name, baton.Exclusive) + Claim.Release on the open session",
		start:  startBaton,
		dial:   dialBatonSession,
		capacityPool: func(ctx context.Context, addr string, n int) (func(context.Context) (locker, error), func(), int, error) {
			return batonSessionPool(ctx, addr, n)
		},
		capacityWorkers: sessionCapacityWorkers,
		// The same 1s as v1 baton and the tightest peer: a session lease,
		// kept alive by PINGs at lease/4.
		deadLease:    time.Second,
		leaseNote:    "session lease 1s (client-chosen; PING every 250ms, client gives up at 0.8s, server ends the session and its claims at 1s of silence)",
		capacityNote: fmt.Sprintf("one version 2 session (one TCP connection) per %d held claims, each claim exclusive on its own name (the baton Session: one reader goroutine per session, a record and two channels per claim)", sessionCapacityClaims),
	}
}

func sessionLease(o clientOpts) time.Duration {
	switch {
	case o.lease != 0:
		return o.lease
	case o.capacity:
		return batonCapacityLease
	default:
		return batonEverydayLease
	}
}

// openSession opens one version 2 session; it never falls back to
// version 1, so a server without version 2 fails the system loudly.
func openSession(ctx context.Context, addr string, o clientOpts) (*baton.Session, error) {
	cfg := baton.DefaultConfig(addr)
	if o.dialer != nil {
		cfg.Dialer = o.dialer
	} else {
		cfg.Dialer = &net.Dialer{}
	}
	return baton.New(cfg).OpenSession(ctx, baton.SessionOptions{Lease: sessionLease(o), Label: "bench", RefuseOldServer: true})
}

type sessionLocker struct {
	s *baton.Session
	// shared: the session belongs to a pool; close leaves it open.
	shared bool
}

func dialBatonSession(ctx context.Context, addr string, o clientOpts) (locker, error) {
	s, err := openSession(ctx, addr, o)
	if err != nil {
		return nil, err
	}
	return &sessionLocker{s: s}, nil
}

func (l *sessionLocker) lock(ctx context.Context, name string) (unlocker, error) {
	cl, err := l.s.Acquire(ctx, name, baton.Exclusive)
	if err != nil {
		return nil, err
	}
	return sessionHeld{cl}, nil
}

func (l *sessionLocker) close() {
	if !l.shared {
		l.s.Close()
	}
}

type sessionHeld struct{ cl *baton.Claim }

func (h sessionHeld) unlock() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.cl.Release(ctx)
}

// batonSessionPool opens ceil(n / sessionCapacityClaims) sessions for the
// capacity scenario; its dial hands them out in turn, so each session
// carries up to sessionCapacityClaims of the n claims.
func batonSessionPool(ctx context.Context, addr string, n int) (func(context.Context) (locker, error), func(), int, error) {
	count := max((n+sessionCapacityClaims-1)/sessionCapacityClaims, 1)
	sessions := make([]*baton.Session, count)
	closeAll := func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, s := range sessions {
			if s != nil {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					s.Close()
				})
			}
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 32)
	for i := range sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			s, err := openSession(c, addr, clientOpts{capacity: true, dialer: capacityDialer})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			sessions[i] = s
		})
	}
	wg.Wait()
	if firstErr != nil {
		closeAll()
		return nil, nil, 0, firstErr
	}
	var next uint64
	var nmu sync.Mutex
	dial := func(context.Context) (locker, error) {
		nmu.Lock()
		i := next % uint64(count)
		next++
		nmu.Unlock()
		return &sessionLocker{s: sessions[i], shared: true}, nil
	}
	return dial, closeAll, count, nil
}
