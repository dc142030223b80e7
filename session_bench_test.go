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
		l.Release(context.Background())
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkOneClaimSession is what Client.Acquire would cost as a
// convenience over a one-claim session: a connection, HELLO, the claim,
// its release and the close per lock (issue 38; compare with
// BenchmarkClientAcquireRelease).
func BenchmarkOneClaimSession(b *testing.B) {
	addr := startServer(b)
	c := New(Config{Address: addr})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := c.OpenSession(ctx, SessionOptions{Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		cl, err := s.Acquire(ctx, "bench", Exclusive)
		if err != nil {
			b.Fatal(err)
		}
		cl.Release(ctx)
		s.Close()
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

// BenchmarkHandover: two holders alternate on one lock, each waiting in
// the queue while the other holds; an operation is one grant, so ns/op
// is about one handover (release, promotion push, grant).
func BenchmarkHandover(b *testing.B) {
	b.Run("session", func(b *testing.B) {
		addr := startServer(b)
		ss := []*Session{openReal(b, addr, time.Minute, "a"), openReal(b, addr, time.Minute, "b")}
		handover(b, func(i int) (func(), error) {
			cl, err := ss[i].Acquire(context.Background(), "hot", Exclusive)
			if err != nil {
				return nil, err
			}
			return func() { cl.Release(context.Background()) }, nil
		})
	})
	b.Run("v1", func(b *testing.B) {
		addr := startServer(b)
		c := New(Config{Address: addr})
		handover(b, func(int) (func(), error) {
			l, err := c.Acquire(context.Background(), "hot", time.Minute)
			if err != nil {
				return nil, err
			}
			return func() { l.Release(context.Background()) }, nil
		})
	})
}

func handover(b *testing.B, acquire func(i int) (release func(), err error)) {
	var grants atomic.Int64
	n := int64(b.N)
	done := make(chan error, 2)
	b.ResetTimer()
	for i := range 2 {
		go func() {
			for grants.Load() < n {
				release, err := acquire(i)
				if err != nil {
					done <- err
					return
				}
				grants.Add(1)
				release()
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(grants.Load()), "µs/grant")
}
