package main

// "bench election": the time from a leader's death to the next candidate
// leading and to the observers learning the new leader, for baton's
// Election and etcd's concurrency.Election, trials alternating between
// the two so that both see the same machine. A death is SIGKILL (the
// kernel closes the leader's connections) or SIGSTOP (a frozen process:
// only the lease can tell).
//
//	go run . election [-trials 15] [-observers 2]
//
// It prints one JSON line per trial and a Markdown table of the medians
// (docs/benchmarks.md, "Leader election").

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionSide is one system's election, as the benchmark drives it.
type electionSide interface {
	// campaign blocks until value leads, or ctx ends.
	campaign(ctx context.Context, value string) error
	// observe delivers each leader's value as it changes.
	observe(ctx context.Context) (<-chan string, error)
	close()
}

// electionLease is every session's lease / TTL: 1s, the least etcd
// accepts with the settings startEtcd gives it (as in the dead-holder
// scenario).
const electionLease = time.Second

func openElection(ctx context.Context, sys, addr, name string) (electionSide, error) {
	switch sys {
	case "baton":
		sess, err := baton.New(baton.DefaultConfig(addr)).OpenSession(ctx, baton.SessionOptions{Lease: electionLease, Label: "bench"})
		if err != nil {
			return nil, err
		}
		return &batonElection{sess, baton.NewElection(sess, name)}, nil
	case "etcd":
		cli, err := newEtcdClient(addr)
		if err != nil {
			return nil, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(electionLease/time.Second)), concurrency.WithContext(ctx))
		if err != nil {
			cli.Close()
			return nil, err
		}
		return &etcdElection{cli, sess, concurrency.NewElection(sess, "/bench/elect/"+name)}, nil
	}
	return nil, fmt.Errorf("no election for system %q", sys)
}

type batonElection struct {
	s *baton.Session
	e *baton.Election
}

func (b *batonElection) campaign(ctx context.Context, v string) error { return b.e.Campaign(ctx, v) }
func (b *batonElection) close()                                       { b.s.Close() }
func (b *batonElection) observe(ctx context.Context) (<-chan string, error) {
	out := make(chan string, 16)
	go func() {
		defer close(out)
		for l := range b.e.Observe(ctx) {
			out <- l.Value
		}
	}()
	return out, nil
}

type etcdElection struct {
	cli  *clientv3.Client
	sess *concurrency.Session
	e    *concurrency.Election
}

func (e *etcdElection) campaign(ctx context.Context, v string) error { return e.e.Campaign(ctx, v) }
func (e *etcdElection) close()                                       { e.sess.Close(); e.cli.Close() }
func (e *etcdElection) observe(ctx context.Context) (<-chan string, error) {
	out := make(chan string, 16)
	go func() {
		defer close(out)
		for r := range e.e.Observe(ctx) {
			if len(r.Kvs) > 0 {
				out <- string(r.Kvs[0].Value)
			}
		}
	}()
	return out, nil
}

// electionTrial is one leader death.
type electionTrial struct {
	System   string    `json:"system"`
	Signal   string    `json:"signal"`
	Trial    int       `json:"trial"`
	Promoted float64   `json:"promoted_ms"`      // the waiting candidate leads
	Observed []float64 `json:"observed_ms"`      // each observer learns it
	Missed   int       `json:"missed,omitempty"` // observers that never did
}

