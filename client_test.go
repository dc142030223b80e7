package baton

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if runHelper() {
		return
	}
	goleak.VerifyTestMain(m)
}

// goDo runs c.Do in a goroutine and returns its result channel.
func goDo(ctx context.Context, c *Client, name string, lease time.Duration, fn func(context.Context, uint64) error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Do(ctx, name, lease, fn) }()
	return ch
}

func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(fakeTimeout):
		t.Fatal("Do did not return")
		return nil
	}
}

// spacing runs a Do against the fake, answering heartbeats after delay,
// and returns the gaps between n+1 consecutive heartbeat arrivals.
func spacing(t *testing.T, lease, minInterval, delay time.Duration, n int) []time.Duration {
	fake := newFake(t)
	c := New(Config{Address: fake.addr(), MinHeartbeatInterval: minInterval})
	release := make(chan struct{})
	done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, _ uint64) error {
		<-release
		return nil
	})
	fc, _ := fake.accept()
	time.Sleep(delay) // the ACQUIRE's round trip counts too
	fc.acquired(1)
	r := fc.respond(delay, always(protocol.AppendAcquired(nil, 1)))
	prev := r.beat()
	var gaps []time.Duration
	for range n {
		at := r.beat()
		gaps = append(gaps, at.Sub(prev))
		prev = at
	}
	close(release)
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	r.halt()
	return gaps
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func TestHeartbeatSpacingFastLink(t *testing.T) {
	t.Parallel()
	const lease = 800 * time.Millisecond // base 200ms
	gaps := spacing(t, lease, 10*time.Millisecond, 0, 6)
	// Gaps are measured where the fake reads the heartbeats: scheduling
	// jitter there can shorten one gap and lengthen the next, the mean
	// cannot drift.
	for _, g := range gaps {
		if g < 140*time.Millisecond || g > 300*time.Millisecond {
			t.Errorf("heartbeat gaps %v: want each near lease/4 = 200ms", gaps)
			break
		}
	}
	if m := mean(gaps); m < 185*time.Millisecond || m > 240*time.Millisecond {
		t.Errorf("heartbeat gaps %v, mean %v: want about lease/4 = 200ms", gaps, m)
	}
	t.Logf("fast link: gaps %v, mean %v (lease/4 = %v)", gaps, mean(gaps), lease/4)
}

func TestHeartbeatSpacingSlowLink(t *testing.T) {
	t.Parallel()
	const lease = 800 * time.Millisecond // base 200ms
	const rtt = 40 * time.Millisecond    // interval 200 - 2*40 = 120ms
	gaps := spacing(t, lease, 10*time.Millisecond, rtt, 6)
	m := mean(gaps[1:])
	if m < 100*time.Millisecond || m > 170*time.Millisecond {
		t.Errorf("heartbeat gaps %v, mean %v: want about base-2*rtt = 120ms", gaps, m)
	}
	t.Logf("rtt %v: gaps %v, mean %v", rtt, gaps, m)
}

func TestHeartbeatFloor(t *testing.T) {
	t.Parallel()
	const lease = 800 * time.Millisecond // base 200ms
	const floor = 150 * time.Millisecond
	const rtt = 60 * time.Millisecond // base - 2*rtt = 80ms < floor
	gaps := spacing(t, lease, floor, rtt, 5)
	// Gaps are measured where the fake reads the heartbeats: a read
	// delayed by scheduling shortens the next gap by as much, but not the
	// time since the first heartbeat. So the k-th heartbeat must come at
	// least k floors after the first, less one such delay.
	const jitter = 40 * time.Millisecond
	var since time.Duration
	for k, g := range gaps {
		since += g
		if since < time.Duration(k+1)*floor-jitter {
			t.Errorf("heartbeat gaps %v: heartbeat %d came %v after the first, below %d floors of %v", gaps, k+1, since, k+1, floor)
			break
		}
	}
	if m := mean(gaps); m > 200*time.Millisecond {
		t.Errorf("heartbeat gaps %v, mean %v: want about the floor %v", gaps, m, floor)
	}
	t.Logf("floor %v, rtt %v: gaps %v", floor, rtt, gaps)
}

