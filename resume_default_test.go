package baton

import (
	"testing"
	"time"
)

// A Client given a cluster (Nodes, or routing on) makes its sessions
// resumable by default, NoResume turns that off, and a Client of a
// single Address without routing keeps sessions non-resumable unless
// asked.
func TestResumableDefault(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	for _, tc := range []struct {
		what string
		cfg  Config
		opts SessionOptions
		want bool
	}{
		{"single address", Config{Address: addr}, SessionOptions{}, false},
		{"single address, Resumable", Config{Address: addr}, SessionOptions{Resumable: true}, true},
		{"Nodes", Config{Address: addr, Nodes: []string{addr}}, SessionOptions{}, true},
		{"Nodes, NoResume", Config{Address: addr, Nodes: []string{addr}}, SessionOptions{NoResume: true}, false},
		{"Nodes, RoutingOff", Config{Address: addr, Nodes: []string{addr}, Routing: RoutingOff}, SessionOptions{}, false},
		{"RoutingDirect", Config{Address: addr, Routing: RoutingDirect}, SessionOptions{}, true},
		{"RoutingDirect, NoResume", Config{Address: addr, Routing: RoutingDirect}, SessionOptions{NoResume: true}, false},
	} {
		tc.opts.Lease = 3 * time.Second
		s, err := New(tc.cfg).OpenSession(t.Context(), tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if got := s.Resumable(); got != tc.want {
			t.Errorf("%s: Resumable() = %v, want %v", tc.what, got, tc.want)
		}
		s.Close()
	}
}
