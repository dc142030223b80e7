package main

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// fdAcquire connects and sends an ACQUIRE without waiting for the reply.
func fdAcquire(t *testing.T, addr, name string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: 60_000, Name: name})); err != nil {
		t.Fatal(err)
	}
	return c
}

func fdReply(c net.Conn, within time.Duration) (protocol.ServerFrame, error) {
	c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	return protocol.ReadServerFrame(c)
}

// TestServeSurvivesDescriptorExhaustion: under a low RLIMIT_NOFILE the
// server runs out of descriptors, keeps running and keeps every lock it
// granted, and serves the clients that queued up in the listen backlog as
// soon as descriptors free up.
func TestServeSurvivesDescriptorExhaustion(t *testing.T) {
	t.Parallel()
	const limit = 32
	proc := startBatonCmd(t, exec.Command("sh", "-c",
		fmt.Sprintf(`ulimit -n %d && exec "$0" serve -log-format json -listen 127.0.0.1:0 -io-timeout 10s`, limit), batonBin))
	addr, _ := proc.waitLog(t, "baton listening")["addr"].(string)

	// Fill the table until accept starts failing: a client whose ACQUIRE
	// gets no reply is stuck in the backlog.
	keeper := fdAcquire(t, addr, "keep")
	if f, err := fdReply(keeper, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("keeper: %v %v", f, err)
	}
	var held []net.Conn
	var stuck net.Conn
	for i := 0; stuck == nil; i++ {
		if i > limit {
			t.Fatalf("%d sessions accepted under a limit of %d descriptors", i, limit)
		}
		c := fdAcquire(t, addr, fmt.Sprintf("fill-%d", i))
		if _, err := fdReply(c, 500*time.Millisecond); err != nil {
			stuck = c
			break
		}
		held = append(held, c)
	}
	t.Logf("accepted %d sessions before descriptors ran out", len(held)+1)

	// The server must say why, keep retrying after backing off, and the
	// keeper must still hold.
	proc.waitLog(t, "accept failed; retrying")
	proc.waitLog(t, "accept failed; retrying")
	keeper.Write(protocol.AppendHeartbeat(nil))
	if f, err := fdReply(keeper, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("keeper lost its lock while descriptors were exhausted: %v %v", f, err)
	}

	// Free descriptors: the stuck client is served, and so is a new one.
	for _, c := range held {
		c.Close()
	}
	start := time.Now()
	if f, err := fdReply(stuck, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("client from the backlog: %v %v", f, err)
	}
	t.Logf("backlogged client served %v after descriptors freed", time.Since(start).Round(time.Millisecond))
	fresh := fdAcquire(t, addr, "keep")
	if f, err := fdReply(fresh, 5*time.Second); err != nil || f.Type != protocol.TypeWaiting {
		t.Fatalf("new client on the keeper's lock: %v %v (want WAITING: the keeper still holds it)", f, err)
	}
	keeper.Close()
	if f, err := fdReply(fresh, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("promotion after the keeper left: %v %v", f, err)
	}
}
