//go:build linux

package dirlock

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nfsSuperMagic is statfs's f_type of an NFS mount.
const nfsSuperMagic = 0x6969

// The contention test through NFS, where the atomic steps are the
// server's: BATON_TEST_NFS_DIR names a writable directory on an NFS
// mount (docs/design/2026-12-07-dirlock.md, "Testing on NFS", shows one way to make one).
func TestContentionNFS(t *testing.T) {
	dir := os.Getenv("BATON_TEST_NFS_DIR")
	if dir == "" {
		fs, _ := os.ReadFile("/proc/filesystems")
		why := "this kernel has an NFS client, but no mount was given"
		if !strings.Contains(string(fs), "\tnfs") {
			why = "this kernel has no NFS client (no nfs in /proc/filesystems), so no NFS mount is possible here"
		}
		t.Skipf("BATON_TEST_NFS_DIR not set: %s; set it to a directory on an NFS mount to run this test", why)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != nfsSuperMagic {
		t.Fatalf("BATON_TEST_NFS_DIR=%s is not on NFS (f_type %#x)", dir, st.Type)
	}
	sub, err := os.MkdirTemp(dir, "dirlock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sub) })
	contend(t, filepath.Clean(sub), 6, 25)
}
