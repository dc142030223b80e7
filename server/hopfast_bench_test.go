package server_test

import (
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// benchHopPair starts an owner and a relay node that forwards every name
// to it, in this process.
func benchHopPair(b *testing.B) (owner, relay string) {
	b.Helper()
	start := func(srv *server.Server) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Until(server.TokenGate(srv)))
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	owner = start(&server.Server{
		Router:   &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }},
		TrustHop: trustAll,
	})
	relay = start(&server.Server{
		Router: &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner} }},
	})
	return owner, relay
}

// BenchmarkRelayedAcquire: an uncontended version 1 acquire (connect,
// ACQUIRE, read ACQUIRED, close) relayed one hop through the pool, beside
// the same direct to the owner, a heartbeat round trip to the owner on an
// open connection and a one-byte echo round trip, in one run, each round
// in an order drawn for it:
//
//	go test -run '^$' -bench RelayedAcquire -benchtime 2000x ./server
//
// Sub-benchmarks direct and relayed run one kind alone (for strace -c or
// a profile of one path).
func BenchmarkRelayedAcquire(b *testing.B) {
	owner, relay := benchHopPair(b)
	echoAddr := benchEcho(b)
	once := func(addr string, i int) time.Duration {
		start := time.Now()
		c, f := benchAcquire(b, addr, "hop-"+strconv.Itoa(i))
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("got %v", f)
		}
		el := time.Since(start)
		c.Close()
		return el
	}
	for i := range 20 { // the pool fills after the first relay
		once(relay, -1-i)
	}
	b.Run("direct", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			once(owner, 1_000_000+i)
		}
	})
	b.Run("relayed", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			once(relay, 2_000_000+i)
		}
	})
	b.Run("side-by-side", func(b *testing.B) {
		held, f := benchAcquire(b, owner, "held")
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("got %v", f)
		}
		defer held.Close()
		e, err := net.Dial("tcp", echoAddr)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		one := make([]byte, protocol.AcquiredLen)
		roundTrip := func(c net.Conn, msg []byte, answer int) time.Duration {
			start := time.Now()
			c.Write(msg)
			if _, err := io.ReadFull(c, one[:answer]); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		const direct, relayed, echo, heartbeat = 0, 1, 2, 3
		kinds := [...]func(i int) time.Duration{
			direct:    func(i int) time.Duration { return once(owner, 3_000_000+i) },
			relayed:   func(i int) time.Duration { return once(relay, 4_000_000+i) },
			echo:      func(int) time.Duration { return roundTrip(e, one[:1], 1) },
			heartbeat: func(int) time.Duration { return roundTrip(held, protocol.AppendHeartbeat(nil), len(one)) },
		}
		// Each round in an order of its own: what ran just before (a
		// close still running on the owner) moves a time by as much as
		// the relay costs, and a fixed order gives each kind the same
		// predecessor every time.
		var times [len(kinds)][]time.Duration
		order := []int{direct, relayed, echo, heartbeat}
		rng := rand.New(rand.NewPCG(1, 2))
		i := 0
		for b.Loop() {
			i++
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			for _, k := range order {
				times[k] = append(times[k], kinds[k](i))
			}
		}
		d, r, rtt, hb := times[direct], times[relayed], times[echo], times[heartbeat]
		dm, rm, hbm, em := p50(d), p50(r), p50(hb), p50(rtt)
		b.ReportMetric(float64(dm.Nanoseconds())/1e3, "direct-p50-µs")
		b.ReportMetric(float64(rm.Nanoseconds())/1e3, "relayed-p50-µs")
		b.ReportMetric(float64(hbm.Nanoseconds())/1e3, "heartbeat-p50-µs")
		b.ReportMetric(float64(em.Nanoseconds())/1e3, "echo-p50-µs")
		b.ReportMetric(float64(rm-dm)/float64(hbm), "extra/heartbeat")
		b.ReportMetric(float64(rm-dm)/float64(em), "extra/echo")
	})
}