// A reply slower than the interval holds the next heartbeat back until it
// arrives: never two in flight.
func TestOneHeartbeatInFlight(t *testing.T) {
	t.Parallel()
	// base 500ms, give-up 1.6s. Once srtt nears the delay, the interval
	// drops to the floor (10ms), far below the delay: only the reply can
	// release the next heartbeat. (The anchor lags two delays behind: the
	// lease must stay above 2*delay/0.8 or the client rightly gives up.)
	const lease = 2 * time.Second
	const delay = 400 * time.Millisecond
	fake := newFake(t)
	c := fake.client()
	release := make(chan struct{})
	done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, _ uint64) error {
		<-release
		return nil
	})
	fc, _ := fake.accept()
	fc.acquired(1)
	// respond fails the test if a heartbeat arrives before the previous
	// reply was sent.
	r := fc.respond(delay, always(protocol.AppendAcquired(nil, 1)))
	prev := r.beat()
	for range 3 {
		at := r.beat()
		if gap := at.Sub(prev); gap < delay || gap > delay+100*time.Millisecond {
			t.Errorf("heartbeat %v after the previous one: want just after its reply (%v)", gap, delay)
		}
		prev = at
	}
	close(release)
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	r.halt()
}

// Give-up: when heartbeats stop being answered, the client cancels fn at
// anchor + 0.8 lease and closes once fn has returned, before the server's
// lease can end.
func TestGiveUpAtAnchor(t *testing.T) {
	t.Parallel()
	const lease = 500 * time.Millisecond
	fake := newFake(t)
	c := fake.client()
	cancelled := make(chan time.Time, 1)
	var cause error
	done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		cancelled <- time.Now()
		cause = context.Cause(ctx)
		return nil
	})
	fc, _ := fake.accept()
	fc.acquired(1)
	// Answer two heartbeats, then go silent.
	r := fc.respond(0, func(n int) []byte {
		if n <= 2 {
			return protocol.AppendAcquired(nil, 1)
		}
		return nil
	})
	r.beat()
	anchor := r.beat() // send time of the last answered heartbeat, as seen here
	lastSeen := r.beat()
	err := result(t, done)
	at := <-cancelled
	eof := fc.waitEOF()
	r.halt()
	if !errors.Is(err, ErrHeartbeatTimeout) || !errors.Is(cause, ErrHeartbeatTimeout) {
		t.Fatalf("Do: %v, fn's cause %v; want ErrHeartbeatTimeout", err, cause)
	}
	giveUp := at.Sub(anchor)
	// The fake reads the anchor heartbeat a little after it was sent.
	if giveUp < 4*lease/5-30*time.Millisecond || giveUp > 4*lease/5+150*time.Millisecond {
		t.Errorf("fn cancelled %v after the anchor; want about 0.8*lease = %v", giveUp, 4*lease/5)
	}
	if serverEnd := lastSeen.Add(lease); !eof.Before(serverEnd) {
		t.Errorf("client closed %v after the server's lease ended", eof.Sub(serverEnd))
	}
	t.Logf("gave up %v after the anchor; closed %v before the server's lease ended", giveUp, lastSeen.Add(lease).Sub(eof))
}

// After a give-up, Do keeps the connection open until fn has returned, so
// that the server cannot promote the next waiter while fn is still
// stopping (docs/protocol.md, client obligation 3): fn is told first, the
// close comes after its return.
func TestGiveUpClosesAfterFnReturns(t *testing.T) {
	t.Parallel()
	const lease = time.Second   // give up at 800ms, close by 1s
	const stopping = lease / 10 // how long fn takes to stop once told
	fake := newFake(t)
	c := fake.client()
	var cancelled, returned time.Time
	done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		cancelled = time.Now()
		time.Sleep(stopping)
		returned = time.Now()
		return nil
	})
	fc, acq := fake.accept()
	fc.acquired(1)
	r := fc.respond(0, func(int) []byte { return nil }) // heartbeats go unanswered
	eof := fc.waitEOF()
	err := result(t, done)
	r.halt()
	if !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("Do: %v, want ErrHeartbeatTimeout", err)
	}
	if eof.Before(returned) {
		t.Errorf("connection closed %v before fn returned (fn cancelled %v after ACQUIRE): the server could promote the next waiter while fn ran",
			returned.Sub(eof), cancelled.Sub(acq.at))
	}
	if d := eof.Sub(acq.at); d > lease {
		t.Errorf("connection closed %v after ACQUIRE, after anchor + lease", d)
	}
	t.Logf("fn cancelled %v after ACQUIRE, returned %v later; connection closed %v after its return",
		cancelled.Sub(acq.at), returned.Sub(cancelled), eof.Sub(returned))
}

