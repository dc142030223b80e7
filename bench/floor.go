package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The physical floor: what the same machine does with bare TCP, through
// an echo server that is, like every server here, a process of its own
// (the harness re-executed in echo mode: a goroutine per connection, the
// same shape as a baton session).

// The echo server also relays, for the handover floor that has baton's
// shape: a connection that starts with relayReceiver waits; when a
// connection that started with relaySender closes, the server writes one
// byte to the waiting receiver.
const (
	relayReceiver = 'R'
	relaySender   = 'S'
)

var relay struct {
	sync.Mutex
	to net.Conn
}

// echoMain serves "bench echo ADDR" until its parent dies.
func echoMain(args []string) {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: bench echo HOST:PORT")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			var buf [64]byte
			n, err := c.Read(buf[:])
			if err != nil {
				return
			}
			switch buf[0] {
			case relayReceiver:
				relay.Lock()
				relay.to = c
				relay.Unlock()
				c.Read(buf[:]) // until the receiver hangs up
				return
			case relaySender:
				for err == nil { // until the sender hangs up
					_, err = c.Read(buf[:])
				}
				relay.Lock()
				to := relay.to
				relay.Unlock()
				if to != nil {
					to.Write([]byte{1})
				}
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
			for {
				n, err := c.Read(buf[:])
				if err != nil {
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}

func startEcho(self string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProcess("echo", "", 0, 0, []string{self, "echo", addr}, nil)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(addr, p, 10*time.Second); err != nil {
		p.stop(time.Second)
		return nil, err
	}
	return &server{addr: addr, proc: p, version: "Go echo server (this harness)", memory: vmRSS(p),
		stop: func() { p.stop(time.Second) }}, nil
}

// echoRoundTrip is one byte there and back on an established connection.
func echoRoundTrip(c net.Conn) error {
	var b [1]byte
	if _, err := c.Write([]byte{0x42}); err != nil {
		return err
	}
	_, err := io.ReadFull(c, b[:])
	return err
}

// rttProbe is the floor for handover: one round trip through a server on
// an open connection, after the same idle gap as the handover scenario
// leaves before each release (so both pay for waking sleeping threads).
func rttProbe(addr string, gap time.Duration) (floorProbe, func(), error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	return func() (time.Duration, error) {
		time.Sleep(gap)
		t := time.Now()
		if err := echoRoundTrip(c); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}, func() { c.Close() }, nil
}

// twoRTTProbe is the floor of a claim and its release on an open
// session answered both: two 1-byte round trips on an open connection,
// back to back (the shape of the peers' pooled cycles too).
func twoRTTProbe(addr string) (floorProbe, func(), error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	return func() (time.Duration, error) {
		t := time.Now()
		for range 2 {
			if err := echoRoundTrip(c); err != nil {
				return 0, err
			}
		}
		return time.Since(t), nil
	}, func() { c.Close() }, nil
}

// rttWriteProbe is the floor of what baton-session's cycle waits for:
// one 1-byte round trip (CLAIM, GRANTED), then one 1-byte write
// (RELEASE, whose answer is not awaited). The echo of that write is read
// in the next cycle, before or with its round trip's, as the session's
// reader reads a RELEASED while the next claim is on its way.
func rttWriteProbe(addr string) (floorProbe, func(), error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	owed := 0
	return func() (time.Duration, error) {
		t := time.Now()
		if err := rttWriteCycle(c, &owed); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}, func() { c.Close() }, nil
}

// rttWriteCycle is one cycle of rttWriteProbe; owed counts the echoes of
// earlier writes not read yet (0 or 1).
func rttWriteCycle(c net.Conn, owed *int) error {
	var b [2]byte
	if _, err := c.Write([]byte{0x42}); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:1+*owed]); err != nil {
		return err
	}
	*owed = 0
	if _, err := c.Write([]byte{0x43}); err != nil {
		return err
	}
	*owed = 1
	return nil
}

// connectCycle is the floor of a baton acquire and release: connect, one
// round trip, close.
func connectCycle(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return echoRoundTrip(c)
}

func connectProbe(addr string) floorProbe {
	return func() (time.Duration, error) {
		t := time.Now()
		err := connectCycle(addr)
		return time.Since(t), err
	}
}

func floorThroughput(ctx context.Context, addr string, workers int, dur time.Duration) *throughputResult {
	var done, errs atomic.Int64
	start := time.Now()
	end := start.Add(dur)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := connectCycle(addr); err != nil {
					errs.Add(1)
					continue
				}
				if !time.Now().After(end) {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return &throughputResult{Workers: workers, Seconds: dur.Seconds(), Cycles: done.Load(),
		PerSecond: float64(done.Load()) / dur.Seconds(), Errors: errs.Load()}
}

// relayProbe is the floor of baton's handover mechanism: an owner's
// connection closes, the server notices and writes one byte to another
// connection. The same idle gap precedes each close.
func relayProbe(addr string, gap time.Duration) (floorProbe, func(), error) {
	r, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if _, err := r.Write([]byte{relayReceiver}); err != nil {
		r.Close()
		return nil, nil, err
	}
	return func() (time.Duration, error) {
		s, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		if _, err := s.Write([]byte{relaySender}); err != nil {
			s.Close()
			return 0, err
		}
		time.Sleep(max(gap, 5*time.Millisecond)) // also lets the receiver register
		t := time.Now()
		s.Close()
		var b [1]byte
		r.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}, func() { r.Close() }, nil
}
