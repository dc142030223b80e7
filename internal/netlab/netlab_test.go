//go:build linux

package netlab_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonlock/baton/internal/netlab"
)

// lab builds a lab, or skips without root or ip(8); under CI=true it
// fails instead: CI must not pass by skipping.
func lab(t *testing.T, nodes int) *netlab.Lab {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	l, err := netlab.New(context.Background(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// listen listens on addr inside ns and echoes one line per connection
// until the test ends.
func listen(t *testing.T, ns, addr string) {
	t.Helper()
	var ln net.Listener
	if err := netlab.InNamespace(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
}

// reach reports whether a TCP round trip from ns to addr succeeds
// within limit.
func reach(l *netlab.Lab, ns, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := l.DialContext(ns)(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(limit))
	if _, err := c.Write([]byte("x")); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err
}

// The links: clients reach every node's client address, nodes reach each
// other's cluster address, and a cut drops packets (a dial times out, it
// is not refused) until it is healed; the namespaces are gone after
// Close, and a crashed run's are removed by the next.
func TestLab(t *testing.T) {
	l := lab(t, 3)
	for i := range 3 {
		listen(t, l.Node(i), l.ClientIP(i)+":7070")
		listen(t, l.Node(i), l.ClusterIP(i)+":7080")
	}
	const quick = 2 * time.Second
	for i := range 3 {
		if err := reach(l, l.Clients(), l.ClientIP(i)+":7070", quick); err != nil {
			t.Fatalf("clients to node %d: %v", i, err)
		}
		if err := reach(l, l.Node((i+1)%3), l.ClusterIP(i)+":7080", quick); err != nil {
			t.Fatalf("node %d to node %d: %v", (i+1)%3, i, err)
		}
	}
	// The clients cannot reach a cluster address, nor the test's own
	// namespace the lab's.
	if err := reach(l, l.Clients(), l.ClusterIP(0)+":7080", 300*time.Millisecond); err == nil {
		t.Errorf("the clients reach a cluster address")
	}

	ctx := context.Background()
	const cut = 500 * time.Millisecond
	timedOut := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
	}
	if err := l.CutCluster(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(1)+":7080", cut); !timedOut(err) {
		t.Errorf("node 0 to node 1 with node 1's cluster link cut: %v, want a timeout", err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(2)+":7080", quick); err != nil {
		t.Errorf("node 0 to node 2 with node 1's cluster link cut: %v", err)
	}
	if err := reach(l, l.Clients(), l.ClientIP(1)+":7070", quick); err != nil {
		t.Errorf("clients to node 1 with its cluster link cut: %v", err)
	}
	if err := l.HealCluster(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(1)+":7080", quick); err != nil {
		t.Errorf("node 0 to node 1 healed: %v", err)
	}

	// A partition between nodes 0 and 1 alone.
	if err := l.CutBetween(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(1)+":7080", cut); !timedOut(err) {
		t.Errorf("node 0 to node 1 partitioned: %v, want a timeout", err)
	}
	if err := reach(l, l.Node(1), l.ClusterIP(0)+":7080", cut); !timedOut(err) {
		t.Errorf("node 1 to node 0 partitioned: %v, want a timeout", err)
	}
	for _, p := range [][2]int{{0, 2}, {1, 2}, {2, 0}, {2, 1}} {
		if err := reach(l, l.Node(p[0]), l.ClusterIP(p[1])+":7080", quick); err != nil {
			t.Errorf("node %d to node %d with 0 and 1 partitioned: %v", p[0], p[1], err)
		}
	}
	if err := l.HealBetween(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(1)+":7080", quick); err != nil {
		t.Errorf("node 0 to node 1 healed: %v", err)
	}

	if err := l.CutClient(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Clients(), l.ClientIP(2)+":7070", cut); !timedOut(err) {
		t.Errorf("clients to node 2 with its client link cut: %v, want a timeout", err)
	}
	if err := reach(l, l.Node(0), l.ClusterIP(2)+":7080", quick); err != nil {
		t.Errorf("node 0 to node 2 with its client link cut: %v", err)
	}
	if err := l.HealClient(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := reach(l, l.Clients(), l.ClientIP(2)+":7070", quick); err != nil {
		t.Errorf("clients to node 2 healed: %v", err)
	}

	// A program run by Exec keeps its pid: signals reach it.
	argv := l.Exec(l.Node(0), "sleep", "30")
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if err == nil && strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Exec: process %d is %q (%v), want sleep itself", cmd.Process.Pid, comm, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lab's namespaces are gone after Close, and a crashed run's (its
// process gone) are removed by the next New.
func TestLabClose(t *testing.T) {
	if netlab.Available() == nil {
		// No process has a pid above the kernel's limit (at most 2^22).
		out, err := exec.Command("ip", "netns", "add", netlab.Prefix+"99999999-1-hub").CombinedOutput()
		if err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
	}
	l := lab(t, 1)
	if _, err := os.Stat("/run/netns/" + netlab.Prefix + "99999999-1-hub"); !os.IsNotExist(err) {
		t.Errorf("a crashed run's namespace after New: %v", err)
	}
	ns := l.Node(0)
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, l.Clients()} {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("%s after Close: %v", n, err)
		}
	}
}

// InNamespace runs f in the lab's namespace and returns the thread to
// its own: the thread's namespace, read from /proc, is the lab's inside
// f and the test's before and after.
func TestInNamespaceReturns(t *testing.T) {
	l := lab(t, 1)
	runtime.LockOSThread() // nested in InNamespace's: one thread throughout
	defer runtime.UnlockOSThread()
	netns := func() string {
		s, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var want unix.Stat_t
	if err := unix.Stat("/run/netns/"+l.Clients(), &want); err != nil {
		t.Fatal(err)
	}
	before := netns()
	var inside string
	if err := netlab.InNamespace(l.Clients(), func() error { inside = netns(); return nil }); err != nil {
		t.Fatal(err)
	}
	if after := netns(); after != before {
		t.Errorf("the thread's namespace after InNamespace: %s, want %s as before", after, before)
	}
	if inside != fmt.Sprintf("net:[%d]", want.Ino) {
		t.Errorf("the thread's namespace in f: %s, want the clients' (inode %d)", inside, want.Ino)
	}
}