// A function that does not stop when told keeps the claim only until
// anchor + lease: then Do closes the connection, fn still running.
func TestGiveUpClosesByAnchorPlusLease(t *testing.T) {
	t.Parallel()
	const lease = 500 * time.Millisecond
	fake := newFake(t)
	c := fake.client()
	release := make(chan struct{})
	done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		<-release // ignores the cancellation until the test lets it go
		return nil
	})
	fc, acq := fake.accept()
	fc.acquired(1)
	r := fc.respond(0, func(int) []byte { return nil })
	eof := fc.waitEOF()
	close(release)
	err := result(t, done)
	r.halt()
	if !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("Do: %v, want ErrHeartbeatTimeout", err)
	}
	// The anchor is ACQUIRE's send time, a little before the fake read it;
	// the old close at the give-up came at 0.8·lease, 100ms earlier.
	if d := eof.Sub(acq.at); d < lease-50*time.Millisecond || d > lease+300*time.Millisecond {
		t.Errorf("connection closed %v after ACQUIRE; want at anchor + lease, about %v", d, lease)
	}
	t.Logf("connection closed %v after ACQUIRE (lease %v) while fn still ran", eof.Sub(acq.at), lease)
}

// Before the first reply, the deadline is ACQUIRE's send time + 0.8 lease.
func TestGiveUpBeforeFirstReply(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	fake := newFake(t)
	c := fake.client()
	ran := false
	done := goDo(t.Context(), c, "job", lease, func(context.Context, uint64) error { ran = true; return nil })
	fc, acq := fake.accept()
	if acq.acq.LeaseMS != 300 || acq.acq.Name != "job" || acq.acq.Version != 1 {
		t.Errorf("ACQUIRE %+v", acq.acq)
	}
	err := result(t, done)
	eof := fc.waitEOF()
	if !errors.Is(err, ErrHeartbeatTimeout) || ran {
		t.Fatalf("Do: %v, fn ran: %v; want ErrHeartbeatTimeout, fn not run", err, ran)
	}
	if d := eof.Sub(acq.at); d < 4*lease/5-30*time.Millisecond || d >= lease {
		t.Errorf("closed %v after ACQUIRE; want about 0.8*lease = %v", d, 4*lease/5)
	}
}

