package main

// Leader election on a cluster of real processes (issue #37): candidates
// claim one name with a value, watchers watch it, one through a node
// that does not own the name; the leader's death, a planned move of the
// name and the owner's kill -9 each keep every watcher on the newest
// leader, never an older one.

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// electLease is the lease of every session of these tests.
const electLease = 2 * time.Second

// valuesConn is a version 2 session with values, pinged every fifth of
// its lease, whose frames a goroutine reads into frames, stamped.
type valuesConn struct {
	net.Conn
	wmu    sync.Mutex
	frames chan framed
}

// dialValuesConn opens a values session with node addr.
func dialValuesConn(addr, label string) (*valuesConn, error) {
	c, err := net.DialTimeout("tcp", addr, opstest.Timeout)
	if err != nil {
		return nil, err
	}
	hello := protocol.Frame{Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(electLease), Flags: protocol.HelloValues, Label: label}
	c.SetDeadline(time.Now().Add(opstest.Timeout))
	if _, err := c.Write(protocol.AppendFrame(protocol.AppendPreamble(nil), hello)); err != nil {
		c.Close()
		return nil, err
	}
	f, err := protocol.ReadServerFrameV2Max(c, protocol.MaxValuesFrameLen)
	if err == nil && (f.Type != protocol.TypeWelcome || f.Flags&protocol.WelcomeValues == 0) {
		err = fmt.Errorf("HELLO with values answered %v", f)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	vc := &valuesConn{Conn: c, frames: make(chan framed, 1024)}
	go func() {
		defer close(vc.frames)
		for {
			f, err := protocol.ReadServerFrameV2Max(c, protocol.MaxValuesFrameLen)
			vc.frames <- framed{v2: f, at: time.Now(), err: err}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for seq := uint64(1); ; seq++ {
			time.Sleep(electLease / 5)
			if vc.send(protocol.AppendPing(nil, seq)) != nil {
				return
			}
		}
	}()
	return vc, nil
}

func (vc *valuesConn) send(b []byte) error {
	vc.wmu.Lock()
	defer vc.wmu.Unlock()
	vc.SetWriteDeadline(time.Now().Add(opstest.Timeout))
	_, err := vc.Write(b)
	return err
}

// leadership is a grant to a candidate: its token and when it came.
type leadership struct {
	who   string
	token uint64
	at    time.Time
}

// electCandidate claims name with value via addr until its session ends;
// each grant goes to granted. A claim refused 0x03 (a warm-up) or
// revoked (its owner went) is made again.
func electCandidate(t *testing.T, addr, name, value string, granted chan<- leadership) *valuesConn {
	t.Helper()
	vc, err := dialValuesConn(addr, value)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vc.Close() })
	go func() {
		id := uint32(1)
		claim := func() {
			vc.send(protocol.AppendClaimValue(nil, id, protocol.ModeExclusive, 0, 0, name, value))
		}
		claim()
		for fr := range vc.frames {
			f := fr.v2
			switch {
			case fr.err != nil:
				return
			case f.Type == protocol.TypeGranted || f.Type == protocol.TypePromoted:
				granted <- leadership{who: value, token: f.Token, at: fr.at}
			case f.Type == protocol.TypeRefused && f.Code == protocol.CodeNotOwner, f.Type == protocol.TypeRevoked:
				time.Sleep(20 * time.Millisecond)
				id++
				claim()
			}
		}
	}()
	return vc
}

// sighting is a leader a watcher delivered (token 0: none).
type sighting struct {
	token uint64
	value string
	at    time.Time
}

// watcher watches name as a client of this revision must: it keeps the
// holders, delivers the leader after each change once synced, forgets
// everything at a reset, and watches again when refused 0x03 or, when
// its connection ends, at the next of addrs. It records every leader it
// delivers and every held frame older than one it was told before.
type watcher struct {
	name   string
	mu     sync.Mutex
	seen   []sighting
	resets int
	errs   []string
	newest uint64 // the largest token told in a held frame
}

