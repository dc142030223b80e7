//go:build linux

// Package netlab builds a private network of Linux network namespaces for
// tests that cut real links: one namespace per node, one for the clients,
// and a hub whose bridge joins the nodes' cluster links; every node has a
// cluster link and a client link, each a veth pair. A cut takes one end of
// a link down, so packets are dropped without an error, as in a real
// partition. Nothing outside the lab's namespaces is touched. It needs
// root and ip(8); Available says whether both are there. The addressing:
// docs/design/2026-12-02-fault-injection-cluster.md#internalnetlabnetlabgo.
package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix begins the name of every namespace a lab creates; the process
// id of the test that created it follows, so that a later run can tell
// a crashed run's leftovers (RemoveLeftovers) from a live run's.
const Prefix = "btlab"

// Lab is a running private network.
type Lab struct {
	name  string // Prefix + pid + "-" + a counter: the namespaces' prefix
	nodes int

	mu     sync.Mutex
	closed bool
}

// Available returns nil if this process can build a lab: it runs as root
// and ip(8) is installed.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netlab: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netlab: ip(8) not found (Debian: apt-get install iproute2)")
	}
	return nil
}

var counter struct {
	sync.Mutex
	n int
}

// New builds a lab of nodes nodes (at most 200). Close removes it; on
// failure New removes what it built.
func New(ctx context.Context, nodes int) (_ *Lab, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if nodes < 1 || nodes > 200 {
		return nil, fmt.Errorf("netlab: %d nodes", nodes)
	}
	RemoveLeftovers(ctx)
	counter.Lock()
	counter.n++
	l := &Lab{name: fmt.Sprintf("%s%d-%d", Prefix, os.Getpid(), counter.n), nodes: nodes}
	counter.Unlock()
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, ns := range append([]string{l.hub(), l.Clients()}, l.nodeNamespaces()...) {
		if err := ip(ctx, "netns", "add", ns); err != nil {
			return nil, err
		}
		if err := ip(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	if err := ip(ctx, "-n", l.hub(), "link", "add", "br0", "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ip(ctx, "-n", l.hub(), "link", "set", "br0", "up"); err != nil {
		return nil, err
	}
	for i := range nodes {
		ns := l.Node(i)
		hubEnd := "c" + strconv.Itoa(i)
		steps := [][]string{
			// The cluster link: "cl" in the node, "cN" on the hub's bridge.
			{"-n", ns, "link", "add", "cl", "type", "veth", "peer", "name", hubEnd, "netns", l.hub()},
			{"-n", l.hub(), "link", "set", hubEnd, "master", "br0"},
			{"-n", l.hub(), "link", "set", hubEnd, "up"},
			{"-n", ns, "addr", "add", l.ClusterIP(i) + "/24", "dev", "cl"},
			{"-n", ns, "link", "set", "cl", "up"},
			// The client link: "ct" in the node, "nN" in the clients'.
			{"-n", ns, "link", "add", "ct", "type", "veth", "peer", "name", "n" + strconv.Itoa(i), "netns", l.Clients()},
			{"-n", ns, "addr", "add", l.ClientIP(i) + "/30", "dev", "ct"},
			{"-n", ns, "link", "set", "ct", "up"},
			{"-n", l.Clients(), "addr", "add", fmt.Sprintf("10.78.%d.2/30", i+1), "dev", "n" + strconv.Itoa(i)},
			{"-n", l.Clients(), "link", "set", "n" + strconv.Itoa(i), "up"},
		}
		for _, s := range steps {
			if err := ip(ctx, s...); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func (l *Lab) hub() string { return l.name + "-hub" }

// Clients is the namespace of the clients: it reaches every node's
// ClientIP and nothing else.
func (l *Lab) Clients() string { return l.name + "-cli" }

// Node is the namespace of node i (from 0).
func (l *Lab) Node(i int) string { return fmt.Sprintf("%s-n%d", l.name, i) }

func (l *Lab) nodeNamespaces() []string {
	var ns []string
	for i := range l.nodes {
		ns = append(ns, l.Node(i))
	}
	return ns
}

// ClusterIP is node i's address on the cluster link.
func (l *Lab) ClusterIP(i int) string { return fmt.Sprintf("10.77.0.%d", i+1) }

// ClientIP is node i's address on its client link.
func (l *Lab) ClientIP(i int) string { return fmt.Sprintf("10.78.%d.1", i+1) }

// Exec returns the command line that runs argv in namespace ns: "ip
// netns exec", which execs argv (the process keeps its pid, so signals
// reach the program itself).
func (l *Lab) Exec(ns string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// CutCluster cuts node i off the cluster link: the hub's end goes down,
// so the node's packets to the other nodes, and theirs to it, are
// dropped. HealCluster undoes it.
func (l *Lab) CutCluster(ctx context.Context, i int) error {
	return ip(ctx, "-n", l.hub(), "link", "set", "c"+strconv.Itoa(i), "down")
}

// HealCluster brings node i's cluster link back.
func (l *Lab) HealCluster(ctx context.Context, i int) error {
	return ip(ctx, "-n", l.hub(), "link", "set", "c"+strconv.Itoa(i), "up")
}

// deadGateway is an address on the cluster link that no node has: a
// route through it drops packets silently (its address never resolves).
const deadGateway = "10.77.0.254"

// CutBetween partitions nodes i and j from each other alone: each routes
// the other's cluster address through deadGateway, so their packets to
// each other are dropped and their TCP connections hang, while both
// still reach every other node. HealBetween undoes it.
func (l *Lab) CutBetween(ctx context.Context, i, j int) error {
	if err := ip(ctx, "-n", l.Node(i), "route", "add", l.ClusterIP(j)+"/32", "via", deadGateway, "dev", "cl"); err != nil {
		return err
	}
	return ip(ctx, "-n", l.Node(j), "route", "add", l.ClusterIP(i)+"/32", "via", deadGateway, "dev", "cl")
}

// HealBetween removes the routes of CutBetween(i, j).
func (l *Lab) HealBetween(ctx context.Context, i, j int) error {
	err := ip(ctx, "-n", l.Node(i), "route", "del", l.ClusterIP(j)+"/32")
	return errors.Join(err, ip(ctx, "-n", l.Node(j), "route", "del", l.ClusterIP(i)+"/32"))
}

// CutClient cuts node i's client link: the node's end goes down, so the
// clients' packets to it are dropped (their side keeps its route).
func (l *Lab) CutClient(ctx context.Context, i int) error {
	return ip(ctx, "-n", l.Node(i), "link", "set", "ct", "down")
}

// HealClient brings node i's client link back (its address and route
// come back with it).
func (l *Lab) HealClient(ctx context.Context, i int) error {
	if err := ip(ctx, "-n", l.Node(i), "link", "set", "ct", "up"); err != nil {
		return err
	}
	// Taking a link down drops its connected route; up brings it back
	// with the address, but only once the address is still there.
	out, err := exec.CommandContext(ctx, "ip", "-n", l.Node(i), "-4", "addr", "show", "dev", "ct").CombinedOutput()
	if err == nil && !strings.Contains(string(out), l.ClientIP(i)+"/") {
		return ip(ctx, "-n", l.Node(i), "addr", "add", l.ClientIP(i)+"/30", "dev", "ct")
	}
	return err
}

// DialContext dials from namespace ns: the socket is created by this
// goroutine's thread while it has entered ns, and stays in ns. It suits
// http.Transport.DialContext.
func (l *Lab) DialContext(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := InNamespace(ns, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// InNamespace runs f on a thread that has entered the network namespace
// ns (by name, as ip-netns(8) keeps it), then returns the thread to its
// own namespace. If it cannot, the thread stays locked and ends with the
// goroutine.
func InNamespace(ns string, f func() error) error {
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netlab: back from %s: %w", ns, err) // the thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return ferr
}

// Close removes the lab's namespaces, and with them its links. Processes
// still running in them keep their namespace alive until they exit.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return removeWithPrefix(context.Background(), l.name+"-")
}

// RemoveLeftovers removes the namespaces of labs whose test process is
// gone (a run that crashed before its Close).
func RemoveLeftovers(ctx context.Context) {
	for _, ns := range namespaces() {
		rest, ok := strings.CutPrefix(ns, Prefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid <= 0 {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			ip(ctx, "netns", "del", ns)
		}
	}
}

func removeWithPrefix(ctx context.Context, prefix string) error {
	var errs []error
	for _, ns := range namespaces() {
		if strings.HasPrefix(ns, prefix) {
			errs = append(errs, ip(ctx, "netns", "del", ns))
		}
	}
	return errors.Join(errs...)
}

// namespaces lists the named network namespaces.
func namespaces() []string {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// ip runs ip(8) with args, bounded in time.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
