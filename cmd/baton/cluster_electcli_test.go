//go:build unix

package main

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"
)

// timedWatchLine is a line of 'baton watch --json' with its time.
type timedWatchLine struct {
	Time    time.Time
	Holders []struct {
		Token uint64
		Value string
	}
}

// watchUntil reads p's JSON lines until one whose first holder has token
// tok, and returns it; every holder it reads has a token at least the
// last one seen (*newest, updated).
func watchUntil(t *testing.T, p *runProc, tok uint64, newest *uint64) timedWatchLine {
	t.Helper()
	for {
		var w timedWatchLine
		if err := json.Unmarshal([]byte(p.line()), &w); err != nil {
			t.Fatal(err)
		}
		for _, h := range w.Holders {
			if h.Token < *newest {
				t.Fatalf("baton watch printed token %d after %d", h.Token, *newest)
			}
			*newest = h.Token
		}
		if len(w.Holders) > 0 && w.Holders[0].Token == tok {
			return w
		}
	}
}

// baton elect and baton watch as processes on a cluster: three
// candidates, one on the name's owner and two on the other nodes (their
// valued claims relayed), and two watchers, one on the owner and one on
// another node (its watch relayed). kill -9 of the leader's process: the
// next candidate leads with a larger token and its value, and both
// watchers print it; the times from the kill are logged.
func TestClusterElectCLI(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t) // the candidates are processes, the nodes need not be
	owner, x, y := nodes["n1"], nodes["n2"], nodes["n3"]
	name := nameOwnedBy(t, owner.id, "cli-elect")
	for range 2 { // past the new cluster's warm-up of the name
		probe, _ := waitGrant(t, owner.addr, name, 2*time.Second)
		probe.Close()
		waitFree(t, owner, name)
	}
	relayed := startCLI(t, nil, "watch", "--server", x.addr, "--json", name)
	direct := startCLI(t, nil, "watch", "--server", owner.addr, "--json", name)
	cmd := `echo leader $BATON_TOKEN; read x`
	c1 := startCLI(t, nil, "elect", "--server", owner.addr, "--value", "c1", name, "--", "sh", "-c", cmd)
	t1 := tokenOf(t, c1.line(), "leader")
	var newestR, newestD uint64
	watchUntil(t, relayed, t1, &newestR)
	watchUntil(t, direct, t1, &newestD)
	c2 := startCLI(t, nil, "elect", "--server", x.addr, "--value", "c2", name, "--", "sh", "-c", cmd)
	waitWaiters := func(n int) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for len(adminLock(t, owner, name).Waiters) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than %d waiters", name, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitWaiters(1)
	c3 := startCLI(t, nil, "elect", "--server", y.addr, "--value", "c3", name, "--", "sh", "-c", cmd)
	waitWaiters(2)

	killed := time.Now()
	c1.cmd.Process.Signal(syscall.SIGKILL)
	t2 := tokenOf(t, c2.line(), "leader")
	led := time.Since(killed)
	if t2 <= t1 {
		t.Fatalf("the next leader's token %d is not above %d", t2, t1)
	}
	r := watchUntil(t, relayed, t2, &newestR)
	d := watchUntil(t, direct, t2, &newestD)
	if r.Holders[0].Value != "c2" || d.Holders[0].Value != "c2" {
		t.Fatalf("watchers print %+v and %+v, want the value c2", r, d)
	}
	t.Logf("leader's process killed: the next one ran its command after %v; baton watch printed it after %v (through %s) and %v (on the owner)",
		led.Round(time.Millisecond), r.Time.Sub(killed).Round(time.Millisecond), x.id, d.Time.Sub(killed).Round(time.Millisecond))

	c2.cmd.Process.Signal(syscall.SIGKILL)
	t3 := tokenOf(t, c3.line(), "leader")
	watchUntil(t, relayed, t3, &newestR)
	watchUntil(t, direct, t3, &newestD)
	for _, p := range []*runProc{relayed, direct} {
		p.cmd.Process.Signal(syscall.SIGINT)
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("baton watch exit %d after SIGINT, want 0; stderr:\n%s", code, p.stderr)
		}
	}
	c3.cmd.Process.Signal(syscall.SIGKILL)
}
