// Package freeport gives tests loopback ports for processes they start
// later.
package freeport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports are drawn from [low, low+span): below the kernel's range of
// ephemeral ports (32768 up, by default) and above the usual ports of the
// services tests run beside (PostgreSQL, Redis, etcd, ZooKeeper).
const (
	low  = 20000
	span = 12000
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Port returns a port that is free on 127.0.0.1 now and that this
// process has not returned before.
//
// A port taken with a listen on port 0 and closed again comes from the
// ephemeral range: the kernel may hand it to another process's listen on
// port 0, or to a connection, before the process meant to bind it does,
// which then fails with "address already in use" (it happened in CI, to a
// node's Raft address given to another node's admin listener). And two
// draws for the nodes of one test must not be the same port, free until
// the first node binds it.
func Port(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := low + rand.IntN(span)
		if given[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		given[port] = true
		return strconv.Itoa(port)
	}
	t.Fatal("freeport: no free port below the ephemeral range")
	return ""
}

// Addr returns 127.0.0.1 with a port from Port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", Port(t))
}
