package baton

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of the client against the real server, in process:
//
//	go test -run '^$' -bench 'Session|ClientAcquire' -benchtime 2s .
//
// Each reports µs per operation (claim + release); on 2 shared cores the
// server and the client compete for the same CPUs.

// BenchmarkSessionClaimRelease: uncontended exclusive claim and release
// on an open session, one after the other: two round trips.
func BenchmarkSessionClaimRelease(b *testing.B) {
	for _, m := range []Mode{Exclusive, Shared, Semaphore(4)} {
		b.Run(m.String(), func(b *testing.B) {
			addr := startServer(b)
			s := openReal(b, addr, time.Minute, "bench")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cl, err := s.Acquire(ctx, "bench", m)
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
		})
	}
}

// BenchmarkClientAcquireRelease is the same with the version 1 client:
// a connection per claim.
func BenchmarkClientAcquireRelease(b *testing.B) {
	addr := startServer(b)
	c := New(Config{Address: addr})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkSessionParallel: 64 goroutines on one session, claim and
// release over 1,000 names; reports claims per second.
func BenchmarkSessionParallel(b *testing.B) {
	addr := startServer(b)
	s := openReal(b, addr, time.Minute, "bench")
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(64 / max(1, testingProcs()))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := fmt.Sprint("n", next.Add(1)%1000)
			cl, err := s.Acquire(ctx, name, Exclusive)
			if err != nil {
				b.Error(err)
				return
			}
			cl.Release(ctx)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
