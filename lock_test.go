package baton

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// heldFromFake acquires "job" (lease 1s) from a fake server that grants
// it with token 11, and returns the fake's side and the held Claim.
func heldFromFake(t *testing.T) (*fakeConn, *Claim) {
	t.Helper()
	fc, l, _ := heldFromFakeLease(t, time.Second)
	return fc, l
}

// heldFromFakeLease is heldFromFake with the given lease; it also returns
// the ACQUIRE as the fake read it.
func heldFromFakeLease(t *testing.T, lease time.Duration) (*fakeConn, *Claim, clientFrame) {
	t.Helper()
	fake := newFake(t)
	c := fake.client()
	got := make(chan *Claim, 1)
	go func() {
		l, err := c.Acquire(t.Context(), "job", lease)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	fc, acq := fake.accept()
	fc.acquired(11)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	return fc, l, acq
}

func TestAcquireAndRelease(t *testing.T) {
	t.Parallel()
	fc, l := heldFromFake(t)
	if l.Name() != "job" || l.Token() != 11 || l.Err() != nil {
		t.Errorf("Name %q Token %d Err %v", l.Name(), l.Token(), l.Err())
	}
	// A claim with a connection of its own is exclusive, has no claim id
	// and carries no value: SetValue says so without a frame (the fake
	// would fail on an unexpected one).
	if l.Mode() != Exclusive || l.ID() != 0 {
		t.Errorf("Mode %v ID %d, want exclusive and 0", l.Mode(), l.ID())
	}
	if err := l.SetValue(t.Context(), "v"); !errors.Is(err, ErrValuesNotSupported) {
		t.Errorf("SetValue: %v, want ErrValuesNotSupported", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost closed while held")
	case <-l.Released():
		t.Fatal("Released closed while held")
	default:
	}
	// Release is idempotent and safe concurrently.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
	wg.Wait()
	fc.waitEOF()
	<-l.Lost()
	<-l.Released() // a close, not acknowledged: it is Lost
	if l.Err() != nil || l.Release(context.Background()) != nil {
		t.Errorf("after Release: Err %v", l.Err())
	}
}

func TestLockLost(t *testing.T) {
	t.Parallel()
	fc, l := heldFromFake(t)
	fc.fail(protocol.CodeClosedByAdmin)
	select {
	case <-l.Lost():
	case <-time.After(fakeTimeout):
		t.Fatal("Lost not closed after ERROR")
	}
	if !errors.Is(l.Err(), protocol.ErrClosedByAdmin) {
		t.Errorf("Err: %v", l.Err())
	}
	if err := l.Release(context.Background()); !errors.Is(err, protocol.ErrClosedByAdmin) {
		t.Errorf("Release after loss: %v, want the cause", err)
	}
}

func TestTryAcquire(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	c := fake.client()
	errc := make(chan error, 1)
	go func() {
		l, err := c.TryAcquire(t.Context(), "job", time.Second)
		if l != nil {
			l.Release(context.Background())
		}
		errc <- err
	}()
	fc, _ := fake.accept()
	fc.waiting()
	if err := result(t, errc); err != ErrBusy {
		t.Fatalf("TryAcquire: %v, want ErrBusy", err)
	}
	fc.waitEOF()
	if Temporary(ErrBusy) {
		t.Error("ErrBusy is Temporary")
	}
}

// A claim of Client.Acquire that gives up keeps its connection open until anchor +
// lease, so that its holder can stop its work before the server hands the
// lock on; a Release before that closes it at once.
func TestLockGiveUpKeepsConnectionUntilCloseBy(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprintf("release %v", release), func(t *testing.T) {
			t.Parallel()
			fc, l, acq := heldFromFakeLease(t, lease)
			r := fc.respond(0, func(int) []byte { return nil })
			defer r.halt()
			select {
			case <-l.Lost():
			case <-time.After(fakeTimeout):
				t.Fatal("Lost not closed after the heartbeats went unanswered")
			}
			lostAt := time.Now()
			if !errors.Is(l.Err(), ErrHeartbeatTimeout) {
				t.Fatalf("Err: %v, want ErrHeartbeatTimeout", l.Err())
			}
			if d := l.CloseBy().Sub(acq.at); d < lease-100*time.Millisecond || d > lease {
				t.Errorf("CloseBy is %v after ACQUIRE arrived, want anchor + lease, about %v", d, lease)
			}
			if fc.closed() {
				t.Fatalf("connection closed at the give-up, %v after ACQUIRE; want it open until anchor + lease", lostAt.Sub(acq.at))
			}
			if release {
				releasedAt := time.Now()
				if err := l.Release(context.Background()); !errors.Is(err, ErrHeartbeatTimeout) {
					t.Errorf("Release: %v, want the cause", err)
				}
				eof := fc.waitEOF()
				if eof.After(l.CloseBy()) {
					t.Errorf("Release at %v after ACQUIRE closed only at %v", releasedAt.Sub(acq.at), eof.Sub(acq.at))
				}
				t.Logf("gave up %v after ACQUIRE, released and closed %v after it", lostAt.Sub(acq.at), eof.Sub(acq.at))
				return
			}
			eof := fc.waitEOF()
			if d := eof.Sub(acq.at); d < lease-100*time.Millisecond || d > lease+300*time.Millisecond {
				t.Errorf("connection closed %v after ACQUIRE; want at anchor + lease, about %v", d, lease)
			}
			if err := l.Release(context.Background()); !errors.Is(err, ErrHeartbeatTimeout) {
				t.Errorf("Release after the close: %v, want the cause", err)
			}
			t.Logf("gave up %v after ACQUIRE, closed %v after it", lostAt.Sub(acq.at), eof.Sub(acq.at))
		})
	}
}

