//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunDirUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--dir", dir, "true"},
		{"--dir", dir, "--"},
		{"--dir", dir, "--server", "127.0.0.1:1", "--", "true"},
		{"--dir", dir, "--lease", "1s", "--", "true"},
		{"--dir", dir, "--wait", "1s", "--no-wait", "--", "true"},
		{"--dir", dir, "--wait", "-1s", "--", "true"},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(append([]string{"run"}, args...), &stdout, &stderr); code != exitUsage {
			t.Errorf("baton run %q: exit %d, want %d; stderr:\n%s", args, code, exitUsage, &stderr)
		}
	}
}

// The command gets BATON_LOCK (the directory, absolute) and no
// BATON_TOKEN, even if one was inherited; its status passes through.
func TestRunDirEnvAndStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(batonBin, "run", "--dir", dir, "--", "sh", "-c", `echo "lock=$BATON_LOCK token=${BATON_TOKEN-unset}"; exit 7`)
	cmd.Env = append(cleanEnv(), "BATON_TOKEN=99", "BATON_LOCK=other")
	out, err := cmd.Output()
	if got := cmd.ProcessState.ExitCode(); got != 7 {
		t.Fatalf("exit %d (%v), want the command's 7", got, err)
	}
	if want := "lock=" + dir + " token=unset\n"; string(out) != want {
		t.Errorf("command printed %q, want %q", out, want)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("after the run the directory holds %v", names)
	}
}

// A held lock: --no-wait and an expired --wait exit 75; the waiter runs
// once the holder's command exits.
func TestRunDirBusyThenWaits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startRun(t, "--dir", dir, "--", "sh", "-c", "echo held; read x")
	if l := first.line(); l != "held" {
		t.Fatalf("first printed %q", l)
	}
	busy := startRun(t, "--dir", dir, "--no-wait", "--", "echo", "ran")
	if code, out := busy.wait(); code != exitTempFail || out != "" {
		t.Errorf("--no-wait: exit %d, output %q; want 75 and no run; stderr:\n%s", code, out, busy.stderr)
	}
	late := startRun(t, "--dir", dir, "--wait", "200ms", "--", "echo", "ran")
	if code, _ := late.wait(); code != exitTempFail {
		t.Errorf("--wait 200ms: exit %d, want 75; stderr:\n%s", code, late.stderr)
	}
	second := startRun(t, "--dir", dir, "--", "echo", "second")
	first.stdin.Write([]byte("\n"))
	if code, _ := first.wait(); code != 0 {
		t.Errorf("first: exit %d", code)
	}
	if l := second.line(); l != "second" {
		t.Errorf("second printed %q", l)
	}
	if code, _ := second.wait(); code != 0 {
		t.Errorf("second: exit %d; stderr:\n%s", code, second.stderr)
	}
}

// kill -9 of 'baton run --dir': the next run on this host takes the lock
// back, and the killed run's command died with it.
func TestRunDirHolderKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startRun(t, "--dir", dir, "--", "sh", "-c", "echo held; read x")
	first.line()
	second := startRun(t, "--dir", dir, "--", "echo", "second")
	killed := time.Now()
	first.cmd.Process.Signal(syscall.SIGKILL)
	if l := second.line(); l != "second" {
		t.Fatalf("second printed %q", l)
	}
	t.Logf("second ran %v after SIGKILL of the first", time.Since(killed))
	if code, _ := second.wait(); code != 0 {
		t.Errorf("second: exit %d; stderr:\n%s", code, second.stderr)
	}
}

func dirlockCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := dispatch(append([]string{"dirlock"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// status and break on a free lock, a live holder (refused; --force
// breaks it and the holder's run exits 76), and another host's record.
func TestDirlockStatusAndBreak(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, out, _ := dirlockCLI("status", dir); code != exitAdminNotFound || !strings.Contains(out, "not held") {
		t.Errorf("status of a free lock: exit %d\n%s", code, out)
	}
	if code, _, _ := dirlockCLI("break", dir); code != exitAdminNotFound {
		t.Errorf("break of a free lock: exit %d, want 3", code)
	}
	holder := startRun(t, "--dir", dir, "--grace", "100ms", "--", "sh", "-c", "echo held; read x")
	holder.line()
	code, out, _ := dirlockCLI("status", dir)
	if code != exitOK || !strings.Contains(out, "alive on this host") || !strings.Contains(out, "lock:      held") {
		t.Errorf("status of a live holder: exit %d\n%s", code, out)
	}
	if code, _, errOut := dirlockCLI("break", dir); code != exitDirlockRefused || !strings.Contains(errOut, "refusing") {
		t.Errorf("break of a live holder: exit %d, want 75\n%s", code, errOut)
	}
	if code, out, errOut := dirlockCLI("break", "--force", dir); code != exitOK || !strings.Contains(out, "broken") {
		t.Errorf("break --force: exit %d\n%s%s", code, out, errOut)
	}
	if code, _ := holder.wait(); code != exitLost || !strings.Contains(holder.stderr.String(), "lost") {
		t.Errorf("holder after a forced break: exit %d, want 76; stderr:\n%s", code, holder.stderr)
	}

	// A record from another host: status cannot judge, break refuses.
	if err := os.Mkdir(filepath.Join(dir, ".baton-lock"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, ".baton-lock", "owner.far-away.11111111-2222-3333-4444-555555555555.4026531836.1.1.abcd")
	if err := os.WriteFile(entry, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = dirlockCLI("status", dir)
	if code != exitOK || !strings.Contains(out, `cannot judge: the holder runs on host "far-away"`) {
		t.Errorf("status of another host's record: exit %d\n%s", code, out)
	}
	if code, _, errOut := dirlockCLI("break", dir); code != exitDirlockRefused || !strings.Contains(errOut, "cannot judge") {
		t.Errorf("break of another host's record: exit %d, want 75\n%s", code, errOut)
	}
	if _, err := os.Stat(entry); err != nil {
		t.Errorf("the refused break touched the record: %v", err)
	}
	if code, _, _ := dirlockCLI("break", dir, "--force"); code != exitOK {
		t.Errorf("break PATH --force: exit %d", code)
	}
	if code, _, _ := dirlockCLI("status", dir); code != exitAdminNotFound {
		t.Errorf("status after the forced break: exit %d, want 3", code)
	}

	// A dead holder of this host: status says so, break needs no --force.
	dead := startRun(t, "--dir", dir, "--", "sh", "-c", "echo held; read x")
	dead.line()
	dead.cmd.Process.Signal(syscall.SIGKILL)
	dead.wait()
	code, out, _ = dirlockCLI("status", dir)
	if code != exitOK || !strings.Contains(out, "verdict:   dead") {
		t.Errorf("status of a killed holder: exit %d\n%s", code, out)
	}
	if code, out, errOut := dirlockCLI("break", dir); code != exitOK || !strings.Contains(out, "broken") {
		t.Errorf("break of a killed holder: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{}, {"nope", dir}, {"status"}, {"status", dir, dir}, {"break", "--bogus", dir}} {
		if code, _, _ := dirlockCLI(args...); code != exitUsage {
			t.Errorf("baton dirlock %q: exit %d, want 2", args, code)
		}
	}
}
