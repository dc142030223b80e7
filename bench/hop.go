package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
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
// one after another on the same machine:
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
// Each pair goes direct first in even rounds and relayed first in odd
// ones, so that neither kind is always the one that starts while the
// other's close (of the connection, or of the claim) still runs on the
// owner.
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

	var m [8][]time.Duration
	const (
		v1Direct = iota
		v1Relayed
		v1Forwarded
		v2Direct
		v2Relayed
		echoRTT
		heartbeat
		ping
	)
	timed := func(k int, f func() error) error {
		time.Sleep(pace)
		start := time.Now()
		if err := f(); err != nil {
			return err
		}
		m[k] = append(m[k], time.Since(start))
		return nil
	}
	once := func(addr, name string) func() error {
		return func() error {
			c, err := hopAcquire(addr, name)
			if err == nil {
				defer c.Close()
			}
			return err
		}
	}
	accepted0, err := nodeMetric(nodes[0], "baton_connections_accepted_total")
	if err != nil {
		return err
	}
	buf := make([]byte, protocol.AcquiredLen)
	for i := range rounds {
		// Direct first in even rounds, relayed first in odd ones: each
		// then starts as often while the other's close still runs on the
		// owner.
		for _, k := range []int{i % 2, 1 - i%2} {
			addr := owner
			if k == 1 {
				addr = relay
			}
			if err := timed(v1Direct+k, once(addr, names[2*i+k])); err != nil {
				return fmt.Errorf("%s acquire: %w", [2]string{"direct", "relayed"}[k], err)
			}
		}
		if err := timed(v1Forwarded, once(fwd.addr, names[4*rounds+i])); err != nil {
			return fmt.Errorf("forwarded acquire: %w", err)
		}
		for _, k := range []int{i % 2, 1 - i%2} {
			s := []net.Conn{s1, s2}[k]
			id := uint32(2 + i)
			time.Sleep(pace)
			d, err := hopClaim(s, id, names[2*rounds+2*i+k])
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			m[v2Direct+k] = append(m[v2Direct+k], d)
			if err := hopRelease(s, id); err != nil {
				return fmt.Errorf("release: %w", err)
			}
		}
		if err := timed(echoRTT, func() error { return echoRoundTrip(ec) }); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		if err := timed(heartbeat, func() error {
			held.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := held.Write(protocol.AppendHeartbeat(nil)); err != nil {
				return err
			}
			_, err := io.ReadFull(held, buf)
			return err
		}); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		if err := timed(ping, func() error {
			s1.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := s1.Write(protocol.AppendPing(nil, uint64(i))); err != nil {
				return err
			}
			f, err := protocol.ReadServerFrameV2(s1)
			if err == nil && f.Type != protocol.TypePong {
				err = fmt.Errorf("got %v, want PONG", f)
			}
			return err
		}); err != nil {
			return fmt.Errorf("ping: %w", err)
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
	for _, r := range []struct {
		name string
		k    int
	}{
		{"v1 acquire, direct to the owner", v1Direct},
		{"v1 acquire, relayed", v1Relayed},
		{"v1 acquire, through a minimal forwarder to the owner", v1Forwarded},
		{"v2 claim, direct to the owner", v2Direct},
		{"v2 claim, relayed", v2Relayed},
		{"echo round trip (Go echo process)", echoRTT},
		{"v1 heartbeat round trip to the owner", heartbeat},
		{"v2 PING round trip to the owner", ping},
	} {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, us(p(m[r.k], 50)), us(p(m[r.k], 90)))
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
