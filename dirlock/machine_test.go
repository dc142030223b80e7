//go:build linux

package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// otherMachine writes a machine id and a boot id that are not this
// machine's into files and returns their paths.
func otherMachine(t *testing.T, tag byte) (machineFile, bootFile string) {
	t.Helper()
	d := t.TempDir()
	machineFile, bootFile = filepath.Join(d, "machine-id"), filepath.Join(d, "boot_id")
	m := fmt.Sprintf("%032x", uint64(tag)<<56|0xbadc0ffee)
	b := fmt.Sprintf("%08x-0000-4000-8000-00000000beef", uint32(tag)<<24|0xc0ffee)
	if err := os.WriteFile(machineFile, []byte(m+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bootFile, []byte(b+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return machineFile, bootFile
}

// Another machine, with its own machine id and boot id (the seam), with
// this machine's host name (cloned VMs, containers with a fixed host
// name) or another one. Neither judges the other's record: a live
// holder is never broken, and a dead one is left to its own machine
// (which takes it back, also after a reboot) or to an operator. Judging
// by the host name (and then finding the boot id different), or
// checking the boot id before the machine, breaks the live lock here.
func TestOtherMachineNeverJudged(t *testing.T) {
	for _, sameName := range []bool{true, false} {
		name := "same host name"
		var fake []string
		if !sameName {
			name = "other host name"
			fake = []string{"DIRLOCK_FAKE_HOST=elsewhere"}
		}
		t.Run(name, func(t *testing.T) {
			mf, bf := otherMachine(t, 1)
			other := append([]string{"DIRLOCK_MACHINE_ID_FILE=" + mf, "DIRLOCK_BOOT_ID_FILE=" + bf}, fake...)
			dir := t.TempDir()

			// This machine holds: the other machine must not break it.
			m := New(dir)
			if err := m.TryLock(); err != nil {
				t.Fatal(err)
			}
			h := startHelper(t, "try", dir, other...)
			h.expect(t, "BUSY true cannot judge from this host")
			h.wait(t)
			if !m.Held() {
				t.Fatal("the other machine moved this machine's live lock away")
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}

			// The other machine holds and dies: this machine cannot judge it.
			h = startHelper(t, "hold", dir, other...)
			h.expect(t, "HELD")
			h.kill9(t)
			before := lockEntry(t, dir)
			var he *HeldError
			if err := New(dir).TryLock(); !errors.Is(err, ErrOtherHost) || !errors.As(err, &he) || he.Verdict != CannotJudge {
				t.Fatalf("TryLock of the other machine's record: %v, want ErrOtherHost", err)
			}
			if _, err := Break(dir, false); !errors.Is(err, ErrOtherHost) {
				t.Fatalf("Break without force: %v, want ErrOtherHost", err)
			}
			if after := lockEntry(t, dir); !slices.Equal(before, after) {
				t.Fatalf("the record changed from %q to %q", before, after)
			}

			// Its own machine after a reboot (same machine id, new boot id)
			// knows it is dead and takes it back.
			_, bf2 := otherMachine(t, 2)
			rebooted := append([]string{"DIRLOCK_MACHINE_ID_FILE=" + mf, "DIRLOCK_BOOT_ID_FILE=" + bf2}, fake...)
			h2 := startHelper(t, "cycle", dir, rebooted...)
			h2.expect(t, "HELD")
			h2.expect(t, "RELEASED")
		})
	}
}

// The same, for real: a helper in its own mount namespace with another
// /etc/machine-id and boot id bind-mounted over this machine's, and the
// same host name.
func TestTwoMachinesOneHostNameMountNamespaces(t *testing.T) {
	if _, err := os.Stat("/etc/machine-id"); err != nil {
		t.Skipf("no /etc/machine-id to bind-mount over: %v", err)
	}
	mf, bf := otherMachine(t, 3)
	dir := t.TempDir()
	m := New(dir)
	if err := m.TryLock(); err != nil {
		t.Fatal(err)
	}
	h := startHelperNS(t, "try", dir, mf, bf)
	h.expect(t, "BUSY true cannot judge from this host")
	h.wait(t)
	if !m.Held() {
		t.Fatal("the other machine moved this machine's live lock away")
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}

	h = startHelperNS(t, "hold", dir, mf, bf)
	h.expect(t, "HELD")
	h.kill9(t)
	if err := New(dir).TryLock(); !errors.Is(err, ErrOtherHost) {
		t.Fatalf("TryLock of the other machine's dead holder: %v, want ErrOtherHost", err)
	}
	// The other machine itself takes its dead holder's lock back.
	h = startHelperNS(t, "cycle", dir, mf, bf)
	h.expect(t, "HELD")
	h.expect(t, "RELEASED")
}

// A record written by an older version has no machine id: only a record
// of this very boot (and host name and pid namespace) is judged; one of
// another boot may be another machine with this host name, and is left
// to an operator.
func TestLegacyRecordWithoutMachineID(t *testing.T) {
	self, err := selfIdentity()
	if err != nil {
		t.Skip(err)
	}
	legacy := func(o Owner) string {
		return kindOwner + "." + escapeHost(o.Hostname) + "." + o.BootID + "." + o.PIDNS + "." +
			fmt.Sprint(o.PID) + "." + fmt.Sprint(o.Start) + ".0123abcd"
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadHere := self
	deadHere.PID = cmd.ProcessState.Pid()
	deadHere.Start = 1
	otherBoot := deadHere
	otherBoot.BootID = "00000000-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		name string
		o    Owner
		want error // nil: taken
	}{
		{"this process", self, ErrBusy},
		{"a dead process of this boot", deadHere, nil},
		{"another boot, this host name", otherBoot, ErrOtherHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lock := filepath.Join(dir, LockName)
			if err := os.Mkdir(lock, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(lock, legacy(tc.o)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			m := New(dir)
			err := m.TryLock()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("TryLock: %v, want the dead legacy holder's lock taken back", err)
				}
				m.Unlock()
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("TryLock: %v, want %v", err, tc.want)
			}
		})
	}
}
