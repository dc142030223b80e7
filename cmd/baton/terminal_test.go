//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the master the test types into and
// reads from, and the slave that 'baton run' gets as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// In a terminal, COMMAND runs in the foreground: it can prompt and read
// the answer instead of stopping on SIGTTIN, and baton run gets the
// terminal back afterwards.
func TestRunTerminalForeground(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	master, slave := openPTY(t)
	cmd := exec.Command(batonBin, "run", "--server", ts.addr, "job", "--",
		"sh", "-c", `printf "Proceed? "; read a; echo "answer=$a"`)
	cmd.Env = cleanEnv()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own with the pty as controlling terminal, as a
	// login shell's job in the foreground.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })

	out := make(chan string, 64)
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				out <- string(buf[:n])
			}
			if err != nil {
				close(out)
				return
			}
		}
	}()
	var seen bytes.Buffer
	expect := func(want string) {
		t.Helper()
		timeout := time.After(testTimeout)
		for !strings.Contains(seen.String(), want) {
			select {
			case s, ok := <-out:
				if !ok {
					t.Fatalf("terminal closed before %q; saw %q", want, seen.String())
				}
				seen.WriteString(s)
			case <-timeout:
				t.Fatalf("no %q on the terminal (a command in the background stops on SIGTTIN); saw %q", want, seen.String())
			}
		}
	}
	expect("Proceed? ")
	master.WriteString("yes\n")
	expect("answer=yes")
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("baton run: %v; terminal: %q", waitErr, seen.String())
		}
	case <-time.After(testTimeout):
		t.Fatalf("baton run did not exit; terminal: %q", seen.String())
	}
}
