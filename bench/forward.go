package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

// "bench forward LISTEN TARGET": a relayed hop at its simplest, for
// "bench hop". A minimal Go TCP forwarder, a process of its own: it keeps a
// few connections to TARGET dialled ahead (so that no dial is on the
// path, as a relaying node's hop pool does), and passes each accepted
// connection through one of them in the shape of a request and its
// answer: one goroutine reads what the client sent, writes it on, reads
// what comes back and writes it to the client, and so on until either
// side closes; the pool is refilled after the first answer. It parses
// nothing. Unlike a relaying node's pooled hops, which outlive their
// claims, each of its connections to the target serves one client
// connection, as a generic proxy's do: the target accepts one per
// forwarded acquire.
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
		go func() {
			up := <-pool
			defer c.Close()
			defer up.Close()
			buf := make([]byte, 4096)
			for first := true; ; first = false {
				if !pass(c, up, buf) || !pass(up, c, buf) {
					return
				}
				if first {
					go refill()
				}
			}
		}()
	}
}

// pass reads what has arrived on from and writes it to to.
func pass(from, to net.Conn, buf []byte) bool {
	n, err := from.Read(buf)
	if err != nil {
		return false
	}
	_, err = to.Write(buf[:n])
	return err == nil
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
