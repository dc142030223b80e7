package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/node"
	"github.com/batonlock/baton/protocol"
	"go.uber.org/goleak"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// wait fails the test unless c closes within opstest.Timeout.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(opstest.Timeout):
		t.Fatalf("%s: not within %v", what, opstest.Timeout)
	}
}

// A single server: ready at once, serves, and after Shutdown is done
// with no error, its probes and port closed, no goroutine left.
func TestSingleServerShutdown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	n, err := node.Start(context.Background(), node.Config{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, n.Ready(), "ready")
	c := opstest.Dial(t, n.Addrs().Protocol)
	c.Acquire("x", time.Second)
	c.Expect(protocol.TypeAcquired, 0)
	c.Close()
	resp, err := http.Get("http://" + n.Addrs().Ops + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", resp.StatusCode)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait(t, n.Done(), "done")
	if n.Err() != nil {
		t.Fatalf("Err after Shutdown: %v, want nil", n.Err())
	}
	if _, err := net.Dial("tcp", n.Addrs().Protocol); err == nil {
		t.Fatal("the protocol port still accepts after Shutdown")
	}
	if n.Close() != nil { // a second stop does nothing
		t.Fatal("Close after Shutdown failed")
	}
}

// A listener that cannot be bound fails Start with the reason, and what
// was already open is released (the protocol port is free again).
func TestStartAddressInUse(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free.Close()
	n, err := node.Start(context.Background(), node.Config{Listen: free.Addr().String(), OpsListen: "127.0.0.1:0",
		AdminListen: busy.Addr().String(), Logger: quiet()})
	if err == nil {
		n.Close()
		t.Fatal("Start with the admin address in use succeeded")
	}
	t.Logf("Start: %v", err)
	l, err := net.Listen("tcp", free.Addr().String())
	if err != nil {
		t.Fatalf("the protocol address after a failed Start: %v", err)
	}
	l.Close()
}

// A cluster node that waits to be added (neither Bootstrap nor Join)
// stops waiting at Shutdown: Done closes with the reason, Ready never
// does, and Raft's data directory is released (a second node opens it).
func TestShutdownWhileStarting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	cfg := node.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeID: "n1", RaftListen: "127.0.0.1:0",
		DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The member API answers while the node waits: it waits to be added.
	resp, err := http.Get("http://" + n.Addrs().Admin + "/cluster/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	start := time.Now()
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait(t, n.Done(), "done")
	if n.Err() == nil {
		t.Fatal("Err is nil after a start that Shutdown ended")
	}
	select {
	case <-n.Ready():
		t.Fatal("Ready closed for a node that never joined")
	default:
	}
	t.Logf("stopped waiting in %v: %v", time.Since(start).Round(time.Millisecond), n.Err())
	cfg.Bootstrap = true
	n2, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("the data directory after Shutdown: %v", err)
	}
	defer n2.Close()
	wait(t, n2.Ready(), "the second node ready")
}
