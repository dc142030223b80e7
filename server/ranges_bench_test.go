package server_test

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// setUnlock takes a write range lock on key, expects GRANTED, unlocks it
// and expects DONE: two round trips.
func (v *v2Conn) setUnlock(b testing.TB, key string) {
	for _, f := range []protocol.Frame{
		{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite, Owner: 1, End: protocol.MaxRangeEnd, Name: key},
		{Claim: 2, Op: protocol.RangeUnlock, Owner: 1, End: protocol.MaxRangeEnd, Name: key},
	} {
		v.out = protocol.AppendRange(v.out[:0], f)
		if _, err := v.Write(v.out); err != nil {
			b.Fatal(err)
		}
		if a := v.read(b); a.Type != protocol.TypeRangeAnswer || a.Status != protocol.RangeGranted && a.Status != protocol.RangeDone {
			b.Fatalf("RANGE %v answered %v", f.Op, a)
		}
	}
}

// BenchmarkRangeRelayed: an uncontended range lock and unlock (two round
// trips) on a session open at a cluster node that owns the key, and on
// one open at a node that relays it there, beside two one-byte echo
// round trips, alternating in one run:
//
//	go test -run '^$' -bench RangeRelayed -benchtime 5000x ./server
func BenchmarkRangeRelayed(b *testing.B) {
	owner, relay := benchHopPair(b)
	direct, relayed := dialV2Bench(b, owner, "direct"), dialV2Bench(b, relay, "relayed")
	defer direct.Close()
	defer relayed.Close()
	e, err := net.Dial("tcp", benchEcho(b))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var one [1]byte
	var d, r, raw []time.Duration
	i := 0
	for b.Loop() {
		i++
		key := "bench-" + strconv.Itoa(i%1000)
		start := time.Now()
		direct.setUnlock(b, key)
		d = append(d, time.Since(start))
		start = time.Now()
		relayed.setUnlock(b, key)
		r = append(r, time.Since(start))
		start = time.Now()
		for range 2 {
			e.Write(one[:])
			if _, err := io.ReadFull(e, one[:]); err != nil {
				b.Fatal(err)
			}
		}
		raw = append(raw, time.Since(start))
	}
	b.ReportMetric(float64(p50(d).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(p50(r).Microseconds()), "relayed-p50-µs")
	b.ReportMetric(float64(p50(raw).Microseconds()), "two-echo-rtt-p50-µs")
	// Two requests and two echo round trips each: per request, what the
	// relay adds in echo round trips.
	b.ReportMetric(float64(p50(r)-p50(d))/float64(p50(raw)), "extra-echo-rtt-per-request")
}
