package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestAsCaller: run as root, asCaller acts with the caller's
// credentials (the source refuses it root's 0600 file, and what it
// creates is its own), and leaves no thread of the process with them:
// afterwards every thread's file system uid is root's again, and root
// reads the file on many goroutines at once.
func TestAsCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the caller must reach it
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	nobody := &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}}}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if errno := asCaller(nobody, func() syscall.Errno {
				_, err := os.ReadFile(secret)
				return fsErrno(err)
			}); errno != syscall.EACCES {
				t.Errorf("the caller reading root's 0600 file: %v, want EACCES", errno)
			}
			mine := filepath.Join(dir, "mine"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			if errno := asCaller(nobody, func() syscall.Errno { return fsErrno(os.WriteFile(mine, nil, 0o644)) }); errno != 0 {
				t.Errorf("the caller creating a file: %v", errno)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(mine, &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
				t.Errorf("created as the caller: owner %d:%d (%v), want 65534:65534", st.Uid, st.Gid, err)
			}
		})
	}
	wg.Wait()
	root := context.Background() // no caller: the mount's own credentials
	for range 50 {
		wg.Go(func() {
			if errno := asCaller(root, func() syscall.Errno { _, err := os.ReadFile(secret); return fsErrno(err) }); errno != 0 {
				t.Errorf("root reading its file after acting as the caller: %v", errno)
			}
		})
	}
	wg.Wait()
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && f[4] != "0" {
				t.Errorf("%s: %s: a thread kept the caller's file system ids", p, l)
			}
		}
	}
}

// TestCallerGroups: the caller's supplementary groups come from /proc,
// and a caller whose process cannot be found acts with its group alone.
func TestCallerGroups(t *testing.T) {
	own, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got := readGroups(uint32(os.Getpid()), 12345)
	if got[0] != 12345 || len(got) < len(own) {
		t.Fatalf("readGroups(self) = %v, own groups %v", got, own)
	}
	for _, g := range own {
		found := false
		for _, h := range got {
			found = found || h == g
		}
		if !found {
			t.Errorf("readGroups(self) = %v lacks group %d", got, g)
		}
	}
	if got := readGroups(0, 7); len(got) != 1 || got[0] != 7 {
		t.Errorf("readGroups(pid 0) = %v, want [7]", got)
	}
}

func fsErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if pe, ok := err.(*os.PathError); ok {
		errno, _ = pe.Err.(syscall.Errno)
	}
	if errno == 0 {
		return syscall.EIO
	}
	return errno
}

// BenchmarkAsCaller: what acting as the caller adds to each operation
// that opens, creates, changes or removes a file (a root mount, a caller
// that is not root).
func BenchmarkAsCaller(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("acting as another user needs root")
	}
	nobody := &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}, Pid: uint32(os.Getpid())}}
	for b.Loop() {
		asCaller(nobody, func() syscall.Errno { return 0 })
	}
}
