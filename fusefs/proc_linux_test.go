package fusefs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestDescendsFrom: a process descends from itself, its parent and a
// thread of either, and not from its own child.
func TestDescendsFrom(t *testing.T) {
	self, parent := uint32(os.Getpid()), uint32(os.Getppid())
	tid := uint32(syscall.Gettid())
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	kid := uint32(child.Process.Pid)
	for _, c := range []struct {
		pid       uint32
		ancestors []uint32
		want      bool
	}{
		{self, []uint32{self}, true},
		{tid, []uint32{self}, true},
		{self, []uint32{tid}, true},
		{self, []uint32{parent}, true},
		{kid, []uint32{tid}, true},
		{kid, []uint32{99999999, self}, true},
		{self, []uint32{kid}, false},
		{parent, []uint32{self}, false},
		{self, nil, false},
		{99999999, []uint32{self}, false},
	} {
		if got := descendsFrom(c.pid, c.ancestors); got != c.want {
			t.Errorf("descendsFrom(%d, %v) = %v, want %v (self %d, parent %d, child %d)", c.pid, c.ancestors, got, c.want, self, parent, kid)
		}
	}
}