func startWatcher(t *testing.T, label, name string, addrs ...string) *watcher {
	t.Helper()
	w := &watcher{name: name}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	vc, err := dialValuesConn(addrs[0], label)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for i := 0; ; {
			w.watch(vc, stop)
			vc.Close()
			select {
			case <-stop:
				return
			default:
			}
			// Its node is gone: watch again at the next one.
			for {
				i = (i + 1) % len(addrs)
				if vc, err = dialValuesConn(addrs[i], label); err == nil {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	return w
}

// watch runs one watch on vc until its connection ends or stop.
func (w *watcher) watch(vc *valuesConn, stop <-chan struct{}) {
	const id = 1
	vc.send(protocol.AppendWatch(nil, id, w.name))
	var holders []protocol.Frame
	synced := false
	var last sighting
	for {
		var fr framed
		var ok bool
		select {
		case <-stop:
			return
		case fr, ok = <-vc.frames:
		}
		if !ok || fr.err != nil {
			return
		}
		f := fr.v2
		w.mu.Lock()
		switch {
		case f.Type == protocol.TypeRefused && f.Code == protocol.CodeNotOwner:
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			vc.send(protocol.AppendWatch(nil, id, w.name))
			continue
		case f.Type == protocol.TypePong:
			w.mu.Unlock()
			continue
		case f.Type != protocol.TypeChange:
			w.errs = append(w.errs, fmt.Sprintf("unexpected %v", f))
		case f.Change == protocol.ChangeReset:
			holders, synced = nil, false
			w.resets++
		case f.Change == protocol.ChangeSynced:
			synced = true
		case f.Change == protocol.ChangeHeld:
			if f.Token < w.newest {
				w.errs = append(w.errs, fmt.Sprintf("held token %d after %d", f.Token, w.newest))
			}
			w.newest = max(w.newest, f.Token)
			holders = append(holders, f)
		case f.Change == protocol.ChangeValue:
			for i := range holders {
				if holders[i].Token == f.Token {
					holders[i].Value = f.Value
				}
			}
		case f.Change == protocol.ChangeFreed:
			for i := range holders {
				if holders[i].Token == f.Token {
					holders = append(holders[:i], holders[i+1:]...)
					break
				}
			}
		}
		if synced {
			s := sighting{at: fr.at}
			if len(holders) > 0 {
				s.token, s.value = holders[0].Token, holders[0].Value
			}
			if s.token != last.token || s.value != last.value || len(w.seen) == 0 {
				if s.token != 0 && s.token < last.token {
					w.errs = append(w.errs, fmt.Sprintf("delivered leader %d after %d", s.token, last.token))
				}
				w.seen = append(w.seen, s)
				last = s
			}
		}
		w.mu.Unlock()
	}
}

// learned waits, bounded, until the watcher delivers a leader with a
// token above after, and returns when it got it.
func (w *watcher) learned(t *testing.T, what string, after uint64, limit time.Duration) sighting {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		w.mu.Lock()
		for _, s := range w.seen {
			if s.token > after {
				w.mu.Unlock()
				return s
			}
		}
		w.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("watcher of %s: no leader above %d within %v (%s): %+v", w.name, after, limit, what, w.report())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *watcher) report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("seen %+v resets %d errors %v", w.seen, w.resets, w.errs)
}

// check fails the test for anything older than what the watcher knew.
func (w *watcher) check(t *testing.T, label string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		t.Errorf("watcher %s: %v", label, w.errs)
	}
}

// nextLeader reads grants until one with a token above after.
func nextLeader(t *testing.T, granted <-chan leadership, after uint64, limit time.Duration) leadership {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case l := <-granted:
			if l.token > after {
				return l
			}
		case <-deadline:
			t.Fatalf("no leader above token %d within %v", after, limit)
		}
	}
}

