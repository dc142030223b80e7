package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// daemonGroups are the mount process's own supplementary groups, which
// a thread gets back after acting for a caller.
var daemonGroups = sync.OnceValues(unix.Getgroups)

// asCaller runs op with the file system credentials of the process that
// made the request: its fsuid, fsgid and supplementary groups, as
// Linux's NFS server does. The kernel checks permissions on the mount
// itself (default_permissions), but only against the mode bits the
// mount reports, and a root mount acting as root would ignore what the
// source checks beyond them (POSIX ACLs, an NFS server's own checks) and
// what changed in the source since the kernel looked. Acting as the
// caller, the source refuses what it would refuse that user directly,
// and what the caller creates is the caller's from the start.
//
// It does so only when the mount runs as root and the caller is not
// root. The credentials are set on a thread of their own (per-thread
// setfsuid, setfsgid and setgroups), on a new goroutine that keeps its
// thread locked if they cannot be put back, so that the runtime ends the
// thread instead of reusing it.
func asCaller(ctx context.Context, op func() syscall.Errno) syscall.Errno {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Uid == 0 || os.Geteuid() != 0 {
		return op()
	}
	own, err := daemonGroups()
	if err != nil {
		return syscall.EPERM
	}
	groups := callerGroups(c.Pid, c.Uid, c.Gid)
	var errno syscall.Errno
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := setCreds(int(c.Uid), int(c.Gid), groups); err != nil {
			errno = syscall.EPERM
		} else {
			errno = op()
		}
		if setCreds(os.Geteuid(), os.Getegid(), own) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	return errno
}

// setCreds sets this thread's file system credentials and checks that
// they took (setfsuid reports no failure).
func setCreds(uid, gid int, groups []int) error {
	if err := unix.Setgroups(groups); err != nil {
		return err
	}
	unix.SetfsgidRetGid(gid)
	unix.SetfsuidRetUid(uid)
	gotGid, _ := unix.SetfsgidRetGid(-1)
	gotUid, _ := unix.SetfsuidRetUid(-1)
	if gotUid != uid || gotGid != gid {
		return fmt.Errorf("fusefs: fsuid %d, fsgid %d after setting %d, %d", gotUid, gotGid, uid, gid)
	}
	return nil
}

// groupsCache keeps what callerGroups read for a second: reading
// /proc/PID/status costs more than the rest of acting as the caller. A
// process that drops a group is held to it up to that second later, as
// with an NFS server's credential cache; an entry is also keyed by the
// uid and gid, so a reused pid with other ids reads afresh.
var groupsCache = struct {
	sync.Mutex
	m map[groupsKey]groupsEntry
}{m: map[groupsKey]groupsEntry{}}

type groupsKey struct{ pid, uid, gid uint32 }

type groupsEntry struct {
	groups []int
	at     time.Time
}

const (
	groupsTTL      = time.Second
	groupsCacheMax = 4096 // entries; the cache starts afresh when it is full
)

// callerGroups returns the supplementary groups of the calling process,
// from groupsCache or /proc.
func callerGroups(pid, uid, gid uint32) []int {
	k := groupsKey{pid, uid, gid}
	now := time.Now()
	groupsCache.Lock()
	e, ok := groupsCache.m[k]
	groupsCache.Unlock()
	if ok && now.Sub(e.at) < groupsTTL {
		return e.groups
	}
	groups := readGroups(pid, gid)
	groupsCache.Lock()
	if len(groupsCache.m) >= groupsCacheMax {
		clear(groupsCache.m)
	}
	groupsCache.m[k] = groupsEntry{groups, now}
	groupsCache.Unlock()
	return groups
}

// readGroups reads the supplementary groups of process pid from /proc.
// When they cannot be read (the process is gone, or in another pid
// namespace: pid 0), the caller acts with its group alone, which can
// only refuse more.
func readGroups(pid, gid uint32) []int {
	groups := []int{int(gid)}
	if pid == 0 {
		return groups
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return groups
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("Groups:"))
		if !ok {
			continue
		}
		for _, f := range bytes.Fields(rest) {
			if g, err := strconv.Atoi(string(f)); err == nil && g != int(gid) {
				groups = append(groups, g)
			}
		}
		break
	}
	return groups
}
