//go:build unix

// Package cronsingleton_test runs the cron-singleton example's scripts
// against a real server and the real baton binary.
package cronsingleton_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/batonlock/baton/examples/internal/exampletest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	exampletest.Cleanup()
	os.Exit(code)
}

var (
	started = regexp.MustCompile(`^import: started with token (\d+), reading`)
	done    = regexp.MustCompile(`^import: done, *(\d+) rows imported$`)
)

// env is the environment of the scripts: baton on PATH, the server, and
// the source the import reads.
func env(t *testing.T, addr, source string) []string {
	return exampletest.Env(
		"PATH="+filepath.Dir(exampletest.Baton(t))+string(os.PathListSeparator)+os.Getenv("PATH"),
		"BATON_SERVER="+addr,
		"IMPORT_SOURCE="+source)
}

// fifo makes a named pipe: an import that reads it blocks until the test
// writes to it, so the test decides when the import ends.
func fifo(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "export.csv")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func feed(t *testing.T, fifo string, rows int) {
	t.Helper()
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // the import has it open: no blocking
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Repeat("row\n", rows)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func token(t *testing.T, m []string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOneRuns runs two copies of nightly-import.sh at once: one imports,
// the other exits 75 at once without importing.
func TestOneRuns(t *testing.T) {
	_, addr := exampletest.StartServer(t)
	src := fifo(t)
	first := exec.Command("./nightly-import.sh")
	first.Env = env(t, addr, src)
	a := exampletest.Start(t, "first nightly-import.sh", first)
	a.Line(t, started)

	second := exec.Command("./nightly-import.sh")
	second.Env = env(t, addr, src)
	b := exampletest.Start(t, "second nightly-import.sh", second)
	if code := b.Wait(t); code != 75 {
		t.Errorf("second copy exited %d, want 75 (busy); its output:\n%s", code, b.Output())
	}
	if out := b.Output(); strings.Contains(out, "import:") || !strings.Contains(out, "busy") {
		t.Errorf("second copy should say the lock is busy and not import; its output:\n%s", out)
	}

	feed(t, src, 3)
	if rows := a.Line(t, done)[1]; rows != "3" {
		t.Errorf("first copy imported %s rows, want 3", rows)
	}
	if code := a.Wait(t); code != 0 {
		t.Errorf("first copy exited %d, want 0; its output:\n%s", code, a.Output())
	}
}

// TestOneAfterTheOther runs the variant with --wait instead of --no-wait:
// the second run waits in the queue and imports after the first, with a
// larger token.
func TestOneAfterTheOther(t *testing.T) {
	srv, addr := exampletest.StartServer(t)
	run := func(name, src string) *exampletest.Proc {
		cmd := exec.Command(exampletest.Baton(t), "run", "--wait", "1m", "--lease", "30s", "nightly-import", "--", "./import.sh")
		cmd.Env = env(t, addr, src)
		return exampletest.Start(t, name, cmd)
	}
	srcA, srcB := fifo(t), fifo(t)
	a := run("first run", srcA)
	t1 := token(t, a.Line(t, started))
	b := run("second run", srcB)
	exampletest.WaitFor(t, "the second run to queue", func() bool { return srv.Counts().Waiters == 1 })
	if strings.Contains(b.Output(), "import:") {
		t.Fatalf("second run imports while the first does:\n%s", b.Output())
	}

	feed(t, srcA, 2)
	a.Line(t, done)
	if code := a.Wait(t); code != 0 {
		t.Errorf("first run exited %d, want 0; its output:\n%s", code, a.Output())
	}
	if t2 := token(t, b.Line(t, started)); t2 <= t1 {
		t.Errorf("second run's token %d is not larger than the first's %d", t2, t1)
	}
	feed(t, srcB, 5)
	if rows := b.Line(t, done)[1]; rows != "5" {
		t.Errorf("second run imported %s rows, want 5", rows)
	}
	if code := b.Wait(t); code != 0 {
		t.Errorf("second run exited %d, want 0; its output:\n%s", code, b.Output())
	}
}
