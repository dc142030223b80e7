package main

import (
	"encoding/binary"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The unprivileged user the permission tests act as.
const nobodyUID, nobodyGID = 65534, 65534

// runAsNobody runs 'sh -c script' as the unprivileged user, with $D set
// to dir and $S to suffix, and returns its output and error.
func runAsNobody(t *testing.T, script, dir, suffix string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "D=" + dir, "S=" + suffix}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// denyACL gives path a POSIX access ACL that denies the unprivileged
// user everything while its mode still lets others read.
func denyACL(path string) error {
	const undef = 0xffffffff
	ents := [][3]uint32{ // tag, perm, id: user obj, named user, group obj, mask, other
		{0x01, 6, undef}, {0x02, 0, nobodyUID}, {0x04, 4, undef}, {0x10, 4, undef}, {0x20, 4, undef},
	}
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return unix.Setxattr(path, "system.posix_acl_access", b, 0)
}

// TestMountPermissions: through 'baton mount --allow-other', an
// unprivileged user can do exactly what the source directory lets it do
// and nothing more: each step is run as that user on the source and then
// through the mount, and must succeed or fail alike. Reading root's 0600
// file, appending to it, chmod and chown of root's files, setting the
// set-uid bit of root's program, giving a copy of a shell to root or
// file capabilities, creating in root's directory and removing root's
// file from a sticky directory must fail; running root's program that
// all may run but not read must not; what the user creates through the
// mount is the user's in the source (with the group of a set-gid
// directory, as on the source). A file whose ACL denies the
// user, though its mode lets others read, stays unreadable too (the
// kernel checks only modes: the mount itself acts as the caller). A
// mount without --allow-other lets no one but root in.
func TestMountPermissions(t *testing.T) {
	t.Parallel()
	needFUSE(t)
	srv := startBaton(t, "-listen", "127.0.0.1:0")
	addr, _ := srv.waitLog(t, "baton listening")["addr"].(string)
	dir := t.TempDir()
	// The unprivileged user must reach the directories.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, mnt, closed := filepath.Join(dir, "shared"), filepath.Join(dir, "mnt"), filepath.Join(dir, "closed")
	for _, d := range []string{src, mnt, closed, filepath.Join(src, "rootdir"), filepath.Join(src, "pub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Chmod(filepath.Join(src, "pub"), 0o1777); err != nil { // sticky, like /tmp
		t.Fatal(err)
	}
	// A team's directory: set-gid, of a group the user is not in.
	const teamGID = 4242
	team := filepath.Join(src, "team")
	if err := os.Mkdir(team, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(team, 0, teamGID); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(team, 0o2777); err != nil {
		t.Fatal(err)
	}
	rootFiles := map[string]uint32{"secret": 0o600, "rootfile": 0o644, "rootexe": 0o755, "acl": 0o644, "pub/other": 0o666,
		// set-uid and writable by all: a write by another user clears the bit
		"pub/rw-src": 0o4777, "pub/rw-mnt": 0o4777}
	for name, mode := range rootFiles {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte("root's\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile("/bin/true"); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(src, "runonly"), b, 0o700); err != nil {
		t.Fatal(err)
	} else if err := os.Chmod(filepath.Join(src, "runonly"), 0o711); err != nil {
		t.Fatal(err)
	}
	aclOK := denyACL(filepath.Join(src, "acl")) == nil
	if !aclOK {
		t.Log("the source's file system takes no POSIX ACLs: the ACL step is left out")
	}
	startMount(t, addr, src, mnt, "perm", "--allow-other")
	startMount(t, addr, src, closed, "closed")

	const capScript = `python3 -c 'import os, struct, sys; os.setxattr(sys.argv[1], "security.capability", struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0))' "$D/pub/cap$S"`
	steps := []struct {
		name, script string
		ok           bool
	}{
		{"read root's 0600 file", `cat "$D/secret"`, false},
		{"append to root's 0600 file", `echo evil >> "$D/secret"`, false},
		{"read a file whose ACL denies the user", `cat "$D/acl"`, !aclOK},
		{"chmod root's file", `chmod 666 "$D/rootfile"`, false},
		{"chown root's file", `chown 65534 "$D/rootfile"`, false},
		{"set the set-uid bit of root's program", `chmod u+s "$D/rootexe"`, false},
		{"give a copy of a shell to root", `cp /bin/sh "$D/pub/sh$S" && chown 0 "$D/pub/sh$S"`, false},
		{"give a copy of a shell file capabilities", `cp /bin/sh "$D/pub/cap$S" && ` + capScript, false},
		{"create in root's directory", `touch "$D/rootdir/f$S"`, false},
		{"remove root's file from a sticky directory", `rm -f "$D/pub/other"`, false},
		{"read root's 0644 file", `cat "$D/rootfile"`, true},
		{"run root's program that all may run but not read", `"$D/runonly"`, true},
		{"write to root's set-uid file that all may write", `echo more >> "$D/pub/rw$S"`, true},
		{"create a file", `echo mine > "$D/pub/new$S"`, true},
		{"create a directory", `mkdir "$D/pub/dir$S"`, true},
		{"create a file and a directory with umask 002", `umask 002 && touch "$D/pub/um$S" && mkdir "$D/pub/umd$S"`, true},
		{"create a file and a directory in a set-gid directory", `touch "$D/team/f$S" && mkdir "$D/team/d$S"`, true},
		{"create a set-uid program of one's own", `install -m 4755 /bin/sh "$D/pub/suid$S"`, true},
	}
	for _, s := range steps {
		out, err := runAsNobody(t, s.script, src, "-src")
		if (err == nil) != s.ok {
			t.Fatalf("%s, on the source itself: err %v (%s); the test's setup is wrong", s.name, err, out)
		}
		out, err = runAsNobody(t, s.script, mnt, "-mnt")
		if (err == nil) != s.ok {
			t.Errorf("%s through the mount: err %v (%s); on the source: ok=%v", s.name, err, out, s.ok)
		}
	}

	// What the user made through the mount is the user's in the source,
	// and no file in the source is root's with a set-uid bit or changed.
	for _, name := range []string{"pub/new-mnt", "pub/dir-mnt", "pub/suid-mnt", "pub/sh-mnt", "pub/cap-mnt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(src, name), &st); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if st.Uid != nobodyUID || st.Gid != nobodyGID {
			t.Errorf("%s, created through the mount, is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, nobodyUID, nobodyGID)
		}
	}
	// In the set-gid directory they take its group, and the new
	// directory is set-gid too, as on the source.
	for _, name := range []string{"team/f-src", "team/f-mnt", "team/d-src", "team/d-mnt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(src, name), &st); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if st.Uid != nobodyUID || st.Gid != teamGID {
			t.Errorf("%s, created in a set-gid directory, is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, nobodyUID, teamGID)
		} else if strings.HasPrefix(name, "team/d") && st.Mode&syscall.S_ISGID == 0 {
			t.Errorf("%s, created in a set-gid directory, is not set-gid: mode %o", name, st.Mode)
		}
	}
	// The caller's umask, not the mount's, shapes their modes.
	for _, name := range []string{"pub/um", "pub/umd"} {
		direct, errD := os.Lstat(filepath.Join(src, name+"-src"))
		through, errT := os.Lstat(filepath.Join(src, name+"-mnt"))
		if errD != nil || errT != nil || direct.Mode() != through.Mode() {
			t.Errorf("%s created with umask 002: mode %v (%v) on the source, %v (%v) through the mount", name, direct.Mode(), errD, through.Mode(), errT)
		}
	}
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && !d.IsDir() && syscall.Lstat(p, &st) == nil && st.Uid == 0 && st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			t.Errorf("%s is root's and set-uid or set-gid: mode %o", p, st.Mode)
		}
		return nil
	})
	for _, name := range []string{"secret", "rootfile", "rootexe", "acl", "pub/other"} {
		if b, err := os.ReadFile(filepath.Join(src, name)); err != nil || string(b) != "root's\n" {
			t.Errorf("root's %s now holds %.40q (%v)", name, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(src, "rootfile")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("root's file: %v, %v; want mode 0644", st.Mode(), err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "secret")); err != nil || string(b) != "root's\n" {
		t.Errorf("root reading its 0600 file through the mount: %q, %v", b, err)
	}

	// Without --allow-other, only root gets in.
	if out, err := runAsNobody(t, `ls "$D"`, closed, ""); err == nil {
		t.Errorf("the user listed a mount made without --allow-other: %s", out)
	}
	if _, err := os.ReadDir(closed); err != nil {
		t.Errorf("root listing a mount made without --allow-other: %v", err)
	}
}
