//go:build linux

package dirlock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func fastMutex(dir string) *Mutex {
	m := New(dir)
	m.MinBackoff, m.MaxBackoff = time.Millisecond, 20*time.Millisecond
	return m
}

// lockEntry returns the lock directory's entries.
func lockEntry(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, LockName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestLockUnlockTryLock(t *testing.T) {
	dir := t.TempDir()
	a, b := New(dir), New(dir)
	if err := a.TryLock(); err != nil {
		t.Fatal(err)
	}
	if es := lockEntry(t, dir); len(es) != 1 || !strings.HasPrefix(es[0], "owner.") {
		t.Fatalf("lock directory holds %q, want one owner entry", es)
	}
	err := b.TryLock()
	var he *HeldError
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrOtherHost) || !errors.As(err, &he) || he.Owner.PID != os.Getpid() || he.Verdict != Alive {
		t.Fatalf("second TryLock: %v, want ErrBusy naming this live process", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = b.Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrBusy) {
		t.Fatalf("Lock with a deadline: %v, want DeadlineExceeded and ErrBusy", err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := b.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 0 {
		t.Errorf("after release the directory holds %v, want nothing", names)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	dir := t.TempDir()
	a, b := fastMutex(dir), fastMutex(dir)
	if err := a.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(context.Background()) }()
	select {
	case err := <-got:
		t.Fatalf("Lock returned %v while the lock is held", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.Unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return within 10s of the release")
	}
	b.Unlock()
}

func TestDo(t *testing.T) {
	dir := t.TempDir()
	ran := false
	err := Do(context.Background(), dir, func(ctx context.Context) error {
		ran = true
		if err := New(dir).TryLock(); !errors.Is(err, ErrBusy) {
			t.Errorf("TryLock inside Do: %v, want ErrBusy", err)
		}
		return errors.New("fn failed")
	})
	if !ran || err == nil || err.Error() != "fn failed" {
		t.Fatalf("Do = %v (ran %v), want fn's error", err, ran)
	}
	func() {
		defer func() { recover() }()
		Do(context.Background(), dir, func(context.Context) error { panic("boom") })
	}()
	if es := lockEntry(t, dir); es != nil {
		t.Fatalf("after a panic in fn the lock holds %q", es)
	}
}

// An operator's forced break cancels fn's context with ErrNotHeld, and
// Do reports that the work was not protected throughout.
func TestDoNoticesForcedBreak(t *testing.T) {
	old := checkInterval
	checkInterval = 10 * time.Millisecond
	defer func() { checkInterval = old }()
	dir := t.TempDir()
	err := Do(context.Background(), dir, func(ctx context.Context) error {
		if _, err := Break(dir, false); !errors.Is(err, ErrBusy) {
			t.Errorf("Break without force of a live holder: %v, want ErrBusy", err)
		}
		if _, err := Break(dir, true); err != nil {
			t.Errorf("Break --force: %v", err)
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), ErrNotHeld) {
				t.Errorf("fn's context cause %v, want ErrNotHeld", context.Cause(ctx))
			}
		case <-time.After(10 * time.Second):
			t.Error("fn's context not cancelled within 10s of the break")
		}
		return nil
	})
	if !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Do = %v, want ErrNotHeld", err)
	}
}

// A lock directory with no readable entry is never broken: it is
// reported, and only a forced break removes it.
func TestNoRecordIsReportedNotBroken(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, LockName, "junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := New(dir).TryLock()
	if !errors.Is(err, ErrNoRecord) || !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLock: %v, want ErrNoRecord", err)
	}
	st, err := Inspect(dir)
	if err != nil || !st.Held || !st.NoRecord {
		t.Fatalf("Inspect: %+v, %v; want held with no record", st, err)
	}
	if _, err := Break(dir, false); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("Break: %v, want ErrNoRecord", err)
	}
	if _, err := Break(dir, true); err != nil {
		t.Fatal(err)
	}
	m := New(dir)
	if err := m.TryLock(); err != nil {
		t.Fatalf("TryLock after a forced break: %v", err)
	}
	m.Unlock()
}

