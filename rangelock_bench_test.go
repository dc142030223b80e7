package baton

import (
	"context"
	"github.com/batonlock/baton/protocol"
	"slices"
	"testing"
	"time"
)

// BenchmarkRangeVsClaim: on one open session, a non-blocking range lock
// and its unlock, against a no-wait exclusive claim and its release on
// the same session, interleaved so that both see the same load. It
// reports each one's p50 and their ratio (the target is range/claim ≤
// 1.2).
func BenchmarkRangeVsClaim(b *testing.B) {
	addr := startServer(b)
	s := openReal(b, addr, time.Minute, "bench")
	ctx := context.Background()
	l := rangeLock{Key: "bench", Owner: 1, Type: protocol.LockWrite, Start: 0, End: 99}
	var rs, cs []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.setRangeWait(ctx, l, false); err != nil {
			b.Fatal(err)
		}
		if err := s.unlockRange(ctx, l); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		cl, err := s.TryAcquire(ctx, "bench", Exclusive)
		if err != nil {
			b.Fatal(err)
		}
		if err := cl.Release(ctx); err != nil {
			b.Fatal(err)
		}
		rs = append(rs, t1.Sub(t0))
		cs = append(cs, time.Since(t1))
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	r, c := p50(rs), p50(cs)
	b.ReportMetric(r, "range-p50-µs")
	b.ReportMetric(c, "claim-p50-µs")
	b.ReportMetric(r/c, "range/claim")
}
