package main

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// The link between a relaying node and a live owner breaks (a reset, or
// a cut that heals within the lease) while both keep their quorum
// contact: the relaying node re-asserts its claims at the same owner,
// which kept them and adopts them (docs/design/2026-12-07-cluster-relay.md, "When the owner is
// alive"). Real processes; the owner's other members reach it through a
// proxy the test breaks, on the protocol port only.

// nodeProxy forwards 127.0.0.3:port to 127.0.0.2:port for each port of a
// node that advertises 127.0.0.3, and can break the protocol port's
// connections.
type nodeProxy struct {
	t     *testing.T
	proto string // the protocol port

	mu     sync.Mutex
	cut    bool       // new protocol connections are refused
	links  []*hopLink // the protocol port's connections
	others []net.Conn // every other connection, closed at the end
}

// hopLink is one proxied protocol connection: in from the other member,
// out to the node; silent stops its forwarding both ways.
type hopLink struct {
	in, out net.Conn
	mu      sync.Mutex
	silent  bool
}

func (l *hopLink) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		l.mu.Lock()
		silent := l.silent
		l.mu.Unlock()
		if n > 0 && !silent {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !silent {
				dst.Close()
			}
			return
		}
	}
}

// freePortPair returns a port free on both 127.0.0.2 and 127.0.0.3.
func freePortPair(t *testing.T) string {
	t.Helper()
	for range 20 {
		a, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("127.0.0.2 not usable: %v", err)
		}
		_, port, _ := net.SplitHostPort(a.Addr().String())
		b, err := net.Listen("tcp", "127.0.0.3:"+port)
		a.Close()
		if err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no port free on both 127.0.0.2 and 127.0.0.3")
	return ""
}

// forward serves 127.0.0.3:port until the test ends.
func (p *nodeProxy) forward(port string) {
	ln, err := net.Listen("tcp", "127.0.0.3:"+port)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refuse := port == p.proto && p.cut
			p.mu.Unlock()
			if refuse {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", "127.0.0.2:"+port)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if port == p.proto {
				l := &hopLink{in: in, out: out}
				p.links = append(p.links, l)
				go l.pipe(out, in)
				go l.pipe(in, out)
			} else {
				p.others = append(p.others, in, out)
				go func() { io.Copy(out, in); out.Close() }()
				go func() { io.Copy(in, out); in.Close() }()
			}
			p.mu.Unlock()
		}
	}()
}

// reset closes every protocol connection on both sides.
func (p *nodeProxy) reset() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.in.Close()
		l.out.Close()
	}
	n := len(p.links)
	p.links = nil
	return n
}

// blackhole stops forwarding on every protocol connection and refuses new
// ones, as a partition does, until heal; the node never hears of it.
func (p *nodeProxy) blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, l := range p.links {
		l.mu.Lock()
		l.silent = true
		l.mu.Unlock()
	}
	n := len(p.links)
	p.links = nil
	return n
}

