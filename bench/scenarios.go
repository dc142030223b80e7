package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// floorProbe measures one floor sample; scenarios run it between their
// own cycles so that both see the same machine load.
type floorProbe func() (time.Duration, error)

// pairedFloors runs every probe once and records its sample.
type pairedFloors struct {
	probes  []floorProbe
	samples [][]time.Duration
	errs    []int
}

func newPairedFloors(probes ...floorProbe) *pairedFloors {
	return &pairedFloors{probes: probes, samples: make([][]time.Duration, len(probes)), errs: make([]int, len(probes))}
}

func (p *pairedFloors) run(record bool) {
	if p == nil {
		return
	}
	for i, probe := range p.probes {
		d, err := probe()
		switch {
		case err != nil:
			p.errs[i]++
		case record:
			p.samples[i] = append(p.samples[i], d)
		}
	}
}

func (p *pairedFloors) results() []*latency {
	if p == nil {
		return nil
	}
	var out []*latency
	for i := range p.probes {
		out = append(out, summarize(p.samples[i], p.errs[i]))
	}
	return out
}

// Scenario 1: one client, nobody else: acquire, release, again. floors,
// if set, are measured between the cycles.
func uncontended(ctx context.Context, s *system, addr string, n int, floors *pairedFloors) (*latency, error) {
	l, err := s.dial(ctx, addr, clientOpts{})
	if err != nil {
		return nil, err
	}
	defer l.close()
	var ds []time.Duration
	errs := 0
	warm := n / 10
	for i := 0; i < n+warm; i++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		t := time.Now()
		h, err := l.lock(c, "uncontended")
		if err == nil {
			err = h.unlock()
		}
		d := time.Since(t)
		cancel()
		if err != nil {
			errs++
			if errs > 10 && errs > n/10 {
				return nil, fmt.Errorf("too many failures, last: %w", err)
			}
			continue
		}
		if i >= warm {
			ds = append(ds, d)
		}
		floors.run(i >= warm)
	}
	return summarize(ds, errs), nil
}

// Scenario 2: A holds the lock, B waits for it; A releases. The latency
// runs from the start of A's release call to the moment B's acquire call
// returns holding the lock. Then the roles swap. floors, if set, are
// measured after each handover (each probe brings its own idle gap).
func handover(ctx context.Context, s *system, addr string, n int, settle time.Duration, floors *pairedFloors) (*latency, error) {
	a, err := s.dial(ctx, addr, clientOpts{})
	if err != nil {
		return nil, err
	}
	defer a.close()
	b, err := s.dial(ctx, addr, clientOpts{})
	if err != nil {
		return nil, err
	}
	defer b.close()
	const name = "handover"
	held, err := a.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	type got struct {
		h   unlocker
		at  time.Time
		err error
	}
	var ds []time.Duration
	errs := 0
	warm := max(n/10, 2)
	for i := 0; i < n+warm; i++ {
		if ctx.Err() != nil {
			held.unlock()
			return nil, ctx.Err()
		}
		ch := make(chan got, 1)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		go func() {
			h, err := b.lock(wctx, name)
			ch <- got{h, time.Now(), err}
		}()
		// Give the waiter time to queue (or, for polling clients, to
		// start polling) before the owner lets go.
		select {
		case g := <-ch:
			cancel()
			if g.err == nil {
				g.h.unlock()
				held.unlock()
				return nil, errors.New("waiter acquired a lock that was held: mutual exclusion broken")
			}
			held.unlock()
			return nil, fmt.Errorf("waiter failed before the release: %w", g.err)
		case <-time.After(settle):
		}
		t0 := time.Now()
		if err := held.unlock(); err != nil {
			errs++
		}
		g := <-ch
		cancel()
		if g.err != nil {
			return nil, fmt.Errorf("waiter: %w", g.err)
		}
		if i >= warm {
			ds = append(ds, g.at.Sub(t0))
		}
		held = g.h
		a, b = b, a
		floors.run(i >= warm)
	}
	held.unlock()
	return summarize(ds, errs), nil
}