func TestPromotionPush(t *testing.T) {
	t.Parallel()
	const lease = 800 * time.Millisecond

	t.Run("no heartbeat in flight", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		tokens := make(chan uint64, 1)
		release := make(chan struct{})
		done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, token uint64) error {
			tokens <- token
			<-release
			return nil
		})
		fc, _ := fake.accept()
		fc.waiting()
		fc.expect(protocol.TypeHeartbeat)
		fc.waiting()
		fc.acquired(42) // right after a reply: nothing in flight
		if got := <-tokens; got != 42 {
			t.Errorf("fn got token %d, want 42", got)
		}
		fc.expect(protocol.TypeHeartbeat) // heartbeats go on, now as owner
		fc.acquired(42)
		fc.expect(protocol.TypeHeartbeat)
		close(release)
		if err := result(t, done); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("heartbeat in flight", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		tokens := make(chan uint64, 1)
		release := make(chan struct{})
		done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, token uint64) error {
			tokens <- token
			<-release
			return ctx.Err()
		})
		fc, _ := fake.accept()
		fc.waiting()
		fc.expect(protocol.TypeHeartbeat)
		fc.acquired(42) // the push, while the heartbeat awaits its reply
		if got := <-tokens; got != 42 {
			t.Errorf("fn got token %d, want 42", got)
		}
		fc.acquired(42) // the reply to the heartbeat
		fc.expect(protocol.TypeHeartbeat)
		fc.acquired(42)
		close(release)
		if err := result(t, done); err != nil {
			t.Fatal(err)
		}
	})

	// The push must not move the anchor: if the heartbeat in flight is
	// never answered, the client gives up at the ACQUIRE's anchor, not
	// the heartbeat's.
	t.Run("anchor stays", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		done := goDo(t.Context(), c, "job", lease, func(ctx context.Context, token uint64) error {
			<-ctx.Done()
			return nil
		})
		fc, acq := fake.accept()
		fc.waiting()
		fc.expect(protocol.TypeHeartbeat)
		fc.acquired(42)
		err := result(t, done)
		eof := fc.waitEOF()
		if !errors.Is(err, ErrHeartbeatTimeout) {
			t.Fatalf("Do: %v, want ErrHeartbeatTimeout", err)
		}
		// The anchor is the ACQUIRE (about 0): give-up at 640ms. Had the
		// push been taken as the reply, it would be about 200+640ms.
		if d := eof.Sub(acq.at); d < 4*lease/5-30*time.Millisecond || d > 4*lease/5+150*time.Millisecond {
			t.Errorf("gave up %v after ACQUIRE; want about %v", d, 4*lease/5)
		}
	})
}

func TestProtocolViolations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply []byte
	}{
		{"WAITING after ACQUIRED", protocol.AppendWaiting(nil)},
		{"ACQUIRED with another token", protocol.AppendAcquired(nil, 8)},
		{"unknown frame type", []byte{0x7e}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			c := fake.client()
			var cause error
			done := goDo(t.Context(), c, "job", time.Second, func(ctx context.Context, _ uint64) error {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return nil
			})
			fc, _ := fake.accept()
			fc.acquired(7)
			fc.expect(protocol.TypeHeartbeat)
			fc.send(tc.reply)
			err := result(t, done)
			fc.waitEOF()
			if !errors.Is(err, ErrProtocolViolation) || !errors.Is(cause, ErrProtocolViolation) {
				t.Fatalf("Do: %v, fn's cause %v; want ErrProtocolViolation", err, cause)
			}
		})
	}
}

// Every code, known or not, is classified by its range.
func TestServerErrorCodes(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	c := fake.client()
	codes := append([]protocol.Code{0x00, 0x03, 0x0f, 0x19, 0x80, 0xff}, protocol.Codes...)
	for _, code := range codes {
		done := goDo(t.Context(), c, "job", time.Second, func(context.Context, uint64) error {
			t.Errorf("code %v: fn ran", code)
			return nil
		})
		fc, _ := fake.accept()
		fc.send(protocol.AppendError(nil, code, "why"))
		err := result(t, done)
		fc.waitEOF()
		var se *ServerError
		if !errors.As(err, &se) || se.Code != code || se.Reason != "why" {
			t.Errorf("code %v: Do returned %v, want *ServerError with that code", code, err)
			continue
		}
		if se.Temporary() != (code < 0x10) || Temporary(err) != (code < 0x10) {
			t.Errorf("code %v: Temporary() = %v, Temporary(err) = %v", code, se.Temporary(), Temporary(err))
		}
		if sentinel := code.Err(); sentinel != nil {
			if !errors.Is(err, sentinel) {
				t.Errorf("code %v: errors.Is(err, %v) is false", code, sentinel)
			}
		} else if _, ok := protocol.CodeOf(err); ok {
			t.Errorf("code %v: unknown code unwraps to a sentinel", code)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("0x%02x", uint8(code))) {
			t.Errorf("code %v: message %q does not name the code", code, err)
		}
	}
}

