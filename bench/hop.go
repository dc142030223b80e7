package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/protocol"
)

// "bench hop": the cost of relaying one hop in a three-node cluster,
// measured side by side with its floor in one run. Each of n rounds takes,
// one after another on the same machine and in an order drawn for the
// round:
//
//   - a version 1 acquire direct to the owner n1 and one relayed by n2
//     (connect, ACQUIRE, ACQUIRED; then close), each of a fresh name
//     owned by n1;
//   - a version 2 claim direct and one relayed (CLAIM → GRANTED on a
//     session open at n1 and one open at n2; then RELEASE → RELEASED,
//     not timed);
//   - the floor: one byte echoed by the harness's echo process (a
//     minimal Go server, a process of its own), a version 1 heartbeat
//     answered by the owner and a version 2 PING answered by the owner,
//     each on an open connection; and, to compare the relay with a
//     generic proxy, a version 1 acquire through the harness's forwarder
//     (a minimal Go TCP forwarder in front of the owner, with
//     connections dialled ahead, one per client connection).
//
// It prints the medians and p90s, and relayed − direct in units of each
// floor.
func hopMain(args []string) {
	fs := flag.NewFlagSet("hop", flag.ExitOnError)
	rounds := fs.Int("n", 400, "rounds")
	batonBin := fs.String("baton-bin", "", "baton binary (default: build ../cmd/baton)")
	pace := fs.Duration("pace", 0, "pause before each timed operation, so that what the previous one left running (closes, the hop pool's dials) ends first")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := runHop(ctx, *rounds, *batonBin, *pace); err != nil {
		log.Fatal(err)
	}
}

func runHop(ctx context.Context, rounds int, batonBin string, pace time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "baton-hop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{tmp: tmp}
	if e.batonBin, e.batonVersion, err = buildBaton(ctx, batonBin, tmp); err != nil {
		return err
	}
	echo, err := startEcho(self)
	if err != nil {
		return err
	}
	defer echo.stop()
	nodes, _, stop, err := startClusterNodes(ctx, e)
	if err != nil {
		return err
	}
	defer stop()
	if err := warmCluster(ctx, encodeCluster(nodes)); err != nil {
		return err
	}
	owner, relay := nodes[0].addr, nodes[1].addr
	fwd, err := startForwarder(self, owner)
	if err != nil {
		return err
	}
	defer fwd.stop()
	ring := cluster.NewRing(0, clusterNodes)
	var names []string
	// Per round three version 1 names and two version 2 names; then one
	// held by the heartbeat's connection and one for the upstream's
	// opening.
	want := 5*rounds + 2
	for i := 0; len(names) < want && i < 100*want; i++ {
		if n := fmt.Sprintf("hop-%d", i); ring.Owner(n) == nodes[0].id {
			names = append(names, n)
		}
	}
	if len(names) < want {
		return errors.New("not enough names owned by n1")
	}

	ec, err := net.Dial("tcp", echo.addr)
	if err != nil {
		return err
	}
	defer ec.Close()
	held, err := hopAcquire(owner, names[len(names)-1])
	if err != nil {
		return err
	}
	defer held.Close()
	s1, err := hopSession(owner)
	if err != nil {
		return err
	}
	defer s1.Close()
	s2, err := hopSession(relay)
	if err != nil {
		return err
	}
	defer s2.Close()
	// A session's first relayed claim opens its upstream: not measured.
	if _, err := hopClaim(s2, 1, names[len(names)-2]); err != nil {
		return err
	}

	const (
		v1Direct = iota
		v1Relayed
		v1Forwarded
		v2Direct
		v2Relayed
		echoRTT
		heartbeat
		ping
		kinds
	)
	kindNames := [kinds]string{
		v1Direct:    "v1 acquire, direct to the owner",
		v1Relayed:   "v1 acquire, relayed",
		v1Forwarded: "v1 acquire, through a minimal forwarder to the owner",
		v2Direct:    "v2 claim, direct to the owner",
		v2Relayed:   "v2 claim, relayed",
		echoRTT:     "echo round trip (Go echo process)",
		heartbeat:   "v1 heartbeat round trip to the owner",
		ping:        "v2 PING round trip to the owner",
	}
	// An operation returns how long its timed part took.
	type op func() (time.Duration, error)
	timed := func(f func() error) op {
		return func() (time.Duration, error) {
			start := time.Now()
			err := f()
			return time.Since(start), err
		}
	}
	once := func(addr, name string) op {
		return timed(func() error {
			c, err := hopAcquire(addr, name)
			if err == nil {
				defer c.Close()
			}
			return err
		})
	}
	buf := make([]byte, protocol.AcquiredLen)
	// The operations of round i, by kind.
	ops := func(i int) [kinds]op {
		claim := func(s net.Conn, name string) op {
			return func() (time.Duration, error) {
				id := uint32(2 + i)
				d, err := hopClaim(s, id, name)
				if err == nil {
					err = hopRelease(s, id) // not timed
				}
				return d, err
			}
		}
		return [kinds]op{
			v1Direct:    once(owner, names[2*i]),
			v1Relayed:   once(relay, names[2*i+1]),
			v1Forwarded: once(fwd.addr, names[4*rounds+i]),
			v2Direct:    claim(s1, names[2*rounds+2*i]),
			v2Relayed:   claim(s2, names[2*rounds+2*i+1]),
			echoRTT:     timed(func() error { return echoRoundTrip(ec) }),
			heartbeat: timed(func() error {
				held.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := held.Write(protocol.AppendHeartbeat(nil)); err != nil {
					return err
				}
				_, err := io.ReadFull(held, buf)
				return err
			}),
			ping: timed(func() error {
				s1.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := s1.Write(protocol.AppendPing(nil, uint64(i))); err != nil {
					return err
				}
				f, err := protocol.ReadServerFrameV2(s1)
				if err == nil && f.Type != protocol.TypePong {
					err = fmt.Errorf("got %v, want PONG", f)
				}
				return err
			}),
		}
	}
	accepted0, err := nodeMetric(nodes[0], "baton_connections_accepted_total")
	if err != nil {
		return err
	}
	// Each round runs its operations in an order of its own. What ran
	// just before an operation (a close, of a connection or of a claim,
	// still running on the owner; a process left awake or asleep) moves
	// its time by as much as the relay costs, and a fixed order gives
	// each kind the same predecessor every time. Seeded, so that runs
	// compare.
	var m [kinds][]time.Duration
	order := make([]int, kinds)
	for k := range order {
		order[k] = k
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range rounds {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		round := ops(i)
		for _, k := range order {
			time.Sleep(pace)
			d, err := round[k]()
			if err != nil {
				return fmt.Errorf("%s: %w", kindNames[k], err)
			}
			m[k] = append(m[k], d)
		}
	}
	accepted, err := nodeMetric(nodes[0], "baton_connections_accepted_total")
	if err != nil {
		return err
	}
	for _, d := range m {
		slices.Sort(d)
	}
	p := func(d []time.Duration, q int) time.Duration { return d[len(d)*q/100] }
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3) }
	var b strings.Builder
	fmt.Fprintf(&b, "%d rounds, pace %v, %s\n\n| | median | p90 |\n|---|---:|---:|\n", rounds, pace, e.batonVersion)
	for k, name := range kindNames {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, us(p(m[k], 50)), us(p(m[k], 90)))
	}
	x1 := p(m[v1Relayed], 50) - p(m[v1Direct], 50)
	x2 := p(m[v2Relayed], 50) - p(m[v2Direct], 50)
	e50, h50, g50 := p(m[echoRTT], 50), p(m[heartbeat], 50), p(m[ping], 50)
	fmt.Fprintf(&b, "\nrelayed − direct, v1: %s = %.2f echo, %.2f heartbeat round trips\n", us(x1), float64(x1)/float64(e50), float64(x1)/float64(h50))
	xf := p(m[v1Forwarded], 50) - p(m[v1Direct], 50)
	fmt.Fprintf(&b, "forwarded − direct, v1 (a minimal Go forwarder): %s = %.2f echo round trips; relayed − forwarded: %s\n",
		us(xf), float64(xf)/float64(e50), us(x1-xf))
	fmt.Fprintf(&b, "relayed − direct, v2: %s = %.2f echo, %.2f PING round trips\n", us(x2), float64(x2)/float64(e50), float64(x2)/float64(g50))
	// Each direct acquire is a connection; each relayed one was another
	// until hops were reused.
	fmt.Fprintf(&b, "the owner accepted %.0f connections in the %d rounds (%d direct v1 acquires)\n", accepted-accepted0, rounds, rounds)
	fmt.Print(b.String())
	return nil
}

