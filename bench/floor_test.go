package main

import (
	"net"
	"testing"
	"time"
)

// echoServer echoes every byte on every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				var b [64]byte
				for {
					n, err := c.Read(b[:])
					if err != nil {
						return
					}
					if _, err := c.Write(b[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// The round-trip-and-write floor reads the echo of each cycle's write in
// the next cycle, so the connection stays in step: after n cycles
// exactly one echo, the last write's, is left to read.
func TestRTTWriteCycleStaysInStep(t *testing.T) {
	addr := echoServer(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owed := 0
	start := time.Now()
	const n = 100
	for i := range n {
		if err := rttWriteCycle(c, &owed); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	t.Logf("mean %v per cycle", time.Since(start)/n)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [8]byte
	if k, err := c.Read(b[:1]); err != nil || k != 1 || b[0] != 0x43 {
		t.Fatalf("the last write's echo: %d bytes % x, %v", k, b[:k], err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if k, err := c.Read(b[:]); k != 0 || err == nil {
		t.Fatalf("%d more bytes left after %d cycles: the probe is out of step", k, n)
	}
	// The probe around it measures the same cycle.
	probe, closeProbe, err := rttWriteProbe(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeProbe()
	for range 3 {
		if d, err := probe(); err != nil || d <= 0 {
			t.Fatalf("probe: %v, %v", d, err)
		}
	}
}

// waitUntil retries until its function succeeds, and gives up with the
// last error after the timeout.
func TestWaitUntil(t *testing.T) {
	n := 0
	if err := waitUntil(5*time.Second, func() error {
		if n++; n < 3 {
			return net.ErrClosed
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("%d tries, %v", n, err)
	}
	start := time.Now()
	if err := waitUntil(100*time.Millisecond, func() error { return net.ErrClosed }); err != net.ErrClosed {
		t.Fatalf("%v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}
