//go:build linux

package dirlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// A live process whose /proc entry this process cannot read (a hidepid
// mount: ENOENT for hidepid=2, EACCES or EPERM otherwise; kill(pid, 0)
// then says EPERM or nothing) is alive: its lock is not broken. Once
// kill says ESRCH it is dead and taken back.
func TestUnreadableProcCountsAlive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		read, sig error
	}{
		{"hidepid=2 (invisible, another user)", syscall.ENOENT, syscall.EPERM},
		{"EACCES, another user", syscall.EACCES, syscall.EPERM},
		{"EPERM, same user", syscall.EPERM, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := startHelper(t, "hold", dir)
			h.expect(t, "HELD")
			pid := h.cmd.Process.Pid
			hidden := func(p int) bool { return p == pid }
			readProcStat = func(p int) ([]byte, error) {
				if hidden(p) {
					return nil, &os.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", p), Err: tc.read}
				}
				return os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			}
			dead := false
			signalZero = func(p int) error {
				if hidden(p) {
					if dead {
						return syscall.ESRCH
					}
					return tc.sig
				}
				return syscall.Kill(p, 0)
			}
			t.Cleanup(func() {
				readProcStat = func(pid int) ([]byte, error) { return os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)) }
				signalZero = func(pid int) error { return syscall.Kill(pid, 0) }
			})
			before := lockEntry(t, dir)
			var he *HeldError
			if err := New(dir).TryLock(); !errors.As(err, &he) || he.Verdict != Alive || errors.Is(err, ErrOtherHost) {
				t.Fatalf("TryLock: %v, want busy with a live holder", err)
			}
			if _, err := Break(dir, false); !errors.Is(err, ErrBusy) {
				t.Fatalf("Break without force: %v, want ErrBusy", err)
			}
			if after := lockEntry(t, dir); !slices.Equal(before, after) {
				t.Fatalf("the record changed from %q to %q", before, after)
			}
			h.kill9(t)
			dead = true
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m := fastMutex(dir)
			if err := m.Lock(ctx); err != nil {
				t.Fatalf("Lock after the holder died: %v", err)
			}
			m.Unlock()
		})
	}
}
