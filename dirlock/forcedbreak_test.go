//go:build linux

package dirlock

import (
	"errors"
	"testing"
)

// An operator's forced break lands in the window of Unlock (after its
// release claim, before the lock directory goes) or of a break (after
// the claim of the dead entry), and a new holder takes the lock at once.
// The releasing or breaking process must then leave the new holder's
// lock alone: its remaining steps act only on its own claimed entry.
// (The steps model with ForcedBreak; its "move-lock" mutation, which
// renames the whole lock directory away as before, loses the new
// holder's lock.)
func TestForcedBreakInWindowSparesNewHolder(t *testing.T) {
	for _, tc := range []struct{ name, point string }{
		{"Unlock", "release-claim"},
		{"break of a dead holder", "claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.point == "claim" {
				h := startHelper(t, "hold", dir)
				h.expect(t, "HELD")
				h.kill9(t)
			}
			slow := New(dir)
			if tc.point == "release-claim" {
				if err := slow.TryLock(); err != nil {
					t.Fatal(err)
				}
			}
			var newHolder *Mutex
			var hookErr error
			fired := false
			testHook = func(point string) {
				if point != tc.point || fired {
					return
				}
				fired = true
				if _, err := Break(dir, true); err != nil {
					hookErr = err
					return
				}
				newHolder = New(dir)
				hookErr = newHolder.TryLock()
			}
			defer func() { testHook = nil }()
			var err error
			if tc.point == "release-claim" {
				err = slow.Unlock()
				if err != nil {
					t.Errorf("Unlock: %v, want nil (it had released when the operator broke its release entry)", err)
				}
			} else {
				err = slow.TryLock()
				if !errors.Is(err, ErrBusy) {
					t.Errorf("breaker's TryLock: %v, want ErrBusy (the new holder is alive)", err)
				}
			}
			testHook = nil
			if !fired || hookErr != nil {
				t.Fatalf("forced break and new holder in the window: fired %v, %v", fired, hookErr)
			}
			if !newHolder.Held() {
				st, _ := Inspect(dir)
				t.Fatalf("the new holder's lock was moved away; the lock now: %+v", st)
			}
			if err := newHolder.Unlock(); err != nil {
				t.Fatal(err)
			}
			if st, _ := Inspect(dir); st.Held || len(st.Leftovers) != 0 {
				t.Errorf("after the new holder's Unlock: %+v, want nothing left", st)
			}
		})
	}
}