type throughputResult struct {
	Workers   int     `json:"workers"`
	Locks     int     `json:"locks"`
	Seconds   float64 `json:"seconds"`
	Cycles    int64   `json:"cycles"`
	PerSecond float64 `json:"per_second"`
	Errors    int64   `json:"errors,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// Scenario 3: workers each with their own client session, each taking a
// random one of `locks` locks (1: a single hot lock) and releasing it at
// once, for dur. Only cycles completed within dur count.
func throughput(ctx context.Context, s *system, addr string, workers, locks int, dur time.Duration) (*throughputResult, error) {
	ls := make([]locker, workers)
	var wg sync.WaitGroup
	var dialErr atomic.Value
	sem := make(chan struct{}, 16)
	for i := range ls {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			l, err := s.dial(ctx, addr, clientOpts{})
			if err != nil {
				dialErr.Store(err)
				return
			}
			ls[i] = l
		})
	}
	wg.Wait()
	defer func() {
		var cw sync.WaitGroup
		for _, l := range ls {
			if l != nil {
				cw.Go(l.close)
			}
		}
		cw.Wait()
	}()
	if err, ok := dialErr.Load().(error); ok {
		return nil, err
	}
	var done, errs atomic.Int64
	start := time.Now()
	end := start.Add(dur)
	rctx, cancel := context.WithDeadline(ctx, end.Add(2*time.Second))
	defer cancel()
	for _, l := range ls {
		wg.Go(func() {
			for time.Now().Before(end) && rctx.Err() == nil {
				name := "hot"
				if locks > 1 {
					name = fmt.Sprintf("t%d", rand.IntN(locks))
				}
				h, err := l.lock(rctx, name)
				if err != nil {
					if rctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				if err := h.unlock(); err != nil {
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
	return &throughputResult{Workers: workers, Locks: locks, Seconds: dur.Seconds(), Cycles: done.Load(),
		PerSecond: float64(done.Load()) / dur.Seconds(), Errors: errs.Load()}, nil
}

type deadResult struct {
	Signal   string    `json:"signal"`
	Lease    string    `json:"lease"`
	TrialsMs []float64 `json:"trials_ms"`
	MedianMs float64   `json:"median_ms"`
	MaxMs    float64   `json:"max_ms"`
	// NotReleased counts trials in which no other client held the lock
	// within CapMs.
	NotReleased int     `json:"not_released,omitempty"`
	CapMs       float64 `json:"cap_ms"`
	Note        string  `json:"note,omitempty"`
}

// Scenario 4: a holder process holds the lock; a waiter in this process
// waits for it; the holder is sent sig. The time runs from the signal to
// the waiter holding the lock.
func deadHolder(ctx context.Context, self string, s *system, addr string, sig syscall.Signal, trials int, capDur, settle time.Duration) (*deadResult, error) {
	r := &deadResult{Signal: sigName(sig), Lease: s.leaseNote, CapMs: ms(capDur)}
	for i := 0; i < trials; i++ {
		d, released, err := deadTrial(ctx, self, s, addr, sig, fmt.Sprintf("dead-%s-%d", sigName(sig), i), capDur, settle)
		if err != nil {
			return nil, err
		}
		if !released {
			r.NotReleased++
			break // the same would happen again: no lease
		}
		r.TrialsMs = append(r.TrialsMs, ms(d))
	}
	r.MedianMs = median(r.TrialsMs)
	for _, t := range r.TrialsMs {
		r.MaxMs = max(r.MaxMs, t)
	}
	return r, nil
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGSTOP"
}

func deadTrial(ctx context.Context, self string, s *system, addr string, sig syscall.Signal, name string, capDur, settle time.Duration) (time.Duration, bool, error) {
	// Renewals (heartbeats, extensions, keepalives, pings) run on a fixed
	// period from the grant, so a signal at a fixed delay would always hit
	// the same point of that period and favour whichever system happens
	// to have renewed just before it. A random extra delay of up to one
	// lease samples every phase alike.
	var phase time.Duration
	if s.deadLease > 0 {
		phase = rand.N(s.deadLease)
	}
	cmd := exec.CommandContext(ctx, self, "holder", "-system", s.name, "-addr", addr, "-lock", name,
		"-lease", s.deadLease.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, false, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, false, err
	}
	errBuf := &tailBuffer{max: 4096}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		return 0, false, err
	}
	defer func() {
		cmd.Process.Kill()
		stdin.Close()
		cmd.Wait()
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Scan()
		line <- sc.Text()
		for sc.Scan() {
		}
	}()
	select {
	case l := <-line:
		if l != "HELD" {
			return 0, false, fmt.Errorf("holder: %q %s", l, strings.TrimSpace(errBuf.String()))
		}
	case <-time.After(30 * time.Second):
		return 0, false, fmt.Errorf("holder did not take the lock within 30s: %s", errBuf.String())
	}

	w, err := s.dial(ctx, addr, clientOpts{lease: s.deadLease})
	if err != nil {
		return 0, false, err
	}
	defer w.close()
	type got struct {
		h   unlocker
		at  time.Time
		err error
	}
	ch := make(chan got, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		h, err := w.lock(wctx, name)
		ch <- got{h, time.Now(), err}
	}()
	select {
	case g := <-ch:
		if g.err == nil {
			g.h.unlock()
			return 0, false, errors.New("waiter acquired a lock that was held: mutual exclusion broken")
		}
		return 0, false, fmt.Errorf("waiter failed before the holder died: %w", g.err)
	case <-time.After(settle + phase):
	}
	t0 := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, false, err
	}
	select {
	case g := <-ch:
		if g.err != nil {
			return 0, false, fmt.Errorf("waiter: %w", g.err)
		}
		g.h.unlock()
		return g.at.Sub(t0), true, nil
	case <-time.After(capDur):
		cancel()
		return capDur, false, nil
	}
}

// holderMain is "bench holder": take a lock and hold it until stdin
// closes (the harness is done with us) or a minute passes.
func holderMain(args []string) {
	fs := flag.NewFlagSet("holder", flag.ExitOnError)
	sysName := fs.String("system", "", "system")
	addr := fs.String("addr", "", "server address")
	name := fs.String("lock", "", "lock name")
	lease := fs.Duration("lease", 0, "lease / TTL / session timeout; 0: the default")
	fs.Parse(args)
	s, err := systemByName(*sysName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l, err := s.dial(ctx, *addr, clientOpts{lease: *lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	h, err := l.lock(ctx, *name)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock:", err)
		os.Exit(1)
	}
	fmt.Println("HELD")
	done := make(chan struct{})
	go func() {
		var b [1]byte
		os.Stdin.Read(b[:])
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	h.unlock()
	l.close()
}
