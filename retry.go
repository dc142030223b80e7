package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Backoff bounds of DoRetry.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// DoRetry is Do with retries. Until fn has run, it retries every failure
// that Temporary reports: dial errors, a connection lost or a claim given
// up before the lock was held, and server conditions (ERROR codes below
// 0x10), waiting between attempts as Retry does. Each attempt is a new
// connection at the back of the queue.
//
// It returns at once on a permanent error (a validation sentinel, a
// *ServerError with code 0x10 or above, a protocol violation) and when ctx
// is done (ctx.Err(), wrapped with the last failure if there was one).
//
// fn runs at most once: once it has run, DoRetry returns what Do returned,
// whatever it is.
func (c *Client) DoRetry(ctx context.Context, name string, lease time.Duration, fn func(ctx context.Context, token uint64) error) error {
	var result error
	err := retry(ctx, c.minBackoff, func() error {
		ran, err := c.do(ctx, name, lease, fn)
		if ran {
			result = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return result
}

// Retry calls attempt until it returns nil or an error that Temporary
// does not report, or until ctx is done; it returns that error, or
// ctx.Err() wrapped with the last failure. It is DoRetry's policy, for
// callers of Acquire and TryAcquire: between attempts it waits with
// exponential backoff and jitter, from 100ms doubling to 5s, except that
// it tries again at once after protocol.ErrShuttingDown (another server
// may be taking over) unless the attempt before ended the same way.
func Retry(ctx context.Context, attempt func() error) error {
	return retry(ctx, 0, attempt)
}

// retry is Retry with the first backoff as a parameter (0: minBackoff), so
// that tests can tell "at once" from "after a backoff" on a loaded machine.
func retry(ctx context.Context, backoff time.Duration, attempt func() error) error {
	if backoff <= 0 {
		backoff = minBackoff
	}
	shutdownBefore := false
	for {
		err := attempt()
		if err == nil || !Temporary(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx, err)
		}
		shutdown := errors.Is(err, protocol.ErrShuttingDown)
		if shutdown && !shutdownBefore {
			shutdownBefore = true
			continue
		}
		shutdownBefore = shutdown
		if sleep(ctx, jitter(backoff)) != nil {
			return ctxErr(ctx, err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// jitter returns a duration drawn uniformly from [d/2, d], so that clients
// that failed together do not come back together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func ctxErr(ctx context.Context, last error) error {
	if last == nil || last == ctx.Err() {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last failure: %w)", ctx.Err(), last)
}
