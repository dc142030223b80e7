package locktable_test

import (
	"runtime"
	"strconv"
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

// BenchmarkHeldClaims measures what a held claim costs the table: 1,000
// sessions, each holding claims on its own lock names (the capacity
// scenario of protocol version 2), built from an empty table. It reports
// the heap the table keeps per held claim (names included) and the time
// to take each claim:
//
//	go test ./internal/locktable -run '^$' -bench HeldClaims -benchtime 1x
func BenchmarkHeldClaims(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			const sessions = 1000
			perSession := n / sessions
			var bytes, elapsed float64
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				table := locktable.New(&locktable.CounterTokens{})
				for s := range sessions {
					sid := locktable.SessionID(s + 1)
					if err := table.Open(epoch, sid, locktable.SessionParams{Lease: time.Second, Label: "bench"}); err != nil {
						b.Fatal(err)
					}
					for c := range perSession {
						name := "lock/" + strconv.Itoa(s) + "/" + strconv.Itoa(c)
						st, _, err := table.Claim(epoch, sid, locktable.ClaimID(c+1), locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive})
						if err != nil || st.State != locktable.Owner {
							b.Fatalf("Claim: %+v, %v", st, err)
						}
					}
				}
				elapsed += float64(time.Since(start))
				runtime.GC()
				runtime.ReadMemStats(&after)
				bytes += float64(after.HeapAlloc) - float64(before.HeapAlloc)
				if got := table.Holders(); got != n {
					b.Fatalf("%d holders, want %d", got, n)
				}
				runtime.KeepAlive(table)
			}
			b.ReportMetric(bytes/float64(b.N)/float64(n), "B/claim")
			b.ReportMetric(elapsed/float64(b.N)/float64(n), "ns/claim")
		})
	}
}
