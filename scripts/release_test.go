// Package scripts_test runs the release script the way a maintainer does,
// for the machine's own architecture, and checks what it builds.
package scripts_test

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// release runs scripts/release with args in dir (the script finds the
// repository from its own path), and returns its exit code and output.
func release(t *testing.T, script, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("running %s: %v", script, err)
	}
	return 0, string(out)
}

// TestReleaseBuildsStampedStaticBinary builds one architecture (the
// machine's, so that the binary can run) into a temporary directory: the
// binary is static, prints the stamped version, and SHA256SUMS has its
// checksum.
func TestReleaseBuildsStampedStaticBinary(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the release binaries are for linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	const version = "v0.0.0-releasetest"
	script, err := filepath.Abs("release")
	if err != nil {
		t.Fatal(err)
	}
	// Run from elsewhere, with --out relative to there. --allow-dirty:
	// the test runs in a tree being worked on, too.
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	code, msg := release(t, script, dir, nil, "--allow-dirty", "--arch", runtime.GOARCH, "--out", "out", version)
	if code != 0 {
		t.Fatalf("scripts/release exited %d:\n%s", code, msg)
	}
	name := "baton-" + version + "-linux-" + runtime.GOARCH
	if !strings.Contains(msg, name) {
		t.Errorf("the script's output does not name %s:\n%s", name, msg)
	}
	bin := filepath.Join(out, name)

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	// sha256sum's format, which 'sha256sum -c SHA256SUMS' reads back.
	if want := hex.EncodeToString(sum[:]) + "  " + name + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS = %q, want %q", sums, want)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: not static", name, p.Type)
		}
	}

	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", name, err, v)
	}
	if want := "baton " + version + " "; !strings.HasPrefix(string(v), want) {
		t.Errorf("%s version = %q, want it to start with %q", name, v, want)
	}
}

// TestReleaseRefuses: bad arguments and a tree that is not a clean
// commit are refused with a reason, before anything is built.
func TestReleaseRefuses(t *testing.T) {
	script, err := filepath.Abs("release")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no VERSION"},
		{[]string{"1.0"}, 2, "is not vMAJOR.MINOR.PATCH"},
		{[]string{"v0.1.0/../x"}, 2, "is not vMAJOR.MINOR.PATCH"},
		{[]string{"v0.1.0", "v0.2.0"}, 2, "more than one VERSION"},
		{[]string{"--arch", "386", "v0.1.0"}, 2, "architecture 386"},
		{[]string{"--arch"}, 2, "usage:"},
		{[]string{"--sign", "v0.1.0"}, 2, "unknown flag --sign"},
		{[]string{"-h"}, 0, "usage:"},
	} {
		code, msg := release(t, script, t.TempDir(), nil, tc.args...)
		if code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("scripts/release %q = %d %q; want %d and %q", tc.args, code, msg, tc.code, tc.want)
		}
	}

	// The state of the tree: a copy of the script in a directory that is
	// not a git work tree, then in one with an uncommitted file.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(root, "scripts", "release")
	if err := os.WriteFile(copied, src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Git must not find a repository above the temporary directory.
	env := []string{"GIT_CEILING_DIRECTORIES=" + filepath.Dir(root)}
	if code, msg := release(t, copied, root, env, "v0.1.0"); code != 1 || !strings.Contains(msg, "is not a git work tree") {
		t.Errorf("outside git: exit %d %q; want 1 and a refusal", code, msg)
	}
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if code, msg := release(t, copied, root, env, "v0.1.0"); code != 1 || !strings.Contains(msg, "uncommitted changes") {
		t.Errorf("dirty tree: exit %d %q; want 1 and a refusal", code, msg)
	}
	if _, err := os.Stat(filepath.Join(root, "dist")); !os.IsNotExist(err) {
		t.Errorf("a refused release made dist/ (%v)", err)
	}
}
