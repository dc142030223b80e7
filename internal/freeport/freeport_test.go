package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/batonlock/baton/internal/freeport"
)

// Every port is below the ephemeral range, bindable, and never given
// twice in a process.
func TestPortsDistinctBindableBelowEphemeral(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		p := freeport.Port(t)
		if seen[p] {
			t.Fatalf("port %s given twice", p)
		}
		seen[p] = true
		if n, err := strconv.Atoi(p); err != nil || n < 1024 || n >= 32768 {
			t.Fatalf("port %q: want a number in [1024, 32768)", p)
		}
	}
	a := freeport.Addr(t)
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("listen on %s: %v", a, err)
	}
	l.Close()
}
