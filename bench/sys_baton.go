package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/batonlock/baton"
)

// batonEverydayLease is the lease of scenarios 1 to 3: a few seconds, as
// docs/client.md suggests for most jobs. It does not affect the numbers
// (no heartbeat falls inside a cycle).
const batonEverydayLease = 10 * time.Second

// batonCapacityLease keeps the capacity scenario free of heartbeats: the
// interval is lease/4, so 1h means one heartbeat per session per 15min.
const batonCapacityLease = time.Hour

func batonSystem() *system {
	return &system{
		name:   "baton",
		client: "github.com/batonlock/baton (this repository): Client.Acquire + Claim.Release; one TCP connection per claim",
		start:  startBaton,
		dial:   dialBaton,
		// The lease is the client's choice; the protocol accepts 1ms. 1s
		// keeps heartbeats at lease/4 = 250ms, above the client's 100ms
		// floor, and is the same figure as the tightest peer (etcd's
		// minimum TTL), so the comparison is the mechanism, not the
		// setting.
		deadLease:      time.Second,
		leaseNote:      "lease 1s (client-chosen; heartbeat every 250ms, client gives up at 0.8s, server expires at 1s of silence)",
		connPerSession: true,
		capacityNote:   "one TCP connection per held lock (the baton client: one reader goroutine and one timer per lock)",
	}
}

func startBaton(ctx context.Context, e *env) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	argv := append([]string{e.batonBin, "serve", "-listen", addr, "-log-level", "warn"}, benchLimits...)
	p, err := startProcess("baton", "", 0, 0, argv, nil)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(addr, p, 15*time.Second); err != nil {
		p.stop(time.Second)
		return nil, err
	}
	return &server{
		addr:    addr,
		proc:    p,
		version: e.batonVersion,
		memory:  vmRSS(p),
		stop:    func() { p.stop(5 * time.Second) },
	}, nil
}

type batonLocker struct {
	c     *baton.Client
	lease time.Duration
}

func dialBaton(_ context.Context, addr string, o clientOpts) (locker, error) {
	cfg := baton.DefaultConfig(addr)
	if o.dialer != nil {
		cfg.Dialer = o.dialer
	} else {
		cfg.Dialer = &net.Dialer{}
	}
	lease := o.lease
	switch {
	case lease == 0 && o.capacity:
		lease = batonCapacityLease
	case lease == 0:
		lease = batonEverydayLease
	}
	return &batonLocker{c: baton.New(cfg), lease: lease}, nil
}

func (b *batonLocker) lock(ctx context.Context, name string) (unlocker, error) {
	l, err := b.c.Acquire(ctx, name, b.lease)
	if err != nil {
		return nil, err
	}
	return batonHeld{l}, nil
}

func (b *batonLocker) close() {}

type batonHeld struct{ l *baton.Claim }

func (h batonHeld) unlock() error { return h.l.Release(context.Background()) }

// benchLimits lifts the server's per-client limits: every client of a
// bench run comes from one loopback address, and the capacity scenarios
// measure what the server can hold, not its policy (docs/capacity.md).
var benchLimits = []string{"-max-sessions-per-client", "0", "-max-session-claims", "0", "-max-waiters", "0",
	"-max-kept-sessions", "0", "-max-kept-claims", "0"}