// An ERROR frame, or EOF, while fn runs cancels fn and is joined to its
// result.
func TestLossWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(*fakeConn)
		want error
	}{
		{"ERROR 0x02", func(fc *fakeConn) { fc.fail(protocol.CodeClosedByAdmin) }, protocol.ErrClosedByAdmin},
		{"EOF", func(fc *fakeConn) { fc.c.Close() }, ErrConnectionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			c := fake.client()
			fnErr := errors.New("fn's own error")
			var cause error
			started := make(chan struct{})
			done := goDo(t.Context(), c, "job", time.Second, func(ctx context.Context, _ uint64) error {
				close(started)
				<-ctx.Done()
				cause = context.Cause(ctx)
				return fnErr
			})
			fc, _ := fake.accept()
			fc.acquired(7)
			<-started
			tc.end(fc)
			err := result(t, done)
			if !errors.Is(err, tc.want) || !errors.Is(err, fnErr) || !errors.Is(cause, tc.want) {
				t.Fatalf("Do: %v, fn's cause %v; want both %v and fn's error", err, cause, tc.want)
			}
		})
	}
	// fn returning nil does not hide the loss.
	t.Run("fn returns nil", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		started := make(chan struct{})
		done := goDo(t.Context(), c, "job", time.Second, func(ctx context.Context, _ uint64) error {
			close(started)
			<-ctx.Done()
			return nil
		})
		fc, _ := fake.accept()
		fc.acquired(7)
		<-started
		fc.fail(protocol.CodeShuttingDown)
		if err := result(t, done); !errors.Is(err, protocol.ErrShuttingDown) {
			t.Fatalf("Do: %v, want ErrShuttingDown", err)
		}
	})
}

func TestValidationBeforeDial(t *testing.T) {
	t.Parallel()
	d := &countingDialer{}
	c := New(Config{Address: "127.0.0.1:1", Dialer: d})
	fn := func(context.Context, uint64) error { t.Error("fn ran"); return nil }
	for _, tc := range []struct {
		name  string
		lease time.Duration
		want  error
	}{
		{"", time.Second, protocol.ErrEmptyName},
		{strings.Repeat("x", 256), time.Second, protocol.ErrNameTooLong},
		{"\xff", time.Second, protocol.ErrInvalidName},
		{"job", 0, protocol.ErrInvalidLease},
		{"job", 999 * time.Microsecond, protocol.ErrInvalidLease},
		{"job", -time.Second, protocol.ErrInvalidLease},
		{"job", 50 * 24 * time.Hour, protocol.ErrInvalidLease},
	} {
		// A call that validation lets through dials a closed port, and
		// DoRetry retries that until its context ends: bound it, so that
		// the test fails with the call's result instead of hanging.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		if err := c.Do(ctx, tc.name, tc.lease, fn); err != tc.want {
			t.Errorf("Do(%.20q, %v) = %v, want %v", tc.name, tc.lease, err, tc.want)
		}
		if err := c.DoRetry(ctx, tc.name, tc.lease, fn); err != tc.want {
			t.Errorf("DoRetry(%.20q, %v) = %v, want %v", tc.name, tc.lease, err, tc.want)
		}
		if l, err := c.Acquire(ctx, tc.name, tc.lease); err != tc.want {
			if l != nil {
				l.Release(context.Background())
			}
			t.Errorf("Acquire(%.20q, %v) = %v, want %v", tc.name, tc.lease, err, tc.want)
		}
		cancel()
	}
	if n := d.count(); n != 0 {
		t.Errorf("dialed %d times; validation must come first", n)
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	c := fake.client()
	ctx, cancel := context.WithCancel(t.Context())
	done := goDo(ctx, c, "job", 400*time.Millisecond, func(context.Context, uint64) error {
		t.Error("fn ran")
		return nil
	})
	fc, _ := fake.accept()
	fc.waiting()
	fc.expect(protocol.TypeHeartbeat) // the WAITING has been processed
	start := time.Now()
	cancel()
	err := result(t, done)
	took := time.Since(start)
	fc.waitEOF()
	if err != context.Canceled {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	if took > 200*time.Millisecond {
		t.Errorf("Do returned %v after cancel; want at once", took)
	}
}

// Cancelling Do's ctx while fn runs only asks fn to stop: heartbeats go on
// until fn returns, and its result is not joined with anything.
func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	c := fake.client()
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	stopping := make(chan struct{})
	finish := make(chan struct{})
	done := goDo(ctx, c, "job", 200*time.Millisecond, func(ctx context.Context, _ uint64) error {
		close(started)
		<-ctx.Done()
		close(stopping)
		<-finish // a slow, graceful stop
		return ctx.Err()
	})
	fc, _ := fake.accept()
	fc.acquired(3)
	r := fc.respond(0, always(protocol.AppendAcquired(nil, 3)))
	<-started
	cancel()
	<-stopping
	// The lease is 200ms: these heartbeats keep the claim past several
	// leases while fn finishes.
	for range 6 {
		r.beat()
	}
	if fc.closed() {
		t.Fatal("connection closed while fn was still running")
	}
	close(finish)
	err := result(t, done)
	fc.waitEOF()
	r.halt()
	if err != context.Canceled {
		t.Fatalf("Do: %v, want exactly fn's context.Canceled", err)
	}
}