func electionMain(args []string) {
	fs := flag.NewFlagSet("election", flag.ExitOnError)
	trials := fs.Int("trials", 15, "leader deaths per system")
	observers := fs.Int("observers", 2, "observers per system")
	batonBin := fs.String("baton-bin", "", "baton binary (default: build ../cmd/baton)")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	tmp, err := os.MkdirTemp("", "bench-election-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	e := &env{tmp: tmp}
	if e.batonBin, e.batonVersion, err = buildBaton(ctx, *batonBin, tmp); err != nil {
		fail(err)
	}
	servers := map[string]*server{}
	for _, s := range []*system{batonSystem(), etcdSystem()} {
		srv, err := s.start(ctx, e)
		if err != nil {
			fail(fmt.Errorf("%s: %w", s.name, err))
		}
		defer srv.stop()
		servers[s.name] = srv
	}
	results := map[string][]electionTrial{}
	sigs := []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP}
	for i := range *trials {
		for _, sig := range sigs {
			for _, sys := range []string{"baton", "etcd"} {
				tr, err := electionRound(ctx, self, sys, servers[sys].addr, fmt.Sprintf("e%d-%d", i, sig), *observers, sig)
				if err != nil {
					fail(fmt.Errorf("%s trial %d: %w", sys, i, err))
				}
				tr.Trial = i
				line, _ := json.Marshal(tr)
				fmt.Println(string(line))
				results[sys+" "+tr.Signal] = append(results[sys+" "+tr.Signal], *tr)
			}
		}
	}
	fmt.Printf("\n| system | leader's death | → next candidate leads (median, max) | → every observer knows (median, max) | observers that missed it |\n|---|---|---|---|---|\n")
	for _, sig := range sigs {
		for _, sys := range []string{"baton", "etcd"} {
			var prom, obs []float64
			missed := 0
			for _, t := range results[sys+" "+sigName(sig)] {
				prom = append(prom, t.Promoted)
				obs = append(obs, slices.Max(append([]float64{0}, t.Observed...)))
				missed += t.Missed
			}
			fmt.Printf("| %s | %s | %.1f ms, %.1f ms | %.1f ms, %.1f ms | %d |\n", sys, sigName(sig), median(prom), slices.Max(prom), median(obs), slices.Max(obs), missed)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench election:", err)
	os.Exit(1)
}

// electionRound runs one trial: a leader in a child process, a waiting
// candidate and the observers here; the leader gets sig after a random
// phase of up to one lease (as deadTrial does).
func electionRound(ctx context.Context, self, sys, addr, name string, observers int, sig syscall.Signal) (*electionTrial, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "elect-leader", "-system", sys, "-addr", addr, "-name", name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errBuf := &tailBuffer{max: 4096}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "LEADING" {
		return nil, fmt.Errorf("leader: %q %s", sc.Text(), strings.TrimSpace(errBuf.String()))
	}

	type seen struct {
		at  time.Time
		err error
	}
	var wg sync.WaitGroup
	obsDone := make([]chan time.Time, observers)
	var sides []electionSide
	defer func() {
		for _, s := range sides {
			s.close()
		}
	}()
	for i := range observers {
		o, err := openElection(ctx, sys, addr, name)
		if err != nil {
			return nil, err
		}
		sides = append(sides, o)
		ch, err := o.observe(ctx)
		if err != nil {
			return nil, err
		}
		first := <-ch
		if first != "leader-1" {
			return nil, fmt.Errorf("observer %d first saw %q, want leader-1", i, first)
		}
		obsDone[i] = make(chan time.Time, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range ch {
				if v == "leader-2" {
					obsDone[i] <- time.Now()
					return
				}
			}
		}()
	}
	cand, err := openElection(ctx, sys, addr, name)
	if err != nil {
		return nil, err
	}
	sides = append(sides, cand)
	led := make(chan seen, 1)
	go func() {
		err := cand.campaign(ctx, "leader-2")
		led <- seen{time.Now(), err}
	}()
	select {
	case s := <-led:
		return nil, fmt.Errorf("the candidate led while the leader lived (err %v)", s.err)
	case <-time.After(150*time.Millisecond + rand.N(electionLease)):
	}
	t0 := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		return nil, err
	}
	tr := &electionTrial{System: sys, Signal: sigName(sig)}
	s := <-led
	if s.err != nil {
		return nil, fmt.Errorf("candidate: %w", s.err)
	}
	tr.Promoted = ms(s.at.Sub(t0))
	for i := range observers {
		select {
		case at := <-obsDone[i]:
			tr.Observed = append(tr.Observed, ms(at.Sub(t0)))
		case <-time.After(10 * time.Second):
			tr.Missed++
		}
	}
	cancel()
	wg.Wait()
	return tr, nil
}

// electLeaderMain is "bench elect-leader": campaign as leader-1, print
// LEADING, and lead until killed (or a minute passes).
func electLeaderMain(args []string) {
	fs := flag.NewFlagSet("elect-leader", flag.ExitOnError)
	sys := fs.String("system", "", "baton or etcd")
	addr := fs.String("addr", "", "server address")
	name := fs.String("name", "", "election name")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := openElection(ctx, *sys, *addr, *name)
	if err == nil {
		err = e.campaign(ctx, "leader-1")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "elect-leader:", err)
		os.Exit(1)
	}
	fmt.Println("LEADING")
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		os.Exit(1)
	}
}