// hopAcquire connects to addr and acquires name (version 1).
func hopAcquire(addr, name string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: uint32(batonEverydayLease / time.Millisecond), Name: name})); err != nil {
		c.Close()
		return nil, err
	}
	f, err := protocol.ReadServerFrame(c)
	if err == nil && f.Type != protocol.TypeAcquired {
		err = fmt.Errorf("%s: got %v, want ACQUIRED", name, f)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// hopSession opens a version 2 session at addr.
func hopSession(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(protocol.AppendHello(protocol.AppendPreamble(nil), uint32(batonEverydayLease/time.Millisecond), "hop")); err != nil {
		c.Close()
		return nil, err
	}
	f, err := protocol.ReadServerFrameV2(c)
	if err == nil && f.Type != protocol.TypeWelcome {
		err = fmt.Errorf("got %v, want WELCOME", f)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// hopClaim claims name exclusively on session s and times CLAIM → GRANTED.
func hopClaim(s net.Conn, id uint32, name string) (time.Duration, error) {
	s.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := s.Write(protocol.AppendClaim(nil, id, protocol.ModeExclusive, 0, 0, name)); err != nil {
		return 0, err
	}
	f, err := protocol.ReadServerFrameV2(s)
	d := time.Since(start)
	if err == nil && (f.Type != protocol.TypeGranted || f.Claim != id) {
		err = fmt.Errorf("%s: got %v, want GRANTED", name, f)
	}
	return d, err
}

// hopRelease releases claim id on session s.
func hopRelease(s net.Conn, id uint32) error {
	s.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Write(protocol.AppendRelease(nil, id)); err != nil {
		return err
	}
	f, err := protocol.ReadServerFrameV2(s)
	if err == nil && (f.Type != protocol.TypeReleased || f.Claim != id) {
		err = fmt.Errorf("got %v, want RELEASED", f)
	}
	return err
}

// nodeMetric reads an unlabelled metric from a node's /metrics.
func nodeMetric(n clusterNode, metric string) (float64, error) {
	resp, err := http.Get("http://" + n.ops + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s in its metrics", n.id, metric)
}