func TestPanicReleases(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	c := fake.client()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		c.Do(t.Context(), "job", time.Second, func(context.Context, uint64) error { panic("boom") })
	}()
	fc, _ := fake.accept()
	fc.acquired(1)
	fc.waitEOF()
	if v := <-done; v != "boom" {
		t.Fatalf("recovered %v, want the panic re-raised", v)
	}
}

type countingDialer struct {
	mu    sync.Mutex
	n     int
	fails int // the first fails dials fail
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.n++
	fail := d.n <= d.fails
	d.mu.Unlock()
	if fail {
		return nil, errors.New("scripted dial failure")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *countingDialer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// closeWatcher is a Dialer whose connections record, when closed, whether
// the context that check returns was already done at that moment.
type closeWatcher struct {
	check  func() context.Context
	closed chan bool // ctx done at the close; one value per connection
}

func (w *closeWatcher) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, w: w}, nil
}

type watchedConn struct {
	net.Conn
	w    *closeWatcher
	once sync.Once
}

func (c *watchedConn) Close() error {
	c.once.Do(func() {
		ctx := c.w.check()
		c.w.closed <- ctx != nil && ctx.Err() != nil
	})
	return c.Conn.Close()
}

// Whatever ends the claim, fn's context is cancelled before the connection
// is closed: the close lets the server promote the next waiter.
func TestCancelBeforeClose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(*fakeConn)
		want error
	}{
		{"heartbeat timeout", func(fc *fakeConn) { t.Cleanup(fc.respond(0, func(int) []byte { return nil }).halt) }, ErrHeartbeatTimeout},
		{"protocol violation", func(fc *fakeConn) { fc.waiting() }, ErrProtocolViolation},
		{"ERROR 0x02", func(fc *fakeConn) { fc.fail(protocol.CodeClosedByAdmin) }, protocol.ErrClosedByAdmin},
		{"EOF", func(fc *fakeConn) { fc.c.Close() }, ErrConnectionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			var mu sync.Mutex
			var fnCtx context.Context
			w := &closeWatcher{closed: make(chan bool, 1), check: func() context.Context {
				mu.Lock()
				defer mu.Unlock()
				return fnCtx
			}}
			c := New(Config{Address: fake.addr(), Dialer: w, MinHeartbeatInterval: 10 * time.Millisecond})
			started := make(chan struct{})
			done := goDo(t.Context(), c, "job", 500*time.Millisecond, func(ctx context.Context, _ uint64) error {
				mu.Lock()
				fnCtx = ctx
				mu.Unlock()
				close(started)
				<-ctx.Done()
				return nil
			})
			fc, _ := fake.accept()
			fc.acquired(5)
			<-started
			tc.end(fc)
			if err := result(t, done); !errors.Is(err, tc.want) {
				t.Fatalf("Do: %v, want %v", err, tc.want)
			}
			if cancelled := <-w.closed; !cancelled {
				t.Error("the connection was closed before fn's context was cancelled")
			}
		})
	}
}

