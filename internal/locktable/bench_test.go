package locktable_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// BenchmarkAcquireRelease is the uncontended path: a claim takes a free
// lock and releases it, leaving the table empty.
func BenchmarkAcquireRelease(b *testing.B) {
	table := locktable.New(&locktable.CounterTokens{})
	req := locktable.Request{Name: "bench", Lease: time.Second, Peer: locktable.Peer{Addr: "10.0.0.1:1"}}
	now := epoch
	b.ReportAllocs()
	var id locktable.SessionID
	for b.Loop() {
		id++
		if st, _, err := table.Acquire(now, id, req); err != nil || st.State != locktable.Owner {
			b.Fatalf("Acquire: %+v, %v", st, err)
		}
		table.End(now, id, locktable.ReasonGraceful)
	}
}

// BenchmarkHandover is the contended path: a waiter queues, the owner
// ends, and the waiter is promoted and pushed ACQUIRED, so the lock is
// never free and the queue stays one long.
func BenchmarkHandover(b *testing.B) {
	table := locktable.New(&locktable.CounterTokens{})
	req := locktable.Request{Name: "bench", Lease: time.Second, Peer: locktable.Peer{Addr: "10.0.0.1:1"}}
	now := epoch
	if _, _, err := table.Acquire(now, 0, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var id locktable.SessionID
	for b.Loop() {
		if st, _, err := table.Acquire(now, id+1, req); err != nil || st.State != locktable.Waiting {
			b.Fatalf("Acquire: %+v, %v", st, err)
		}
		if res := table.End(now, id, locktable.ReasonGraceful); len(res.Sends) != 1 || res.Sends[0].Session != id+1 {
			b.Fatalf("End did not promote %d: %+v", id+1, res)
		}
		id++
	}
}

// BenchmarkClockTokens is the cost of a token from the default source,
// for comparison with the durable one (internal/tokenstore). Run it with
// -benchtime 200000x: a longer run issues more than GrantsPerSecond and
// measures the rate cap's waits (about 1 µs per token) instead.
func BenchmarkClockTokens(b *testing.B) {
	c, err := locktable.NewClockTokens(time.Unix(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c.Next()
	}
}
