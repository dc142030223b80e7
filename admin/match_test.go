package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestPathologicalMatchKeepsHolders: with 3,000 locks held, a holder that
// heartbeats every 400 ms on a 2 s lease keeps its lock while the admin
// API is flooded with the most expensive patterns it accepts, and a
// pattern of a million stars is refused at once with a clear 400.
func TestPathologicalMatchKeepsHolders(t *testing.T) {
	f := start(t)
	const locks = 3000
	for i := range locks {
		c := opstest.Dial(t, f.addr)
		c.Send(opstest.AcquireFrame(fmt.Sprintf("%0250d/%d", 0, i), time.Minute))
	}
	f.rec.WaitCount(t, server.EventGranted, locks)
	holder := opstest.Dial(t, f.addr)
	holder.Acquire("heartbeating", 2*time.Second)
	holder.Expect(protocol.TypeAcquired, 0)

	// Flood with a million stars and the worst accepted patterns while
	// the holder heartbeats.
	million := strings.Repeat("*", 1_000_000)
	worst := []string{
		strings.Repeat("*0", glob.MaxStars-1) + "*x",
		"*" + strings.Repeat("?", 120) + "x*y",
		million[:glob.MaxLen],
	}
	type answer struct {
		code int
		v    map[string]any
		took time.Duration
	}
	millionAnswer := make(chan answer, 1)
	go func() {
		start := time.Now()
		code, _, v := call(t, "GET", f.url+"/api/locks?match="+million)
		millionAnswer <- answer{code, v, time.Since(start)}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	requests := 0
	for i := range 2 {
		wg.Go(func() {
			for j := i; ctx.Err() == nil && j < 10_000; j++ {
				req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/api/locks?match="+url.QueryEscape(worst[j%len(worst)]), nil)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					mu.Lock()
					requests++
					mu.Unlock()
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	var slowest time.Duration
	for range 8 { // 3.2 s: more than the lease
		time.Sleep(400 * time.Millisecond)
		sent := time.Now()
		holder.Heartbeat()
		fr, err := opstest.ReadFrame(holder.Conn)
		if err != nil || fr.Type != protocol.TypeAcquired {
			t.Fatalf("heartbeat during the flood: %v %v (the holder lost its lock)", fr, err)
		}
		slowest = max(slowest, time.Since(sent))
	}
	cancel()
	wg.Wait()
	t.Logf("%d pathological requests; slowest heartbeat reply %v", requests, slowest)
	if requests == 0 {
		t.Error("no request completed during the flood")
	}
	select {
	case a := <-millionAnswer:
		t.Logf("a million stars answered %d in %v: %v", a.code, a.took, a.v)
		if msg, _ := a.v["error"].(string); a.code != http.StatusBadRequest || !strings.Contains(msg, "match pattern") || !strings.Contains(msg, "longer than") {
			t.Errorf("a million stars = %d %v, want 400 naming the pattern's length", a.code, a.v)
		}
	case <-time.After(opstest.Timeout):
		t.Errorf("no answer to a million stars within %v", opstest.Timeout)
	}
}