// A claim lost between the grant and the start of fn: fn must not start,
// or must see its context done at once. The fake sends ACQUIRED and ERROR
// 0x02 in one write, so the loss usually lands while Do is between the
// grant and fn; Do must check for it, since the cancel it arms for fn
// would come too late to fire.
func TestLossBeforeFnStarts(t *testing.T) {
	t.Parallel()
	const tries = 200
	const limit = time.Second // fn's wait for its context to be done
	fake := newFake(t)
	c := fake.client()
	frames := protocol.AppendError(protocol.AppendAcquired(nil, 1), protocol.CodeClosedByAdmin, "scripted")
	deadline := time.Now().Add(30 * time.Second)
	ran := 0
	for i := range tries {
		if time.Now().After(deadline) {
			t.Logf("stopped after %d tries: time is up", i)
			break
		}
		var live bool // fn's context was still live after limit
		done := goDo(t.Context(), c, "job", time.Second, func(ctx context.Context, _ uint64) error {
			ran++
			select {
			case <-ctx.Done():
			case <-time.After(limit):
				live = true
			}
			return nil
		})
		fc, _ := fake.accept()
		fc.send(frames)
		err := result(t, done)
		if live {
			t.Fatalf("try %d: fn ran and its context was still live %v after the claim was lost", i+1, limit)
		}
		if !errors.Is(err, protocol.ErrClosedByAdmin) {
			t.Fatalf("try %d: Do: %v, want ErrClosedByAdmin", i+1, err)
		}
		fc.waitEOF()
	}
	t.Logf("fn ran (and saw the loss) in %d of %d tries", ran, tries)
}

// TestWorkDoesNotStartAfterGiveUpIsDue: when the give-up deadline has
// passed but the reader has not noticed yet (a process frozen between the
// grant and the start of the work), fn must not start. The test holds the
// reader back by moving its read deadline, as a late wake-up would.
func TestWorkDoesNotStartAfterGiveUpIsDue(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	fake := newFake(t)
	got := make(chan *Claim, 1)
	go func() {
		l, err := fake.client().Acquire(t.Context(), "job", lease)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	fc, _ := fake.accept()
	fc.acquired(42)
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(context.Background())
	time.Sleep(20 * time.Millisecond) // the reader is back in its read
	l.lock.conn.SetReadDeadline(time.Now().Add(time.Hour))
	time.Sleep(time.Until(l.CloseBy().Add(-lease / 10))) // past anchor + 0.8·lease
	ran, err := l.lock.run(t.Context(), func(context.Context, uint64) error { return nil })
	if ran || !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("fn ran: %v, err %v; want not run and ErrHeartbeatTimeout", ran, err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("lock not lost")
	}
}

// writeFailDialer's connections fail every write with err; reads wait on
// a pipe that nothing answers.
type writeFailDialer struct{ err error }

type writeFailConn struct {
	net.Conn
	err error
}

func (c writeFailConn) Write([]byte) (int, error) { return 0, c.err }

func (d writeFailDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	client, _ := net.Pipe()
	return writeFailConn{client, d.err}, nil
}

// TestAcquireWriteFailure: a failed ACQUIRE write ends Acquire at once
// with that write's error, not 0.8 of the lease later as a heartbeat
// timeout on an ACQUIRE the server never saw.
func TestAcquireWriteFailure(t *testing.T) {
	t.Parallel()
	errWrite := errors.New("scripted write failure")
	c := New(Config{Address: "pipe", Dialer: writeFailDialer{errWrite}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(ctx, "job", 5*time.Second)
	took := time.Since(start)
	if l != nil {
		l.Release(context.Background())
	}
	if !errors.Is(err, ErrConnectionClosed) || !errors.Is(err, errWrite) {
		t.Fatalf("Acquire: %v, want ErrConnectionClosed wrapping the write error", err)
	}
	if took > time.Second {
		t.Fatalf("Acquire returned after %v, want at once", took)
	}
}
