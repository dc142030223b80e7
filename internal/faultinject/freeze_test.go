//go:build linux

package faultinject_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/faultinject"
	"github.com/batonlock/baton/internal/freeport"
)

// TestFreezeServerUnderQueue freezes a real server (SIGSTOP) under a
// holder and several queued clients until the holder gives up (0.8 of a
// lease after its last confirmed heartbeat, 1.1 to 1.6 s into the freeze
// with a 2 s lease), then thaws it (SIGCONT), round after round. The
// holder's function takes a while to stop once cancelled. A client that
// closed its connection at the give-up would have the thawed server read
// the close at once and promote the next waiter while that function is
// still stopping; the rule (docs/protocol.md, client obligation 3) is to
// keep the connection until the function has returned, and at the latest
// until anchor + lease. The test records when every function starts and
// ends, on this process's monotonic clock, and requires that no function
// starts before the previous one has ended.
func TestFreezeServerUnderQueue(t *testing.T) {
	// Serial (no t.Parallel): it times the freeze against the holder's give-up.
	if testing.Short() {
		t.Skip("builds the server and freezes it for several seconds; not with -short")
	}
	const (
		clients  = 5
		lease    = 2 * time.Second
		stopping = 100 * time.Millisecond // how long a function takes to stop once cancelled: a quarter of the lease's last fifth
		rounds   = 6
	)
	h := &harness{t: t, dir: t.TempDir(), killed: map[string]int64{}, changed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.build(ctx); err != nil {
		t.Fatal(err)
	}
	h.addr = freeport.Addr(t) // every server process of the run listens on it: proxies and clients need not know of restarts
	h.startServer()
	t.Cleanup(h.killAll)

	type span struct {
		client     int
		token      uint64
		start, end time.Time // on this process's monotonic clock
		cause      error     // why the function was cancelled, if it was
	}
	var (
		mu    sync.Mutex
		spans []span
		// Events from the functions: a start, and a cancellation seen.
		started = make(chan int, 1024)
		told    = make(chan int, 1024)
	)
	c := baton.New(baton.Config{Address: h.addr})
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for runCtx.Err() == nil {
				// A function works until it is cancelled: the lock moves
				// only when a freeze makes its holder give up.
				err := c.Do(runCtx, "frozen", lease, func(ctx context.Context, token uint64) error {
					sp := span{client: i, token: token, start: time.Now()}
					started <- i
					select {
					case <-ctx.Done():
						sp.cause = context.Cause(ctx)
						told <- i
						time.Sleep(stopping) // the work takes a while to stop
					case <-time.After(waitMax):
						t.Errorf("client %d: function not cancelled within %v", i, waitMax)
					}
					sp.end = time.Now()
					mu.Lock()
					spans = append(spans, sp)
					mu.Unlock()
					return nil
				})
				if err != nil && !baton.Temporary(err) && !errors.Is(err, context.Canceled) {
					t.Errorf("client %d: Do: %v", i, err)
					return
				}
			}
		})
	}
	finish := func() {
		stop()
		wg.Wait()
	}
	// next waits for an event of ch, and returns the client that sent it.
	next := func(ch <-chan int, what string) int {
		t.Helper()
		select {
		case i := <-ch:
			return i
		case <-time.After(waitMax):
			finish()
			t.Fatalf("no %s within %v", what, waitMax)
			return -1
		}
	}
	pid := h.srv.cmd.Process.Pid
	var frozenFor []time.Duration
	holder := next(started, "first grant")
	for r := range rounds {
		if err := faultinject.Freeze(pid, waitMax); err != nil {
			finish()
			t.Fatalf("round %d: %v", r+1, err)
		}
		frozeAt := time.Now()
		if i := next(told, "give-up during the freeze"); i != holder {
			t.Errorf("round %d: client %d gave up, but client %d holds the lock", r+1, i, holder)
		}
		frozenFor = append(frozenFor, time.Since(frozeAt))
		h.srv.signal(syscall.SIGCONT)
		holder = next(started, "grant after the thaw")
	}
	finish()

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	overlaps := 0
	for i := 1; i < len(spans); i++ {
		sp, prev := spans[i], spans[i-1]
		if sp.start.Before(prev.end) {
			overlaps++
			t.Errorf("client %d's function (token %d) started %v before client %d's (token %d, cancelled by %v) ended",
				sp.client, sp.token, prev.end.Sub(sp.start), prev.client, prev.token, prev.cause)
		}
		if sp.token <= prev.token {
			t.Errorf("token %d of client %d's function is not above the previous function's %d", sp.token, sp.client, prev.token)
		}
	}
	if len(spans) < rounds+1 {
		t.Fatalf("%d functions ran in %d rounds, want at least %d", len(spans), rounds, rounds+1)
	}
	for _, sp := range spans[:len(spans)-1] {
		if !errors.Is(sp.cause, baton.ErrHeartbeatTimeout) {
			t.Errorf("client %d's function (token %d) was cancelled by %v, want a give-up", sp.client, sp.token, sp.cause)
		}
	}
	t.Logf("%d freezes of a server under %d clients (lease %v), each until the holder gave up: frozen for %v; %d functions, each taking %v to stop; %d overlaps",
		rounds, clients, lease, frozenFor, len(spans), stopping, overlaps)
}
