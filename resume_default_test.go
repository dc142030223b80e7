package baton

import (
	"strings"
	"testing"
	"time"
)

// A Client given a cluster (Nodes, or routing on) makes its sessions
// resumable by default, ResumeOff turns that off, and a Client of a
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
		{"single address, ResumeOn", Config{Address: addr}, SessionOptions{Resume: ResumeOn}, true},
		{"single address, ResumeOff", Config{Address: addr}, SessionOptions{Resume: ResumeOff}, false},
		{"Nodes", Config{Address: addr, Nodes: []string{addr}}, SessionOptions{}, true},
		{"Nodes, ResumeOff", Config{Address: addr, Nodes: []string{addr}}, SessionOptions{Resume: ResumeOff}, false},
		{"Nodes, ResumeOn", Config{Address: addr, Nodes: []string{addr}}, SessionOptions{Resume: ResumeOn}, true},
		{"Nodes, RoutingOff", Config{Address: addr, Nodes: []string{addr}, Routing: RoutingOff}, SessionOptions{}, false},
		{"RoutingDirect", Config{Address: addr, Routing: RoutingDirect}, SessionOptions{}, true},
		{"RoutingDirect, ResumeOff", Config{Address: addr, Routing: RoutingDirect}, SessionOptions{Resume: ResumeOff}, false},
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

// A Resume value that is none of the named ones is refused before
// anything is dialled, with an error that names the field.
func TestResumeModeInvalid(t *testing.T) {
	t.Parallel()
	c := New(Config{Address: "127.0.0.1:1"})
	_, err := c.OpenSession(t.Context(), SessionOptions{Lease: 3 * time.Second, Resume: ResumeOff + 1})
	if err == nil || !strings.Contains(err.Error(), "SessionOptions.Resume") {
		t.Fatalf("OpenSession with Resume %d: %v; want a refusal naming SessionOptions.Resume", ResumeOff+1, err)
	}
}