// Three candidates (one on the name's owner, two relayed by the other
// nodes) and two watchers (one on the owner, one relayed) on a cluster of
// real processes:
//
//   - the leader's session dies (its process killed: the connection ends
//     as a kill -9 ends it): the waiter first in line is promoted, and the
//     watchers learn it, both measured from the death;
//   - a planned move (a fourth node joins and takes the name over): the
//     watchers follow the name and keep the leader;
//   - kill -9 of the name's new owner: the candidates claim again at the
//     next owner, which grants after its warm-up; the watchers learn the
//     new leader then, and none ever sees a leader older than one it has
//     seen.
func TestClusterElectionWatchers(t *testing.T) {
	// Serial (no t.Parallel): it bounds a watcher's news to 250 ms after
	// the waiter's promotion, a margin that load beside it would eat.
	nodes := startCluster(t, failoverArgs...)
	const from = "n1"
	name := movingName(t, from, "elect")
	owner, x, y := nodes["n1"], nodes["n2"], nodes["n3"]
	granted := make(chan leadership, 64)

	// The first candidate claims until the new cluster's warm-up ends;
	// then the others queue behind it.
	c1 := electCandidate(t, owner.addr, name, "c1@n1", granted)
	first := nextLeader(t, granted, 0, 4*opstest.Timeout)
	w1 := startWatcher(t, "w1", name, x.addr)             // relayed by a non-owner
	w2 := startWatcher(t, "w2", name, owner.addr, y.addr) // on the owner
	for _, w := range []*watcher{w1, w2} {
		w.learned(t, "the first leader", first.token-1, 2*opstest.Timeout)
	}
	c2 := electCandidate(t, x.addr, name, "c2@n2", granted)
	waitQueued := func(n int) {
		t.Helper()
		deadline := time.Now().Add(opstest.Timeout)
		for len(adminLock(t, owner, name).Waiters) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than %d waiters at %s", name, n, owner.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitQueued(1)
	c3 := electCandidate(t, y.addr, name, "c3@n3", granted)
	waitQueued(2)
	cands := map[string]*valuesConn{"c1@n1": c1, "c2@n2": c2, "c3@n3": c3}

	// 1. The leader dies.
	killed := time.Now()
	cands[first.who].Close()
	promoted := nextLeader(t, granted, first.token, opstest.Timeout)
	toPromote := promoted.at.Sub(killed)
	var toWatchers []time.Duration
	for _, w := range []*watcher{w1, w2} {
		s := w.learned(t, "the promoted leader", first.token, opstest.Timeout)
		if s.token != promoted.token {
			t.Errorf("watcher learned token %d, want the promoted %d", s.token, promoted.token)
		}
		toWatchers = append(toWatchers, s.at.Sub(killed))
	}
	t.Logf("leader %s died: waiter %s promoted after %v; watchers learned it after %v (relayed by %s) and %v (on the owner %s)",
		first.who, promoted.who, toPromote.Round(time.Microsecond), toWatchers[0].Round(time.Microsecond), x.id,
		toWatchers[1].Round(time.Microsecond), owner.id)
	for _, d := range toWatchers {
		if d > toPromote+250*time.Millisecond {
			t.Errorf("a watcher learned the new leader %v after the death, the waiter was promoted after %v", d, toPromote)
		}
	}

	// 2. A planned move: n4 joins and takes the name over with its
	// claims; the watchers follow it, to the same leader.
	n4 := startNode(t, "n4", owner.admin, failoverArgs...)
	for _, n := range []*clusterProc{owner, x, y, n4} {
		waitStatus(t, n, "a ring of 4", func(st cluster.Status) bool { return len(st.Ring) == 4 })
	}
	deadline := time.Now().Add(2 * opstest.Timeout)
	for {
		l := adminLock(t, n4, name)
		if len(l.Holders) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no holder at n4 after the move: %+v", name, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []*watcher{w1, w2} {
		w.mu.Lock()
		resets := w.resets
		w.mu.Unlock()
		if resets == 0 {
			t.Errorf("watcher saw no reset for the move: %s", w.report())
		}
		w.learned(t, "the leader after the move", promoted.token-1, 2*opstest.Timeout)
	}

	// 3. kill -9 of the owner (n4). The leader's claim there is revoked;
	// the candidates claim again at the next owner, which grants only
	// after its warm-up.
	warmup := cluster.WarmupFor(electLease, cluster.DefaultGateSlack)
	ownerKilled := time.Now()
	if err := n4.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n4.exited
	next := nextLeader(t, granted, promoted.token, 4*opstest.Timeout)
	toGrant := next.at.Sub(ownerKilled)
	toWatchers = toWatchers[:0]
	for _, w := range []*watcher{w1, w2} {
		s := w.learned(t, "the leader after the owner's kill", promoted.token, 2*opstest.Timeout)
		toWatchers = append(toWatchers, s.at.Sub(ownerKilled))
	}
	t.Logf("owner n4 killed: new leader %s granted after %v (removal after about %v, then a warm-up of %v); watchers learned it after %v and %v",
		next.who, toGrant.Round(time.Millisecond), failRemoveAfter, warmup, toWatchers[0].Round(time.Millisecond), toWatchers[1].Round(time.Millisecond))
	for _, d := range toWatchers {
		if d > toGrant+time.Second {
			t.Errorf("a watcher learned the new leader %v after the kill, its grant came at %v", d, toGrant)
		}
	}
	w1.check(t, "w1 (relayed)")
	w2.check(t, "w2 (on the owner)")
	t.Logf("w1: %s", w1.report())
	t.Logf("w2: %s", w2.report())
}
