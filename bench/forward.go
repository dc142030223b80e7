package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// "bench forward LISTEN TARGET": the floor of a relayed hop, for "bench
// hop". A minimal Go TCP forwarder, a process of its own: it keeps a
// few connections to TARGET dialled ahead (so that no dial is on the
// path, as a relaying node's hop pool does), and pipes each accepted
// connection through one of them, a goroutine for each direction. It
// parses nothing, so that what it costs over a direct connection is one
// more loopback hop there and back, and nothing else.
func forwardMain(args []string) {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench forward LISTEN TARGET")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	target := args[1]
	pool := make(chan net.Conn, 4)
	refill := func() {
		for {
			c, err := net.Dial("tcp", target)
			if err == nil {
				pool <- c
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range cap(pool) {
		go refill()
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		up := <-pool
		go refill()
		go func() {
			io.Copy(up, c)
			up.Close()
		}()
		go func() {
			io.Copy(c, up)
			c.Close()
		}()
	}
}

// startForwarder starts "bench forward" in front of target.
func startForwarder(self, target string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProcess("forward", "", 0, 0, []string{self, "forward", addr, target}, nil)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(addr, p, 10*time.Second); err != nil {
		p.stop(time.Second)
		return nil, err
	}
	return &server{addr: addr, proc: p, version: "Go TCP forwarder (this harness)", stop: func() { p.stop(time.Second) }}, nil
}
