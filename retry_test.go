package baton

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

func TestDoRetry(t *testing.T) {
	t.Parallel()

	// 0x01: reconnect at once; 0x02: back off first. The first backoff is
	// raised to 2s (jittered to [1s, 2s]) so that scheduling delays on a
	// loaded machine cannot blur the difference.
	const backoff = 2 * time.Second
	for _, tc := range []struct {
		code     protocol.Code
		min, max time.Duration
	}{
		{protocol.CodeShuttingDown, 0, backoff/2 - 100*time.Millisecond},
		{protocol.CodeClosedByAdmin, backoff / 2, backoff + time.Second},
	} {
		t.Run(tc.code.Reason(), func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			c := fake.client()
			c.minBackoff = backoff
			runs := 0
			done := make(chan error, 1)
			go func() {
				done <- c.DoRetry(t.Context(), "job", time.Second, func(context.Context, uint64) error {
					runs++
					return nil
				})
			}()
			fc, _ := fake.accept()
			// Stamp before the ERROR goes out: after 0x01 the client may
			// reconnect before a stamp taken after the write.
			sent := time.Now()
			fc.fail(tc.code)
			fc2, acq := fake.accept()
			gap := acq.at.Sub(sent)
			fc2.acquired(1)
			if err := result(t, done); err != nil || runs != 1 {
				t.Fatalf("DoRetry: %v after %d runs of fn, want nil after 1", err, runs)
			}
			if gap < tc.min || gap > tc.max {
				t.Errorf("reconnected %v after ERROR %v; want within [%v, %v]", gap, tc.code, tc.min, tc.max)
			}
			t.Logf("reconnected %v after ERROR %v", gap, tc.code)
		})
	}

	t.Run("permanent error returns at once", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		done := make(chan error, 1)
		go func() {
			done <- c.DoRetry(t.Context(), "job", time.Second, func(context.Context, uint64) error {
				t.Error("fn ran")
				return nil
			})
		}()
		fc, _ := fake.accept()
		fc.fail(protocol.CodeNotAuthorized)
		if err := result(t, done); !errors.Is(err, protocol.ErrNotAuthorized) {
			t.Fatalf("DoRetry: %v, want ErrNotAuthorized", err)
		}
		// DoRetry has returned, so any second attempt would be queued.
		if len(fake.conns) != 0 {
			t.Error("DoRetry reconnected after a permanent error")
		}
	})

	t.Run("dial errors and loss while waiting are retried", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		d := &countingDialer{fails: 2}
		c := New(Config{Address: fake.addr(), Dialer: d})
		tokens := make(chan uint64, 2)
		done := make(chan error, 1)
		go func() {
			done <- c.DoRetry(t.Context(), "job", time.Second, func(_ context.Context, token uint64) error {
				tokens <- token
				return nil
			})
		}()
		fc, _ := fake.accept()
		fc.waiting()
		fc.c.Close() // lost while queued: fn has not run, so try again
		fc2, _ := fake.accept()
		fc2.acquired(5)
		if err := result(t, done); err != nil {
			t.Fatal(err)
		}
		if len(tokens) != 1 || <-tokens != 5 {
			t.Error("fn did not run exactly once with token 5")
		}
		if n := d.count(); n != 4 {
			t.Errorf("dialed %d times, want 2 failures + 2 connections", n)
		}
	})

	t.Run("fn never runs twice", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		runs := 0
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.DoRetry(t.Context(), "job", time.Second, func(ctx context.Context, _ uint64) error {
				runs++
				close(started)
				<-ctx.Done()
				return nil
			})
		}()
		fc, _ := fake.accept()
		fc.acquired(1)
		<-started
		fc.fail(protocol.CodeShuttingDown) // temporary, but fn already ran
		err := result(t, done)
		if !errors.Is(err, protocol.ErrShuttingDown) || runs != 1 {
			t.Fatalf("DoRetry: %v after %d runs, want ErrShuttingDown after 1", err, runs)
		}
		if len(fake.conns) != 0 {
			t.Error("DoRetry reconnected after fn ran")
		}
	})

	t.Run("ctx ends the retries", func(t *testing.T) {
		t.Parallel()
		d := &countingDialer{fails: 1 << 30}
		c := New(Config{Address: "127.0.0.1:1", Dialer: d})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := c.DoRetry(ctx, "job", time.Second, func(context.Context, uint64) error { return nil })
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DoRetry: %v, want DeadlineExceeded", err)
		}
		if took > time.Second {
			t.Errorf("DoRetry returned %v after start; ctx ended at 300ms", took)
		}
		// 100ms then 200ms backoff (with jitter): at most 3 dials in 300ms.
		if n := d.count(); n < 1 || n > 3 {
			t.Errorf("dialed %d times in 300ms; want exponential backoff from 100ms", n)
		}
		t.Logf("%d dials in %v: %v", d.count(), took, err)
	})
}

func TestJitter(t *testing.T) {
	for range 1000 {
		for _, d := range []time.Duration{minBackoff, time.Second, maxBackoff} {
			if j := jitter(d); j < d/2 || j > d {
				t.Fatalf("jitter(%v) = %v, want within [%v, %v]", d, j, d/2, d)
			}
		}
	}
}

// Retry's own contract: stop on nil, on a permanent error, and on ctx.
func TestRetry(t *testing.T) {
	t.Parallel()
	n := 0
	err := Retry(t.Context(), func() error {
		n++
		if n < 3 {
			return &ServerError{Code: protocol.CodeShuttingDown}
		}
		return nil
	})
	// Two shutdowns in a row: the first retries at once, the second backs
	// off; then success.
	if err != nil || n != 3 {
		t.Errorf("Retry: %v after %d attempts, want nil after 3", err, n)
	}
	n = 0
	perm := &ServerError{Code: protocol.CodeInvalidLease}
	if err := Retry(t.Context(), func() error { n++; return perm }); err != perm || n != 1 {
		t.Errorf("Retry: %v after %d attempts, want the permanent error after 1", err, n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = Retry(ctx, func() error { return ErrConnectionClosed })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConnectionClosed) {
		t.Errorf("Retry with a done ctx: %v, want Canceled wrapping the last failure", err)
	}
}