func TestOwnerNameRoundTrip(t *testing.T) {
	for _, h := range []string{"node1", "node1.example.com", "a_b", "x%y/z", "ünï", ""} {
		for _, m := range []string{"3d1219c7c4c5404aaa1f6d2a48adfda4", ""} {
			o := Owner{Hostname: h, MachineID: m, BootID: "0f0e-11", PIDNS: "4026531836", PID: 42, Start: 12345}.withNonce()
			kind, got, ok := parseEntry("owner." + o.id())
			if !ok || kind != kindOwner || got != o {
				t.Errorf("host %q machine %q: parse(%q) = %q %+v %v", h, m, o.id(), kind, got, ok)
			}
		}
	}
	// A name written by an older version: no machine id.
	if _, got, ok := parseEntry("owner.node1.0f0e-11.4026531836.42.12345.ab"); !ok ||
		got != (Owner{Hostname: "node1", BootID: "0f0e-11", PIDNS: "4026531836", PID: 42, Start: 12345, Nonce: "ab"}) {
		t.Errorf("older version's name: %+v %v", got, ok)
	}
	for _, bad := range []string{"owner", "owner.a.b", "steal.h.b.n.1.2.x", "owner.h.b.n.x.2.n", "owner.h.b.n.1.2.", "owner.h%zz.b.n.1.2.x",
		"owner.h.3D1219C7C4C5404AAA1F6D2A48ADFDA4.b.n.1.2.x", "owner.h.00000000000000000000000000000000.b.n.1.2.x", "owner.h.xyz.b.n.1.2.x",
		"owner.h.m.b.n.1.2.x.y"} {
		if _, _, ok := parseEntry(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestJudge(t *testing.T) {
	self, err := selfIdentity()
	if err != nil {
		t.Skip(err)
	}
	// A child that has exited and been reaped: its pid is free (or
	// reused by a process with another start time).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.ProcessState.Pid()
	with := func(f func(*Owner)) Owner { o := self; f(&o); return o }
	anyBoot := "00000000-0000-0000-0000-000000000000"
	otherMachine := "0123456789abcdef0123456789abcdef"
	noMachine := self
	noMachine.MachineID = ""
	for _, tc := range []struct {
		name     string
		o, judge Owner
		want     Verdict
	}{
		{"this process", self, self, Alive},
		{"this process, another start time", with(func(o *Owner) { o.Start++ }), self, Dead},
		{"a reaped child", with(func(o *Owner) { o.PID, o.Start = gone, 1 }), self, Dead},
		{"this process on another host", with(func(o *Owner) { o.Hostname += "-other" }), self, CannotJudge},
		{"this machine before a reboot", with(func(o *Owner) { o.BootID = anyBoot }), self, Dead},
		{"another pid namespace", with(func(o *Owner) { o.PIDNS = "1" }), self, CannotJudge},
		// Cloned VMs, containers with a fixed host name: the host name is
		// shared, the machine is not; nor its boot.
		{"another machine, this host name", with(func(o *Owner) { o.MachineID, o.BootID = otherMachine, anyBoot }), self, CannotJudge},
		{"another machine, this host name and boot id", with(func(o *Owner) { o.MachineID = otherMachine }), self, CannotJudge},
		{"this machine id, another host name, another boot", with(func(o *Owner) { o.Hostname += "-other"; o.BootID = anyBoot }), self, CannotJudge},
		// No machine id on one side (an older version's record, or no
		// /etc/machine-id): only this very boot is judged.
		{"older record, this boot", noMachine, self, Alive},
		{"older record, this boot, another start time", with(func(o *Owner) { o.MachineID = ""; o.Start++ }), self, Dead},
		{"older record, another boot", with(func(o *Owner) { o.MachineID, o.BootID = "", anyBoot }), self, CannotJudge},
		{"no machine id here, another boot", with(func(o *Owner) { o.BootID = anyBoot }), noMachine, CannotJudge},
		{"no machine id here, this boot", self, noMachine, Alive},
	} {
		if got := judge(tc.o, tc.judge); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Many processes contend; each creates an exclusive marker file while it
// holds the lock: a second holder would find it there.
func TestContentionRealProcesses(t *testing.T) {
	contend(t, t.TempDir(), 6, 25)
}

func contend(t *testing.T, dir string, procs, rounds int) {
	marker := filepath.Join(dir, "marker")
	start := time.Now()
	var hs []*helper
	for range procs {
		hs = append(hs, startHelper(t, "contend", dir, "DIRLOCK_MARKER="+marker, "DIRLOCK_ROUNDS="+strconv.Itoa(rounds)))
	}
	for i, h := range hs {
		if err := h.wait(t); err != nil {
			t.Errorf("process %d: exit %d (3: two holders at once)", i, exitCode(err))
		}
	}
	t.Logf("%d processes × %d rounds in %v", procs, rounds, time.Since(start).Round(time.Millisecond))
	if es := lockEntry(t, dir); es != nil {
		t.Errorf("lock still held by %q", es)
	}
}

// kill -9 of the holder: a process of the same host takes the lock back.
func TestKilledHolderRecoveredOnSameHost(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "hold", dir)
	h.expect(t, "HELD")
	if err := New(dir).TryLock(); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLock while the holder lives: %v, want ErrBusy", err)
	}
	h.kill9(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	m := fastMutex(dir)
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock after the holder's kill -9: %v", err)
	}
	t.Logf("taken back %v after the kill", time.Since(start))
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A holder on another host (made so by the test hook) is never judged:
// however long it has been dead, no process here breaks its lock.
func TestOtherHostsLockNeverBroken(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "hold", dir, "DIRLOCK_FAKE_HOST=elsewhere")
	h.expect(t, "HELD")
	h.kill9(t) // dead for real; but only its host could know
	before := lockEntry(t, dir)
	var he *HeldError
	for i := range 20 {
		err := New(dir).TryLock()
		if !errors.Is(err, ErrOtherHost) || !errors.As(err, &he) || he.Owner.Hostname != "elsewhere" {
			t.Fatalf("TryLock %d: %v, want ErrOtherHost naming host elsewhere", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := fastMutex(dir).Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrOtherHost) {
		t.Fatalf("Lock: %v, want DeadlineExceeded and ErrOtherHost", err)
	}
	if _, err := Break(dir, false); !errors.Is(err, ErrOtherHost) {
		t.Fatalf("Break without force: %v, want ErrOtherHost", err)
	}
	if after := lockEntry(t, dir); !slices.Equal(before, after) {
		t.Fatalf("the record changed from %q to %q", before, after)
	}
	// Its own host (same fake name) knows it is dead and takes it back.
	h2 := startHelper(t, "cycle", dir, "DIRLOCK_FAKE_HOST=elsewhere")
	h2.expect(t, "HELD")
	h2.expect(t, "RELEASED")
}

// A stopped holder is alive: it is never broken, and when it continues
// it still holds the lock.
func TestStoppedHolderNeverBroken(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "hold", dir)
	h.expect(t, "HELD")
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	before := lockEntry(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err := fastMutex(dir).Lock(ctx)
	var he *HeldError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &he) || he.Verdict != Alive {
		t.Fatalf("Lock: %v, want DeadlineExceeded and a live holder", err)
	}
	if _, err := Break(dir, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("Break without force: %v, want ErrBusy", err)
	}
	if after := lockEntry(t, dir); !slices.Equal(before, after) {
		t.Fatalf("the record changed from %q to %q", before, after)
	}
	h.cmd.Process.Signal(syscall.SIGCONT)
}

// A crash between any two steps leaves a state that a process of the
// same host recovers from (and cleans up after), never a second holder.
func TestCrashBetweenSteps(t *testing.T) {
	for _, tc := range []struct {
		point string
		setup string // "", or "dead-holder": the crashing process breaks a dead holder's lock
		mode  string // what the crashing process does
		held  bool   // whether the crash leaves the lock directory in place
	}{
		{"mkdir-staging", "", "hold", false},
		{"create-record", "", "hold", false},
		{"write-record", "", "hold", false},
		{"rename", "", "hold", true},
		{"claim", "dead-holder", "hold", true},
		{"move-away", "dead-holder", "hold", false},
		{"release-claim", "", "cycle", true},
		{"move-away", "", "cycle", false},
	} {
		t.Run(tc.point+"/"+tc.mode+tc.setup, func(t *testing.T) {
			dir := t.TempDir()
			if tc.setup == "dead-holder" {
				h := startHelper(t, "hold", dir)
				h.expect(t, "HELD")
				h.kill9(t)
			}
			h := startHelper(t, tc.mode, dir, "DIRLOCK_CRASH_AT="+tc.point)
			if tc.mode == "cycle" {
				h.expect(t, "HELD")
			}
			h.expect(t, "CRASH "+tc.point)
			if err := h.wait(t); exitCode(err) != -1 {
				t.Fatalf("helper: %v, want killed", err)
			}
			st, err := Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.Held != tc.held {
				t.Fatalf("after the crash the lock is held: %v, want %v (%+v)", st.Held, tc.held, st)
			}
			if st.Held && (st.NoRecord || st.Verdict != Dead) {
				t.Fatalf("after the crash: %+v, want an entry naming a dead process", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m := fastMutex(dir)
			if err := m.Lock(ctx); err != nil {
				t.Fatalf("Lock after the crash: %v", err)
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			st, _ = Inspect(dir)
			if len(st.Leftovers) != 0 || st.Held {
				t.Errorf("after Lock and Unlock: %+v, want nothing left", st)
			}
		})
	}
}

// Two breakers of the same dead holder: the one that judged first but
// claims last must find its entry gone and must not move the other's
// new lock away (what the claim rename is for: the model's "no-claim"
// mutation).
func TestSlowBreakerDoesNotBreakNewLock(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "hold", dir)
	h.expect(t, "HELD")
	h.kill9(t)

	judged, resume := make(chan struct{}), make(chan struct{})
	first := true
	testHook = func(point string) {
		if point == "judged-dead" && first {
			first = false
			close(judged)
			<-resume
		}
	}
	defer func() { testHook = nil }()
	slow := New(dir)
	slowErr := make(chan error, 1)
	go func() { slowErr <- slow.TryLock() }()
	select {
	case <-judged:
	case <-time.After(10 * time.Second):
		t.Fatal("the first breaker did not judge the holder dead within 10s")
	}
	fast := New(dir)
	if err := fast.TryLock(); err != nil {
		t.Fatalf("second breaker: %v", err)
	}
	close(resume)
	err := <-slowErr
	var he *HeldError
	if !errors.As(err, &he) || he.Owner.PID != os.Getpid() || he.Verdict != Alive {
		t.Fatalf("slow breaker: %v, want ErrBusy naming the new live holder", err)
	}
	if !fast.Held() {
		t.Fatal("the new holder's lock was moved away")
	}
	if err := fast.Unlock(); err != nil {
		t.Fatal(err)
	}
}