// A held lock told ERROR 0x01 (shutting down, or its name moving to
// another cluster node) stops believing at once but hangs up only once
// Do's function has returned: a moving name is handed on when its holder
// hangs up, so an operation the work had in flight ends before anyone
// else may start one. Another ERROR closes at once, and so does 0x01 to
// a claim still waiting.
func TestLockShuttingDownHangsUpAfterTheWork(t *testing.T) {
	t.Parallel()
	const inFlight = 300 * time.Millisecond
	for _, code := range []protocol.Code{protocol.CodeShuttingDown, protocol.CodeClosedByAdmin} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			c := fake.client()
			running := make(chan struct{})
			var returned time.Time
			done := make(chan error, 1)
			go func() {
				done <- c.Do(t.Context(), "job", 5*time.Second, func(ctx context.Context, _ uint64) error {
					close(running)
					<-ctx.Done()
					time.Sleep(inFlight) // the operation sent before the loss
					returned = time.Now()
					return nil
				})
			}()
			fc, _ := fake.accept()
			fc.acquired(11)
			<-running
			told := time.Now()
			fc.fail(code)
			eof := fc.waitEOF()
			err := <-done
			if !errors.Is(err, code.Err()) {
				t.Errorf("Do: %v, want %v", err, code.Err())
			}
			if code == protocol.CodeShuttingDown {
				if eof.Before(returned) {
					t.Errorf("hung up %v after the ERROR, before fn returned (%v after it)", eof.Sub(told), returned.Sub(told))
				}
			} else if d := eof.Sub(told); d >= inFlight {
				t.Errorf("hung up %v after ERROR %v, want at once", d, code)
			}
		})
	}
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t)
		c := fake.client()
		errc := make(chan error, 1)
		go func() {
			_, err := c.Acquire(t.Context(), "job", 5*time.Second)
			errc <- err
		}()
		fc, _ := fake.accept()
		fc.waiting()
		fc.fail(protocol.CodeShuttingDown)
		fc.waitEOF()
		if err := result(t, errc); !errors.Is(err, protocol.ErrShuttingDown) {
			t.Errorf("Acquire: %v, want ErrShuttingDown", err)
		}
	})
}
