//go:build linux

package dirlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests run real processes: the test binary itself, started with
// DIRLOCK_HELPER set, runs helperMain instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("DIRLOCK_HELPER"); mode != "" {
		os.Exit(helperMain(mode))
	}
	goleak.VerifyTestMain(m)
}

// helperMain is one helper process. Environment:
//
//	DIRLOCK_DIR        the shared directory
//	DIRLOCK_FAKE_HOST  pretend to run on this host name (the test hook)
//	DIRLOCK_MACHINE_ID_FILE, DIRLOCK_BOOT_ID_FILE
//	                   read the machine id and boot id from these files
//	                   (the seam): pretend to be another machine
//	DIRLOCK_NEWNS_MACHINE_ID, DIRLOCK_NEWNS_BOOT_ID
//	                   bind-mount these files over /etc/machine-id and the
//	                   boot id; the process runs in its own mount namespace
//	                   (startHelperNS): another machine for real
//	DIRLOCK_CRASH_AT   SIGKILL this process at that step (testHook)
//	DIRLOCK_MARKER     contend: the exclusive marker file
//	DIRLOCK_ROUNDS     contend: how many times to take the lock
//
// Modes: "hold" takes the lock, prints "HELD" and waits to be killed;
// "contend" takes and releases the lock ROUNDS times, creating the
// marker with O_EXCL while holding (exit 3 if it exists: two holders);
// "cycle" takes and releases it once; "try" calls TryLock once and
// prints "HELD" (then releases) or "BUSY OTHERHOST VERDICT".
func helperMain(mode string) int {
	dir := os.Getenv("DIRLOCK_DIR")
	for _, b := range []struct{ env, target string }{
		{"DIRLOCK_NEWNS_MACHINE_ID", "/etc/machine-id"},
		{"DIRLOCK_NEWNS_BOOT_ID", "/proc/sys/kernel/random/boot_id"},
	} {
		if src := os.Getenv(b.env); src != "" {
			if err := syscall.Mount(src, b.target, "", syscall.MS_BIND, ""); err != nil {
				fmt.Println("NOMOUNT", b.target, err)
				return 4
			}
		}
	}
	if os.Getenv("DIRLOCK_NEWNS_MACHINE_ID") != "" {
		fmt.Println("MOUNTED")
	}
	if f := os.Getenv("DIRLOCK_MACHINE_ID_FILE"); f != "" {
		machineIDPath = f
	}
	if f := os.Getenv("DIRLOCK_BOOT_ID_FILE"); f != "" {
		bootIDPath = f
	}
	if h := os.Getenv("DIRLOCK_FAKE_HOST"); h != "" {
		identityOverride = func(o Owner) Owner { o.Hostname = h; return o }
	}
	if at := os.Getenv("DIRLOCK_CRASH_AT"); at != "" {
		testHook = func(point string) {
			if point == at {
				fmt.Println("CRASH", point)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := New(dir)
	m.MinBackoff, m.MaxBackoff = time.Millisecond, 20*time.Millisecond
	switch mode {
	case "hold":
		if err := m.Lock(ctx); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("HELD")
		select {}
	case "cycle":
		if err := m.Lock(ctx); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("HELD")
		if err := m.Unlock(); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("RELEASED")
		return 0
	case "try":
		err := m.TryLock()
		if err == nil {
			fmt.Println("HELD")
			if err := m.Unlock(); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			return 0
		}
		var he *HeldError
		if !errors.As(err, &he) {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("BUSY", errors.Is(err, ErrOtherHost), he.Verdict)
		return 0
	case "contend":
		marker := os.Getenv("DIRLOCK_MARKER")
		rounds, _ := strconv.Atoi(os.Getenv("DIRLOCK_ROUNDS"))
		for range rounds {
			if err := m.Lock(ctx); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				fmt.Println("TWO HOLDERS:", err)
				return 3
			}
			fmt.Fprintln(f, os.Getpid())
			f.Close()
			time.Sleep(time.Millisecond)
			if err := os.Remove(marker); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			if err := m.Unlock(); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
		}
		return 0
	}
	fmt.Println("ERROR unknown mode", mode)
	return 2
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func startHelper(t *testing.T, mode, dir string, env ...string) *helper {
	t.Helper()
	return startHelperCmd(t, nil, mode, dir, env...)
}

// startHelperNS starts a helper in its own mount namespace, where it
// bind-mounts machineID and bootID over this machine's: another machine
// with this one's host name, as a cloned VM or a container with a fixed
// host name is.
func startHelperNS(t *testing.T, mode, dir, machineID, bootID string, env ...string) *helper {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace with another machine id needs root")
	}
	h := startHelperCmd(t, func(c *exec.Cmd) {
		c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}, mode, dir, append(env, "DIRLOCK_NEWNS_MACHINE_ID="+machineID, "DIRLOCK_NEWNS_BOOT_ID="+bootID)...)
	select {
	case line := <-h.lines:
		if strings.HasPrefix(line, "NOMOUNT") {
			t.Skipf("cannot play another machine in a mount namespace: %s", line)
		}
		if line != "MOUNTED" {
			t.Fatalf("helper printed %q, want MOUNTED", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("helper did not start within 60s")
	}
	return h
}

func startHelperCmd(t *testing.T, prep func(*exec.Cmd), mode, dir string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if prep != nil {
		prep(cmd)
	}
	cmd.Env = append(os.Environ(), "DIRLOCK_HELPER="+mode, "DIRLOCK_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-h.done
	})
	return h
}

// expect waits for the helper's next line and checks it.
func (h *helper) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper exited before printing %q", want)
		}
		if line != want {
			t.Fatalf("helper printed %q, want %q", line, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("helper did not print %q within 60s", want)
	}
}

// kill9 kills the helper with SIGKILL and waits until it is reaped (a
// zombie counts as dead too, but reaping makes the test independent of
// that).
func (h *helper) kill9(t *testing.T) {
	t.Helper()
	h.cmd.Process.Kill()
	h.wait(t)
}

// wait waits for the helper to exit and returns its exit error.
func (h *helper) wait(t *testing.T) error {
	t.Helper()
	for range h.lines {
	}
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("helper did not exit within 60s")
	}
	return nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
