package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// viewsServer is a server whose table has locks locks, each with one
// holder and waiters waiters, every claim in a session of its own.
func viewsServer(b *testing.B, locks, waiters int) (*Server, []string) {
	srv := &Server{Tokens: &locktable.CounterTokens{}}
	srv.init()
	now := time.Now()
	names := make([]string, locks)
	sid := locktable.SessionID(1)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for i := range names {
		names[i] = fmt.Sprintf("lock-%05d", i)
		for range waiters + 1 {
			p := locktable.SessionParams{Lease: time.Minute, Peer: locktable.Peer{Addr: "127.0.0.1:1"}, Label: "bench"}
			if err := srv.table.Open(now, sid, p); err != nil {
				b.Fatal(err)
			}
			if _, _, err := srv.table.Claim(now, sid, 1, locktable.ClaimRequest{Name: names[i], Mode: locktable.Exclusive}); err != nil {
				b.Fatal(err)
			}
			sid++
		}
	}
	return srv, names
}

// BenchmarkSnapshot is the admin API's listing of every lock (1,000
// locks with a holder and two waiters each).
func BenchmarkSnapshot(b *testing.B) {
	srv, _ := viewsServer(b, 1000, 2)
	b.ReportAllocs()
	for b.Loop() {
		if n := len(srv.Snapshot(nil)); n != 1000 {
			b.Fatalf("%d locks", n)
		}
	}
}

// BenchmarkLocks is one page of the dashboard: 50 of 1,000 locks with
// their first 10 of 20 waiters.
func BenchmarkLocks(b *testing.B) {
	srv, names := viewsServer(b, 1000, 20)
	b.ReportAllocs()
	for b.Loop() {
		if n := len(srv.Locks(names[:50], 10)); n != 50 {
			b.Fatalf("%d locks", n)
		}
	}
}
