package server_test

// Benchmarks of protocol version 2:
//
//	go test -run '^$' -bench V2 -benchtime 20000x ./server
//
// BenchmarkV2HeldClaimMemory holds sessions × claims in a child server
// process (default 100 × 1,000; BATON_BENCH_V2_SESSIONS and
// BATON_BENCH_V2_CLAIMS change it, e.g. 1000 × 1000 for a million).

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// v2Conn is a benchmark client session: preamble and HELLO sent, WELCOME
// read.
type v2Conn struct {
	net.Conn
	r   *bufio.Reader
	out []byte
}

func dialV2Bench(b testing.TB, addr, label string) *v2Conn {
	v, err := dialV2Lease(addr, label, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// dialV2Lease opens a version 2 session with the given lease; it calls
// nothing on a testing.TB, so any goroutine may use it.
func dialV2Lease(addr, label string, lease time.Duration) (*v2Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	v := &v2Conn{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
	if _, err := c.Write(openingV2(lease, label)); err != nil {
		c.Close()
		return nil, err
	}
	if f, err := protocol.ReadServerFrameV2(v.r); err != nil || f.Type != protocol.TypeWelcome {
		c.Close()
		return nil, fmt.Errorf("opening answered %v, %v", f, err)
	}
	return v, nil
}

func (v *v2Conn) read(b testing.TB) protocol.Frame {
	f, err := protocol.ReadServerFrameV2(v.r)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// claimRelease claims name exclusively, expects GRANTED, releases and
// expects RELEASED: two round trips.
func (v *v2Conn) claimRelease(b testing.TB, name string) {
	v.out = protocol.AppendClaim(v.out[:0], 1, protocol.ModeExclusive, 0, 0, name)
	if _, err := v.Write(v.out); err != nil {
		b.Fatal(err)
	}
	if f := v.read(b); f.Type != protocol.TypeGranted {
		b.Fatalf("CLAIM answered %v", f)
	}
	v.out = protocol.AppendRelease(v.out[:0], 1)
	if _, err := v.Write(v.out); err != nil {
		b.Fatal(err)
	}
	if f := v.read(b); f.Type != protocol.TypeReleased {
		b.Fatalf("RELEASE answered %v", f)
	}
}

// BenchmarkV2ClaimRelease: uncontended CLAIM + RELEASE on one open
// session over loopback (two round trips), beside two round trips of a
// raw echo in the same run.
func BenchmarkV2ClaimRelease(b *testing.B) {
	addr, echoAddr := benchServer(b), benchEcho(b)
	v := dialV2Bench(b, addr, "bench")
	defer v.Close()
	e, err := net.Dial("tcp", echoAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var one [1]byte
	cr := make([]time.Duration, 0, b.N)
	raw := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		v.claimRelease(b, "uncontended-"+strconv.Itoa(i%1000))
		cr = append(cr, time.Since(start))

		start = time.Now()
		for range 2 {
			e.Write(one[:])
			if _, err := io.ReadFull(e, one[:]); err != nil {
				b.Fatal(err)
			}
		}
		raw = append(raw, time.Since(start))
	}
	report(b, cr, raw, "two-echo-rtt")
}

// BenchmarkV2Throughput: 64 workers, a session each, claim and release
// exclusively as fast as they can, over 1,000 names (/spread) or one
// name (/hot); it reports claim+release pairs per second.
func BenchmarkV2Throughput(b *testing.B) {
	for _, tc := range []struct {
		name  string
		names int
	}{{"spread", 1000}, {"hot", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			addr := benchServer(b)
			const workers = 64
			conns := make([]*v2Conn, workers)
			for i := range conns {
				conns[i] = dialV2Bench(b, addr, "w"+strconv.Itoa(i))
				defer conns[i].Close()
			}
			var next atomic.Int64
			n := int64(b.N)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, v := range conns {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
					for next.Add(1) <= n {
						v.claimReleaseWait(b, "tp-"+strconv.Itoa(rng.IntN(tc.names)))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
		})
	}
}

// claimReleaseWait is claimRelease for a lock that may be held: the claim
// may be QUEUED, then PROMOTED.
func (v *v2Conn) claimReleaseWait(b testing.TB, name string) {
	v.out = protocol.AppendClaim(v.out[:0], 1, protocol.ModeExclusive, 0, 0, name)
	if _, err := v.Write(v.out); err != nil {
		b.Error(err)
		return
	}
	switch f := v.read(b); f.Type {
	case protocol.TypeGranted:
	case protocol.TypeQueued:
		if f := v.read(b); f.Type != protocol.TypePromoted {
			b.Errorf("QUEUED claim then %v", f)
			return
		}
	default:
		b.Errorf("CLAIM answered %v", f)
		return
	}
	v.out = protocol.AppendRelease(v.out[:0], 1)
	if _, err := v.Write(v.out); err != nil {
		b.Error(err)
		return
	}
	if f := v.read(b); f.Type != protocol.TypeReleased {
		b.Errorf("RELEASE answered %v", f)
	}
}

// BenchmarkV2HeldClaimMemory holds sessions × claims exclusive claims,
// each on its own name, in a child server process and reports the
// child's heap plus goroutine stacks per held claim, and the time to
// take them all.
func BenchmarkV2HeldClaimMemory(b *testing.B) {
	sessions, claims := envInt("BATON_BENCH_V2_SESSIONS", 100), envInt("BATON_BENCH_V2_CLAIMS", 1000)
	perClaim, rssPerClaim, took := measureHeldClaims(b, sessions, claims)
	for b.Loop() {
		// The measurement above is one experiment, not a loop body.
	}
	b.ReportMetric(perClaim, "bytes/claim")
	b.ReportMetric(rssPerClaim, "rss-bytes/claim")
	b.ReportMetric(took.Seconds(), "s-to-take-all")
	b.ReportMetric(float64(sessions*claims), "claims")
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// measureHeldClaims returns the child's live heap plus stacks per claim,
// its resident set per claim (what the operating system sees, garbage
// not yet collected included), and the time to take them. Its sessions'
// lease outlasts the run, so no claim expires while others are taken;
// the first failure stops every worker at once.
func measureHeldClaims(b *testing.B, sessions, claims int) (float64, float64, time.Duration) {
	b.Helper()
	child := startBenchChild(b)
	defer child.stop()
	addr := child.addr
	before, _, rss0 := child.mem()
	conns := make([]*v2Conn, sessions)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var (
		failOnce sync.Once
		failed   = make(chan struct{})
		failure  error
	)
	fail := func(err error) {
		failOnce.Do(func() { failure = err; close(failed) })
	}
	take := func(s int) error {
		v, err := dialV2Lease(addr, "s"+strconv.Itoa(s), heldClaimLease)
		if err != nil {
			return err
		}
		conns[s] = v
		var buf []byte
		for c := range claims {
			buf = protocol.AppendClaim(buf, uint32(c+1), protocol.ModeExclusive, 0, 0,
				"held-"+strconv.Itoa(s)+"-"+strconv.Itoa(c))
		}
		go v.Write(buf)
		for range claims {
			f, err := protocol.ReadServerFrameV2(v.r)
			if err != nil {
				return err
			}
			if f.Type != protocol.TypeGranted {
				return fmt.Errorf("session %d: CLAIM answered %v, want GRANTED", s, f)
			}
		}
		v.r = nil // the client keeps the socket only
		return nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for s := range work {
				if err := take(s); err != nil {
					fail(err)
					return
				}
			}
		})
	}
feed:
	for s := range sessions {
		select {
		case work <- s:
		case <-failed:
			break feed
		}
	}
	close(work)
	wg.Wait()
	took := time.Since(start)
	if failure != nil {
		b.Fatal(failure)
	}
	after, locks, rss := child.mem()
	if locks != sessions*claims {
		b.Fatalf("child holds %d locks, want %d", locks, sessions*claims)
	}
	n := float64(sessions * claims)
	return float64(after-before) / n, float64(rss-rss0) / n, took
}

// heldClaimLease outlasts any run of BenchmarkV2HeldClaimMemory (ten
// million claims take minutes on two cores).
const heldClaimLease = 6 * time.Hour

// BenchmarkV2Handover: a holder sends RELEASE; the clock stops when the
// waiting claim of another session has read PROMOTED. Version 1's
// handover (the owner closes its connection, the waiter reads ACQUIRED)
// is measured in the same run, alternating, as the reference.
func BenchmarkV2Handover(b *testing.B) {
	addr := benchServer(b)
	sessions := [2]*v2Conn{dialV2Bench(b, addr, "a"), dialV2Bench(b, addr, "b")}
	defer sessions[0].Close()
	defer sessions[1].Close()
	claim := func(v *v2Conn, want protocol.Type) {
		v.out = protocol.AppendClaim(v.out[:0], 1, protocol.ModeExclusive, 0, 0, "v2-handover")
		v.Write(v.out)
		if f := v.read(b); f.Type != want {
			b.Fatalf("CLAIM answered %v, want %v", f, want)
		}
	}
	claim(sessions[0], protocol.TypeGranted)
	v1owner, _ := benchAcquire(b, addr, "v1-handover")
	v2 := make([]time.Duration, 0, b.N)
	v1 := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		holder, waiter := sessions[i%2], sessions[(i+1)%2]
		i++
		claim(waiter, protocol.TypeQueued)
		start := time.Now()
		holder.out = protocol.AppendRelease(holder.out[:0], 1)
		holder.Write(holder.out)
		if f := waiter.read(b); f.Type != protocol.TypePromoted {
			b.Fatalf("waiter got %v, want PROMOTED", f)
		}
		v2 = append(v2, time.Since(start))
		if f := holder.read(b); f.Type != protocol.TypeReleased {
			b.Fatalf("holder got %v, want RELEASED", f)
		}

		w, f := benchAcquire(b, addr, "v1-handover")
		if f.Type != protocol.TypeWaiting {
			b.Fatalf("v1 waiter got %v", f)
		}
		start = time.Now()
		v1owner.Close()
		if f, err := protocol.ReadServerFrame(w); err != nil || f.Type != protocol.TypeAcquired {
			b.Fatalf("v1 push: %v %v", f, err)
		}
		v1 = append(v1, time.Since(start))
		v1owner = w
	}
	v1owner.Close()
	report(b, v2, v1, "v1-handover")
}
