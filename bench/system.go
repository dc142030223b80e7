package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
)

// system is one lock service under test: how to start its server
// privately on loopback and how its users take a lock with its standard
// Go client.
type system struct {
	name string
	// client names the client library and the calls used.
	client string
	// start launches a private server with its own data directory.
	start func(ctx context.Context, e *env) (*server, error)
	// dial opens one client session: what one process of a user's fleet
	// would hold (a connection, a pool, a lease or a ZooKeeper session).
	dial func(ctx context.Context, addr string, o clientOpts) (locker, error)
	// capacityPool, if set, returns the dial used for the capacity
	// scenario of n locks instead of dial (etcd multiplexes many sessions
	// over a few gRPC connections, as one process holding many locks
	// would; a baton version 2 session carries many claims). sessions is
	// how many client sessions hold the n locks, 0 if each lock has its
	// own.
	capacityPool func(ctx context.Context, addr string, n int) (dial func(ctx context.Context) (locker, error), closeAll func(), sessions int, err error)
	// capacityWorkers is how many goroutines take the capacity
	// scenario's locks; 0 means 64.
	capacityWorkers int

	// deadLease is the smallest sensible lease, TTL or session timeout
	// for the dead-holder scenario; 0 if the system has none.
	deadLease time.Duration
	// leaseNote says how that lease is set and why it is the smallest.
	leaseNote string
	// connPerSession: every session is a connection to the one server
	// process, so the process's open-file limit bounds the sessions.
	connPerSession bool
	// capacityNote says what one held lock costs the client side.
	capacityNote string
	// skipCapacity, if set, says why scenario 5 is not run on the system.
	skipCapacity string
}

// clientOpts tunes a client session for a scenario.
type clientOpts struct {
	// lease is the lease/TTL/session timeout; 0 means the everyday
	// default of the client library (or, for baton, 10s).
	lease time.Duration
	// capacity asks for a session that holds its lock for a long time
	// with as little client-side memory and traffic as the library allows.
	capacity bool
	// dialer, when set, spreads connections over loopback source
	// addresses.
	dialer *spreadDialer
}

// locker is one client session.
type locker interface {
	// lock takes the named lock, waiting (in the system's own way) until
	// it is held or ctx is done.
	lock(ctx context.Context, name string) (unlocker, error)
	close()
}

type unlocker interface{ unlock() error }

// server is a running private server.
type server struct {
	addr    string
	proc    *process
	version string
	// memory reports the server's resident memory in KiB and how it was
	// measured.
	memory func() (int64, string, error)
	stop   func()
}

// vmRSS measures a single-process server.
func vmRSS(p *process) func() (int64, string, error) {
	return func() (int64, string, error) {
		kib, err := procStatusKiB(p.pid(), "VmRSS")
		return kib, "VmRSS of the server process", err
	}
}

// env is what every system's start needs.
type env struct {
	tmp          string // parent of the servers' data directories
	batonBin     string
	batonVersion string
	maxConns     int // the largest number of client sessions any scenario opens
	pgMaxConns   int // PostgreSQL's max_connections
	pgUID, pgGID int
	pgUser       string
}

// lockKey maps a lock name to a PostgreSQL advisory lock key.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func allSystems() []*system {
	return []*system{batonSystem(), batonSessionSystem(), batonClusterSystem(false), batonClusterSystem(true),
		batonClusterRoutedSystem(), batonClusterSessionSystem(false), batonClusterSessionSystem(true),
		redisSystem(), etcdSystem(), postgresSystem(), zookeeperSystem()}
}

func systemByName(name string) (*system, error) {
	for _, s := range allSystems() {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown system %q", name)
}
