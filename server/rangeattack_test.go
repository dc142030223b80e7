package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// The range attack of issue 33: one connection sends thousands of
// waiting write requests of distinct owners on one byte that another
// session holds, in one write. Each new waiting request used to search
// the whole queue again and again under the server-wide mutex.

const (
	attackRequests = 2400
	attackKey      = "attacked"
)

// attackMode is what an attacking round sends for each of its owners.
type attackMode int

const (
	attackWait     attackMode = iota // a waiting write set on byte 1
	attackWaitHeld                   // a set of byte 100+i of its own, then the waiting set: the deadlock search has edges to follow
	attackQuery                      // a query of byte 1 instead: the same bytes each way, no queue (the control)
)

// rangeAttack opens a version 2 session at addr and sends, in one write,
// n RANGE requests of distinct owners on byte 1 of attackKey as mode
// says. It returns the answers to them by status and how long they took
// to come, and leaves the session open: the caller closes conn.
func rangeAttack(tb testing.TB, addr string, n int, mode attackMode) (conn net.Conn, answers map[protocol.RangeStatus]int, took time.Duration) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write(openingV2(time.Minute, "attacker")); err != nil {
		tb.Fatal(err)
	}
	if f, err := protocol.ReadServerFrameV2(r); err != nil || f.Type != protocol.TypeWelcome {
		tb.Fatalf("attacker's opening answered %v, %v", f, err)
	}
	var out []byte
	for i := range n {
		owner := uint64(i + 1)
		if mode == attackWaitHeld {
			out = protocol.AppendRange(out, protocol.Frame{Claim: uint32(2*i + 2), Op: protocol.RangeSet, LockType: protocol.LockWrite,
				Owner: owner, Start: 100 + owner, End: 100 + owner, Name: attackKey})
		}
		op, flags := protocol.RangeSet, protocol.RangeWait
		if mode == attackQuery {
			op, flags = protocol.RangeQuery, 0
		}
		out = protocol.AppendRange(out, protocol.Frame{Claim: uint32(2*i + 1), Op: op, Flags: flags,
			LockType: protocol.LockWrite, Owner: owner, Start: 1, End: 1, Name: attackKey})
	}
	start := time.Now()
	werr := make(chan error, 1)
	go func() { _, err := c.Write(out); werr <- err }()
	answers = map[protocol.RangeStatus]int{}
	for got := 0; got < n; {
		f, err := protocol.ReadServerFrameV2(r)
		if err != nil {
			tb.Fatalf("attacker: %d of %d answers after %v: %v", got, n, time.Since(start), err)
		}
		if f.Type != protocol.TypeRangeAnswer {
			tb.Fatalf("attacker got %v", f)
		}
		if f.Claim%2 == 1 {
			answers[f.Status]++
			got++
		} else if f.Status != protocol.RangeGranted {
			tb.Fatalf("attacker's own byte answered %v", f)
		}
	}
	took = time.Since(start)
	if err := <-werr; err != nil {
		tb.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	return c, answers, took
}

// holdAttackedByte opens the session that holds byte 1 of attackKey.
func holdAttackedByte(tb testing.TB, addr string) *v2Conn {
	h := dialV2Bench(tb, addr, "holder")
	h.out = protocol.AppendRange(h.out[:0], protocol.Frame{Claim: 1, Op: protocol.RangeSet, LockType: protocol.LockWrite,
		Owner: 1, Start: 1, End: 1, Name: attackKey})
	if _, err := h.Write(h.out); err != nil {
		tb.Fatal(err)
	}
	if f := h.read(tb); f.Status != protocol.RangeGranted {
		tb.Fatalf("holder's set answered %v", f)
	}
	return h
}

// probe claims and releases an unrelated name on v, timing each round
// trip pair, at least min times and then until stop is closed (at once
// when stop is nil).
func probe(tb testing.TB, v *v2Conn, stop <-chan struct{}, min int) []time.Duration {
	var ds []time.Duration
	for i := 0; ; i++ {
		if i >= min {
			if stop == nil {
				return ds
			}
			select {
			case <-stop:
				return ds
			default:
			}
		}
		start := time.Now()
		v.claimRelease(tb, "unrelated")
		ds = append(ds, time.Since(start))
	}
}

