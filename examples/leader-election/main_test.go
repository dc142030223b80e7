package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/examples/internal/exampletest"
	"github.com/batonlock/baton/server"
)

// The test runs copies of this test binary as the program: with
// LEADER_ELECTION_MAIN=1 it is main (built with the race detector, too).
func TestMain(m *testing.M) {
	if os.Getenv("LEADER_ELECTION_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const lease = 10 * time.Second

var leaderLine = regexp.MustCompile(`^leader token=(\d+)$`)

func startCopy(t *testing.T, name, addr string) *exampletest.Proc {
	cmd := exec.Command(os.Args[0], "-server", addr, "-lock", "leader", "-lease", lease.String())
	cmd.Env = exampletest.Env("LEADER_ELECTION_MAIN=1")
	return exampletest.Start(t, name, cmd)
}

func token(t *testing.T, m []string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFailover: the leader is killed; the copy waiting in the queue takes
// over at once (its socket closed, no lease had to pass) with a larger
// token.
func TestFailover(t *testing.T) {
	srv, addr := exampletest.StartServer(t)
	a := startCopy(t, "first copy", addr)
	t1 := token(t, a.Line(t, leaderLine))
	b := startCopy(t, "second copy", addr)
	exampletest.WaitFor(t, "the second copy to queue", func() bool { return srv.Counts().Waiters == 1 })
	if strings.Contains(b.Output(), "leader token=") {
		t.Fatalf("the second copy leads while the first does:\n%s", b.Output())
	}

	killed := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t2 := token(t, b.Line(t, leaderLine))
	took := time.Since(killed)
	if t2 <= t1 {
		t.Errorf("new leader's token %d is not larger than the dead leader's %d", t2, t1)
	}
	// A lease expiry would take at least 3/4 of the lease after the kill
	// (the last heartbeat is at most lease/4 old).
	if took > lease/2 {
		t.Errorf("the second copy led %v after the kill; want well under the lease (%v): the dead leader's socket should free the lock at once", took, lease)
	}
	a.Wait(t)
	if n := strings.Count(a.Output(), "leader token="); n != 1 {
		t.Errorf("the first copy led %d times, want 1:\n%s", n, a.Output())
	}

	// A graceful stop releases the lock and exits 0.
	if err := b.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.Wait(t); code != 0 {
		t.Errorf("second copy exited %d after SIGTERM, want 0:\n%s", code, b.Output())
	}
	exampletest.WaitFor(t, "the lock to be free", func() bool { return srv.Counts().Locks == 0 })
}

// TestCampaignAgain: a leader that loses the lock (here an administrator
// force-releases it) stops leading, the next copy leads, and the deposed
// leader campaigns again at the back of the queue.
func TestCampaignAgain(t *testing.T) {
	srv, addr := exampletest.StartServer(t)
	a := startCopy(t, "first copy", addr)
	t1 := token(t, a.Line(t, leaderLine))
	b := startCopy(t, "second copy", addr)
	exampletest.WaitFor(t, "the second copy to queue", func() bool { return srv.Counts().Waiters == 1 })

	if err := srv.ForceReleaseBy("leader", server.Peer{}); err != nil {
		t.Fatal(err)
	}
	t2 := token(t, b.Line(t, leaderLine))
	if t2 <= t1 {
		t.Errorf("new leader's token %d is not larger than the deposed leader's %d", t2, t1)
	}
	exampletest.WaitFor(t, "the deposed leader to queue again", func() bool { return srv.Counts().Waiters == 1 })
	// It logged before queueing; the log reaches the test a little later.
	exampletest.WaitFor(t, "the deposed leader to log 'no longer leader'", func() bool {
		return strings.Contains(a.Output(), "no longer leader")
	})

	// The deposed leader leads again when the second copy stops.
	b.Cmd.Process.Signal(syscall.SIGTERM)
	if code := b.Wait(t); code != 0 {
		t.Errorf("second copy exited %d after SIGTERM, want 0:\n%s", code, b.Output())
	}
	if t3 := token(t, a.Line(t, leaderLine)); t3 <= t2 {
		t.Errorf("third term's token %d is not larger than the second's %d", t3, t2)
	}
	a.Cmd.Process.Signal(syscall.SIGTERM)
	if code := a.Wait(t); code != 0 {
		t.Errorf("first copy exited %d after SIGTERM, want 0:\n%s", code, a.Output())
	}
}
