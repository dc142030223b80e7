package server_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// holderCheck is an Observer that follows every grant and release (they
// arrive in table order, under the table's lock) and records the first
// violation: two conflicting holders of a lock, a semaphore over its
// limit, or a token not above every earlier one.
type holderCheck struct {
	mu      sync.Mutex
	holders map[string]map[uint64]server.Mode // lock -> token -> mode
	last    uint64
	grants  int
	err     error
}

func (h *holderCheck) Observe(e server.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holders == nil {
		h.holders = map[string]map[uint64]server.Mode{}
	}
	switch e.Kind {
	case server.EventGranted:
		h.grants++
		if e.Token <= h.last && h.err == nil {
			h.err = fmt.Errorf("token %d after %d", e.Token, h.last)
		}
		h.last = e.Token
		hs := h.holders[e.Lock]
		if hs == nil {
			hs = map[uint64]server.Mode{}
			h.holders[e.Lock] = hs
		}
		for _, m := range hs {
			conflict := m == server.Exclusive || e.Mode == server.Exclusive
			if m == server.Semaphore && e.Mode == server.Semaphore {
				conflict = len(hs) >= 3 // the semaphore names below have limit 3
			}
			if conflict && h.err == nil {
				h.err = fmt.Errorf("lock %q granted %v to token %d while held by %v", e.Lock, e.Mode, e.Token, hs)
			}
		}
		hs[e.Token] = e.Mode
	case server.EventReleased:
		delete(h.holders[e.Lock], e.Token)
	}
}

// TestV2Contention: 20 sessions over real TCP, each with up to 4 claims
// at once on a few names (exclusive and shared on two, a semaphore of 3
// on one), claim at random and release each claim once it is held; never two conflicting holders,
// never a semaphore over its limit, tokens strictly increasing, and every
// claim eventually granted (no starvation: each session finishes).
func TestV2Contention(t *testing.T) {
	t.Parallel()
	check := &holderCheck{}
	ts := startServer(t, func(s *server.Server) { s.Observer = server.Observers{s.Observer, check} })
	const sessions, rounds = 20, 40
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			if err := contend(ts.addr, uint64(i), rounds); err != nil {
				errs <- fmt.Errorf("session %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	check.mu.Lock()
	defer check.mu.Unlock()
	if check.err != nil {
		t.Fatal(check.err)
	}
	t.Logf("%d grants", check.grants)
	if check.grants < sessions*rounds {
		t.Errorf("%d grants, want at least %d", check.grants, sessions*rounds)
	}
}

// contend runs one session: each round claims up to four locks at once
// (in one write) and releases each as soon as it is held.
func contend(addr string, seed uint64, rounds int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitLimit))
	rng := rand.New(rand.NewPCG(seed, 7))
	if _, err := c.Write(openingV2(longLease, fmt.Sprint("s", seed))); err != nil {
		return err
	}
	if f, err := protocol.ReadHelloAnswer(c); err != nil || f.Type != protocol.TypeWelcome {
		return fmt.Errorf("opening: %v, %v", f, err)
	}
	for range rounds {
		var out []byte
		pending := map[uint32]bool{}
		n := 1 + rng.IntN(4)
		for id := uint32(1); id <= uint32(n); id++ {
			switch rng.IntN(5) {
			case 0, 1:
				out = protocol.AppendClaim(out, id, protocol.ModeShared, 0, 0, fmt.Sprint("rw", id%2))
			case 2, 3:
				out = protocol.AppendClaim(out, id, protocol.ModeExclusive, 0, 0, fmt.Sprint("rw", id%2))
			default:
				out = protocol.AppendClaim(out, id, protocol.ModeSemaphore, 3, 0, "sem")
			}
			pending[id] = true
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
		// Each claim is released as soon as it is held: no session holds
		// one lock while it waits for another, so nothing can deadlock.
		for len(pending) > 0 {
			f, err := protocol.ReadServerFrameV2(c)
			if err != nil {
				return err
			}
			switch f.Type {
			case protocol.TypeGranted, protocol.TypePromoted:
				if _, err := c.Write(protocol.AppendRelease(nil, f.Claim)); err != nil {
					return err
				}
			case protocol.TypeReleased:
				delete(pending, f.Claim)
			case protocol.TypeQueued:
			default:
				return fmt.Errorf("unexpected %v", f)
			}
		}
	}
	return nil
}

// TestHolderCheckFails shows that TestV2Contention's observer can fail.
func TestHolderCheckFails(t *testing.T) {
	g := func(lock string, tok uint64, m server.Mode) server.Event {
		return server.Event{Kind: server.EventGranted, Lock: lock, Token: tok, Mode: m}
	}
	for _, tc := range []struct {
		name string
		evs  []server.Event
	}{
		{"two exclusive", []server.Event{g("a", 1, server.Exclusive), g("a", 2, server.Exclusive)}},
		{"shared under exclusive", []server.Event{g("a", 1, server.Exclusive), g("a", 2, server.Shared)}},
		{"semaphore over 3", []server.Event{g("s", 1, server.Semaphore), g("s", 2, server.Semaphore), g("s", 3, server.Semaphore), g("s", 4, server.Semaphore)}},
		{"token not increasing", []server.Event{g("a", 2, server.Shared), g("b", 2, server.Shared)}},
	} {
		var h holderCheck
		for _, e := range tc.evs {
			h.Observe(e)
		}
		if h.err == nil {
			t.Errorf("%s: not caught", tc.name)
		}
	}
	var ok holderCheck
	for _, e := range []server.Event{g("a", 1, server.Shared), g("a", 2, server.Shared),
		{Kind: server.EventReleased, Lock: "a", Token: 1}, {Kind: server.EventReleased, Lock: "a", Token: 2}, g("a", 3, server.Exclusive)} {
		ok.Observe(e)
	}
	if ok.err != nil {
		t.Errorf("a valid history refused: %v", ok.err)
	}
}