func (p *nodeProxy) heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// startProxiedOwner starts n1 bound on 127.0.0.2 and advertising
// 127.0.0.3, where a nodeProxy forwards to it, then n2 and n3.
func startProxiedOwner(t *testing.T) (nodes map[string]*clusterProc, p *nodeProxy) {
	t.Helper()
	proto, raft, adm := freePortPair(t), freePortPair(t), freePortPair(t)
	p = &nodeProxy{t: t, proto: proto}
	for _, port := range []string{proto, raft, adm} {
		p.forward(port)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.others {
			c.Close()
		}
	})
	n1 := startNode(t, "n1", "", "-listen", "127.0.0.2:"+proto, "-raft-listen", "127.0.0.2:"+raft,
		"-admin-listen", "127.0.0.2:"+adm, "-advertise-host", "127.0.0.3")
	n2 := startNode(t, "n2", n1.admin)
	n3 := startNode(t, "n3", n2.admin)
	nodes = map[string]*clusterProc{"n1": n1, "n2": n2, "n3": n3}
	for _, n := range nodes {
		waitStatus(t, n, "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	}
	return nodes, p
}

// grantedNow claims name on s until it is granted at once (a new
// cluster warms its names up, and queues meanwhile), and returns the
// claim id and token.
func grantedNow(t *testing.T, s *v2sess, id *uint32, name string) uint64 {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for {
		f := s.claimV2(t, id, name)
		if f.Type == protocol.TypeGranted {
			return f.Token
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s via %s: %v for %v", name, s.via, f, 2*opstest.Timeout)
		}
		if f.Type == protocol.TypeQueued {
			s.waitPromoted(t, *id)
		}
		s.Send(protocol.AppendRelease(nil, *id))
		for f := s.ReadV2(); f.Type != protocol.TypeReleased || f.Claim != *id; f = s.ReadV2() {
			if f.Type != protocol.TypePong { // one of waitPromoted's may follow
				t.Fatalf("%s via %s: %v, want RELEASED(%d)", name, s.via, f, *id)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestClusterV2RelayHopBreakKeepsClaims(t *testing.T) {
	// Serial (no t.Parallel): the cut must heal within the lease, a margin that load eats.
	nodes, p := startProxiedOwner(t)
	const lease = 4 * time.Second // the relay's patience is L/2
	name := nameOwnedBy(t, "n1", "hopcut")
	s := dialV2Session(t, nodes["n2"], lease)
	var id uint32
	tok := grantedNow(t, s, &id, name)
	w := dialV2Session(t, nodes["n1"], lease)
	var wid uint32
	if f := w.claimV2(t, &wid, name); f.Type != protocol.TypeQueued {
		t.Fatalf("waiter at the owner: %v, want QUEUED", f)
	}
	check := func(what string) {
		t.Helper()
		l := adminLock(t, nodes["n1"], name)
		if l.Holder == nil || l.Holder.Token != tok || len(l.Waiters) != 1 {
			t.Fatalf("after %s: the owner's lock is %+v, want the holder with token %d and one waiter", what, l, tok)
		}
	}
	check("the claims")

	// A reset: the owner and the relaying node both see the break. (The
	// sessions heartbeat, as clients do: the relaying node re-asserts
	// only while its client may still believe.)
	s.ping(t)
	start := time.Now()
	if n := p.reset(); n == 0 {
		t.Fatal("no hop connection to reset")
	}
	s.ping(t) // answered once the claim is adopted: no REVOKED first
	t.Logf("reset: the relayed session's PING answered after %v", time.Since(start))
	check("the reset")

	// A silent cut longer than the relay's patience, healed within the
	// lease: the owner never sees the old upstream break.
	s.ping(t)
	w.ping(t)
	start = time.Now()
	if n := p.blackhole(); n == 0 {
		t.Fatal("no hop connection to cut")
	}
	s.seq++
	s.Send(protocol.AppendPing(nil, s.seq))
	cut := lease/2 + 400*time.Millisecond
	for time.Since(start) < cut {
		time.Sleep(lease / 8)
		w.ping(t)
	}
	p.heal()
	if f := s.ReadV2(); f.Type != protocol.TypePong || f.Seq != s.seq {
		t.Fatalf("after the cut: %v, want PONG %d", f, s.seq)
	}
	t.Logf("silent cut healed after %v: the relayed session's PING answered after %v", cut, time.Since(start))
	check("the cut")
	// Still held a lease later: the claim lives on the new upstream.
	for range 8 {
		time.Sleep(lease / 8)
		s.ping(t)
		w.ping(t)
	}
	check("a lease more")

	s.Send(protocol.AppendRelease(nil, id))
	s.ExpectV2(protocol.TypeReleased, id, 0)
	if f := w.waitPromoted(t, wid); f.Token <= tok {
		t.Errorf("waiter promoted with token %d, want above %d", f.Token, tok)
	}
}
