// Command goadapter is the test kit's adapter for the Go client (the
// module's root package): 'baton testkit -- goadapter' checks the Go
// client as any other client is checked. docs/testkit.md is the contract
// it follows; it is also the example to copy for another language.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
)

var outMu sync.Mutex

// emit writes one event line; stdout is unbuffered, so it leaves at once.
func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func envMS(name string) time.Duration {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

func main() {
	addr, name := os.Getenv("BATON_TESTKIT_ADDR"), os.Getenv("BATON_TESTKIT_NAME")
	lease := envMS("BATON_TESTKIT_LEASE_MS")
	stop := envMS("BATON_TESTKIT_STOP_MS")
	if addr == "" || name == "" || lease == 0 {
		fmt.Fprintln(os.Stderr, "goadapter: BATON_TESTKIT_ADDR, BATON_TESTKIT_NAME and BATON_TESTKIT_LEASE_MS must be set")
		os.Exit(2)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	ctx := context.Background()
	c := baton.New(baton.DefaultConfig(addr))
	opts := baton.SessionOptions{Lease: lease, Label: "testkit " + os.Getenv("BATON_TESTKIT_SCENARIO")}
	if os.Getenv("BATON_TESTKIT_RESUMABLE") == "1" {
		opts.Resume = baton.ResumeOn
	}
	s, err := c.OpenSession(ctx, opts)
	if err != nil {
		emit(map[string]any{"event": "error", "message": err.Error()})
		drain(lines)
		return
	}
	// closing: the kit said close; the loss that Close causes is ours.
	var closing atomic.Bool
	defer func() {
		closing.Store(true)
		s.Close()
	}()

	// Acquire until it returns, while stdin may already say close.
	type got struct {
		cl  *baton.Claim
		err error
	}
	acq := make(chan got, 1)
	go func() {
		cl, err := s.Acquire(ctx, name, baton.Exclusive)
		acq <- got{cl, err}
	}()
	var cl *baton.Claim
	for cl == nil {
		select {
		case g := <-acq:
			if g.err != nil {
				emit(map[string]any{"event": "error", "message": g.err.Error()})
				drain(lines)
				return
			}
			cl = g.cl
		case l, ok := <-lines:
			if !ok || l == "close" {
				return
			}
		}
	}
	// The token as a decimal string: exact in every language's JSON.
	emit(map[string]any{"event": "held", "token": strconv.FormatUint(cl.Token(), 10)})

	// The guarded work: it runs until the claim is lost, then takes
	// BATON_TESTKIT_STOP_MS to stop, and tells the Session it stopped
	// (Release), which lets a session that gave up close its connection.
	var releasing sync.Once
	go func() {
		<-cl.Lost()
		err := cl.Err()
		if err == nil || closing.Load() {
			return // our own Release or Close
		}
		emit(map[string]any{"event": "lost", "reason": err.Error()})
		if stop > 0 {
			time.Sleep(stop)
			emit(map[string]any{"event": "stopped"})
		}
		releasing.Do(func() { cl.Release(ctx) })
	}()

	for l := range lines {
		switch l {
		case "release":
			var rerr error
			releasing.Do(func() { rerr = cl.Release(ctx) })
			if rerr != nil {
				emit(map[string]any{"event": "error", "message": rerr.Error()})
				continue
			}
			go func() {
				select {
				case <-cl.Released():
					emit(map[string]any{"event": "released"})
				case <-time.After(lease):
					emit(map[string]any{"event": "error", "message": "no RELEASED within the lease"})
				}
			}()
		case "close":
			return
		}
	}
}

// drain waits for stdin's end or close.
func drain(lines <-chan string) {
	for l := range lines {
		if l == "close" {
			return
		}
	}
}