// TestRangeAttackDoesNotStall: the attack, against a server with its
// default limits, is answered within a few seconds (it took 43 s of
// server CPU before), the requests past the session's cap are refused
// with status 0x0e, and an unrelated claim's round trips, and a holder
// with a one-second lease, carry on meanwhile.
func TestRangeAttackDoesNotStall(t *testing.T) {
	ts := startServer(t)
	h := holdAttackedByte(t, ts.addr)
	defer h.Close()
	p := dialV2Bench(t, ts.addr, "prober")
	defer p.Close()
	// A holder with a short lease that pings every 100 ms: a stall of a
	// second would cost it its claim.
	kept := ts.dialV2(t, time.Second, "kept")
	kept.mustHold(1, protocol.ModeExclusive, 0, "kept")

	quiet := probe(t, p, nil, 200)
	stop, probed := make(chan struct{}), make(chan []time.Duration, 1)
	// The goroutines report even when a helper's Fatal ends them.
	go func() {
		var ds []time.Duration
		defer func() { probed <- ds }()
		ds = probe(t, p, stop, 1)
	}()
	pings := make(chan error, 1)
	go func() {
		err := errors.New("the pinger failed")
		defer func() { pings <- err }()
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				err = nil
				return
			case <-time.After(100 * time.Millisecond):
			}
			kept.mustWrite(protocol.AppendPing(nil, seq))
			var f protocol.Frame
			if f, err = kept.readV2(time.Second); err != nil || f.Type != protocol.TypePong {
				err = fmt.Errorf("ping %d answered %v, %v", seq, f, err)
				return
			}
		}
	}()
	c, answers, took := rangeAttack(t, ts.addr, attackRequests, attackWait)
	defer c.Close()
	close(stop)
	during := <-probed
	if err := <-pings; err != nil {
		t.Errorf("the one-second holder's pings: %v", err)
	}
	if len(during) == 0 {
		t.Fatal("the probe failed during the attack")
	}
	t.Logf("%d waiting requests answered in %v: %v; unrelated claim+release: quiet p50 %v p99 %v (%d), during the attack p50 %v p99 %v max %v (%d)",
		attackRequests, took, answers, p50(quiet), p99(quiet), len(quiet), p50(during), p99(during), during[len(during)-1], len(during))
	if took > 10*time.Second {
		t.Errorf("the attack's answers took %v, want well under 10 s", took)
	}
	if worst := during[len(during)-1]; worst > time.Second {
		t.Errorf("an unrelated claim+release took %v during the attack, want well under 1 s", worst)
	}
	if answers[protocol.RangeQueued] != server.DefaultRangeWaitingPerSession || answers[protocol.RangeLimit] != attackRequests-server.DefaultRangeWaitingPerSession {
		t.Errorf("answers %v, want %d queued and the rest refused 0x0e", answers, server.DefaultRangeWaitingPerSession)
	}
	// The one-second holder still holds: its claim is busy to others.
	p.out = protocol.AppendClaim(p.out[:0], 2, protocol.ModeExclusive, 0, protocol.ClaimNoWait, "kept")
	p.Write(p.out)
	if f := p.read(t); f.Type != protocol.TypeBusy {
		t.Errorf("the one-second holder's claim: another session's no-wait claim answered %v, want BUSY", f)
	}
	ts.events.waitCount(t, attackRequests-server.DefaultRangeWaitingPerSession, func(e server.Event) bool {
		return e.Kind == server.EventRangeRefused && e.Action == "waiting_per_session"
	})
}

// BenchmarkRangeAttack measures an unrelated claim+release (two round
// trips) while one connection repeats the attack (opens a session, sends
// 2,400 waiting sets of distinct owners on one byte, reads the answers,
// hangs up), beside the same probe with the attacker paused, in one run:
//
//	go test -run '^$' -bench RangeAttack -benchtime 2000x ./server
//
// caps: the server's default caps, or none (-1: every request queues,
// which shows the table's own cost); held: each attacking owner first
// holds a byte of its own, so that every deadlock search has a queue of
// owners to follow; query-control: the same rounds of queries, which
// queue nothing, to tell what the machine's load and the traffic itself
// cost the probe from what the range table adds.
func BenchmarkRangeAttack(b *testing.B) {
	for _, bc := range []struct {
		name string
		caps int
		mode attackMode
	}{
		{"query-control", 0, attackQuery},
		{"default-caps", 0, attackWait}, {"default-caps-held", 0, attackWaitHeld},
		{"no-caps", -1, attackWait}, {"no-caps-held", -1, attackWaitHeld},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &server.Server{RangeWaitingPerSession: bc.caps, RangeWaitingPerOwner: bc.caps, RangeOwnersPerSession: bc.caps}
			time.Sleep(time.Until(server.TokenGate(srv)))
			go srv.Serve(ln)
			defer srv.Close()
			addr := ln.Addr().String()
			h := holdAttackedByte(b, addr)
			defer h.Close()
			p := dialV2Bench(b, addr, "prober")
			defer p.Close()

			var mu sync.Mutex // guards attacking and rounds
			attacking, rounds, worstRound := false, 0, time.Duration(0)
			on, stop, done := make(chan bool), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case a := <-on:
						mu.Lock()
						attacking = a
						mu.Unlock()
					default:
					}
					mu.Lock()
					a := attacking
					mu.Unlock()
					if !a {
						time.Sleep(time.Millisecond)
						continue
					}
					c, _, took := rangeAttack(b, addr, attackRequests, bc.mode)
					c.Close()
					mu.Lock()
					rounds++
					worstRound = max(worstRound, took)
					mu.Unlock()
				}
			}()
			var quiet, attack []time.Duration
			const phase = 200 // probes per phase
			i := 0
			for b.Loop() {
				if i%phase == 0 {
					on <- (i/phase)%2 == 1
					time.Sleep(20 * time.Millisecond) // a round under way, or the last one over
				}
				start := time.Now()
				p.claimRelease(b, "unrelated-"+strconv.Itoa(i%2))
				if d := time.Since(start); (i/phase)%2 == 1 {
					attack = append(attack, d)
				} else {
					quiet = append(quiet, d)
				}
				i++
			}
			close(stop)
			<-done
			if len(attack) == 0 {
				return
			}
			b.ReportMetric(float64(p50(quiet).Microseconds()), "quiet-p50-µs")
			b.ReportMetric(float64(p99(quiet).Microseconds()), "quiet-p99-µs")
			b.ReportMetric(float64(p50(attack).Microseconds()), "attack-p50-µs")
			b.ReportMetric(float64(p99(attack).Microseconds()), "attack-p99-µs")
			b.ReportMetric(float64(rounds), "attack-rounds")
			b.ReportMetric(float64(worstRound.Milliseconds()), "slowest-round-ms")
		})
	}
}
