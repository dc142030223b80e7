// Package fusefs is the file system of 'baton mount': a FUSE passthrough
// of a local directory whose flock(2) and fcntl(2) locks are taken on a
// baton server instead of in the kernel, so that every mount of the same
// shared directory (an NFS export, or in tests one local directory) sees
// the others' locks.
//
// Lock keys: a file's key is the mount's namespace, a colon and the
// file's path relative to the mount source ("ns:dir/file.db"), so two
// mounts of the same shared directory with the same namespace use the
// same keys. A key longer than 255 bytes is the namespace, ":#" and the
// SHA-256 of the path in hex. Every name of a file is its own key: hard
// links do not share locks, and a file renamed while locked keeps its
// locks under the old name (docs/posix-locks.md).
package fusefs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/ranges"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrNoFUSE: the kernel offers no FUSE (no /dev/fuse, and loading the
// module failed).
var ErrNoFUSE = errors.New("fusefs: FUSE is not available: no /dev/fuse (load the fuse module, or run where FUSE is allowed)")

// Locker is where the file system takes its locks: a *ranges.Locker
// does; Options.Session returns the one to use now.
type Locker interface {
	Set(ctx context.Context, l ranges.Lock, wait bool) (uint64, error)
	Unlock(ctx context.Context, l ranges.Lock) error
	Query(ctx context.Context, l ranges.Lock) (ranges.Holder, bool, error)
	ReleaseOwner(ctx context.Context, key string, flock bool, owner uint64) error
	// Lost is closed when the locks taken through this locker are gone
	// (its session ended): I/O through the files that held them then
	// fails with EIO.
	Lost() <-chan struct{}
}

// Options configures a mount.
type Options struct {
	// Namespace starts every lock key; mounts of the same shared
	// directory must use the same one.
	Namespace string
	// Locks returns the locker to use for a request: a live session.
	Locks func(ctx context.Context) (Locker, error)
	// Logger receives lock errors; nil means slog.Default().
	Logger *slog.Logger
	// Debug logs every FUSE request.
	Debug bool
	// AllowOther lets every local user use the mount, not only the one
	// who mounted it (root). The kernel checks each access against the
	// files' owners and modes either way (default_permissions), and the
	// mount acts in the source as the calling user.
	AllowOther bool
	// Passthrough lets the kernel read and write the source files
	// directly (FUSE passthrough, where the kernel offers it): faster
	// I/O, but the mount no longer sees it, so I/O through a file whose
	// locks were lost with the session cannot fail with EIO.
	Passthrough bool
}

// CheckFUSE makes sure /dev/fuse exists, running 'modprobe fuse' once if
// it does not, and returns ErrNoFUSE when it still does not.
func CheckFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err == nil {
		return nil
	}
	out, err := exec.Command("modprobe", "fuse").CombinedOutput()
	if _, serr := os.Stat("/dev/fuse"); serr == nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w (modprobe fuse: %v: %s)", ErrNoFUSE, err, out)
	}
	return ErrNoFUSE
}

// Mount mounts a passthrough of the directory src on mnt with the kernel's
// mount(2) (no fusermount: the caller must be root) and returns the
// server; Unmount it to end the mount, Wait for it to end. It clears the
// process's umask: the kernel has applied the calling process's umask to
// the mode of every file created through the mount, and a second one
// would take bits the caller asked for (a group's write permission).
func Mount(src, mnt string, o Options) (*fuse.Server, error) {
	if err := CheckFUSE(); err != nil {
		return nil, err
	}
	syscall.Umask(0)
	var st syscall.Stat_t
	if err := syscall.Stat(src, &st); err != nil {
		return nil, fmt.Errorf("fusefs: source %s: %w", src, err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	lfs := &lockFS{o: o}
	root := &fs.LoopbackRoot{Path: src, Dev: uint64(st.Dev)}
	//lint:ignore SA1019 WrapChild would need node to embed *LoopbackNode; NewNode works in go-fuse v2.12.
	root.NewNode = func(r *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, fs: lfs}
	}
	rn := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, fs: lfs}
	root.RootNode = rn
	opts := &fs.Options{MountOptions: fuse.MountOptions{
		FsName:            src,
		Name:              "baton",
		DirectMountStrict: true,
		EnableLocks:       true,
		AllowOther:        o.AllowOther,
		// The kernel checks permissions against the files' owners and
		// modes, as on the source: without it any user of the mount
		// could do whatever root may.
		Options: []string{"default_permissions"},
		Debug:   o.Debug,
	}}
	raw := &closeUnlocker{RawFileSystem: fs.NewNodeFS(rn, opts), owners: map[nodeOwner]bool{}}
	srv, err := fuse.NewServer(raw, mnt, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("fusefs: mount %s on %s: %w", src, mnt, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("fusefs: mount %s on %s: %w", src, mnt, err)
	}
	return srv, nil
}

// closeUnlocker releases a POSIX lock owner's locks on a file when the
// owner closes any descriptor of it, as POSIX requires: the kernel keeps
// no record of locks it forwards to a file system, so it does not unlock
// them on close itself, and tells the file system the owner in FLUSH
// instead (as libfuse does, an unlock of the whole file follows). Only
// files an owner has set a POSIX lock on through this mount cost the
// extra request.
type closeUnlocker struct {
	fuse.RawFileSystem
	mu     sync.Mutex
	owners map[nodeOwner]bool // POSIX owners that have set a lock, by file
}

type nodeOwner struct{ node, owner uint64 }

func (c *closeUnlocker) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	c.note(in)
	return c.RawFileSystem.SetLk(cancel, in)
}

func (c *closeUnlocker) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	c.note(in)
	return c.RawFileSystem.SetLkw(cancel, in)
}

// note records a POSIX lock request before it is made: a close racing
// with it then unlocks at worst once too often, never too rarely.
func (c *closeUnlocker) note(in *fuse.LkIn) {
	if in.LkFlags&fuse.FUSE_LK_FLOCK != 0 || in.Lk.Typ == syscall.F_UNLCK {
		return
	}
	c.mu.Lock()
	c.owners[nodeOwner{in.NodeId, in.Owner}] = true
	c.mu.Unlock()
}

func (c *closeUnlocker) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	k := nodeOwner{in.NodeId, in.LockOwner}
	c.mu.Lock()
	held := c.owners[k]
	delete(c.owners, k)
	c.mu.Unlock()
	if held {
		c.RawFileSystem.SetLk(cancel, &fuse.LkIn{InHeader: in.InHeader, Fh: in.Fh, Owner: in.LockOwner,
			Lk: fuse.FileLock{Start: 0, End: ranges.ToEnd, Typ: syscall.F_UNLCK}})
	}
	return c.RawFileSystem.Flush(cancel, in)
}

type lockFS struct {
	o Options
	// unavailableLogged is when it last logged why range locks fail
	// with ENOLCK (UnixNano).
	unavailableLogged atomic.Int64
}

// key is the lock key of the file at path rel (relative to the source).
func (l *lockFS) key(rel string) string {
	k := l.o.Namespace + ":" + rel
	if len(k) <= 255 {
		return k
	}
	sum := sha256.Sum256([]byte(rel))
	return l.o.Namespace + ":#" + hex.EncodeToString(sum[:])
}

// node is a loopback node whose open files take their locks on baton.
type node struct {
	fs.LoopbackNode
	fs *lockFS

	mu sync.Mutex
	// lockers are the node's open files through which locks are held,
	// for treeLost.
	lockers map[*file]bool
}

var (
	_ fs.NodeOpener        = (*node)(nil)
	_ fs.NodeCreater       = (*node)(nil)
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeMkdirer       = (*node)(nil)
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeRenamer       = (*node)(nil)
	_ fs.NodeUnlinker      = (*node)(nil)
	_ fs.NodeRmdirer       = (*node)(nil)
	_ fs.NodeSetattrer     = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

// Every operation that opens, creates, changes or removes a file in the
// source acts as the calling process (asCaller).

func (n *node) Open(ctx context.Context, flags uint32) (fh fs.FileHandle, fl uint32, errno syscall.Errno) {
	op := func() syscall.Errno {
		fh, fl, errno = n.LoopbackNode.Open(ctx, flags)
		return errno
	}
	if flags&fuse.FMODE_EXEC != 0 {
		// exec(2) of a file the caller may run but not read (mode
		// 0711): the kernel has checked the execute permission, and
		// the source would refuse the caller the read the open is.
		errno = op()
	} else {
		errno = asCaller(ctx, op)
	}
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(ctx, fh), fl, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (in *fs.Inode, fh fs.FileHandle, fl uint32, errno syscall.Errno) {
	errno = asCaller(ctx, func() syscall.Errno {
		in, fh, fl, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		return errno
	})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n.keepGroup(name, out)
	return in, in.Operations().(*node).wrap(ctx, fh), fl, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = asCaller(ctx, func() syscall.Errno {
		in, errno = n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
		return errno
	})
	if errno == 0 {
		n.keepGroup(name, out)
	}
	return in, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = asCaller(ctx, func() syscall.Errno {
		in, errno = n.LoopbackNode.Mkdir(ctx, name, mode, out)
		return errno
	})
	if errno == 0 {
		n.keepGroup(name, out)
	}
	return in, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = asCaller(ctx, func() syscall.Errno {
		in, errno = n.LoopbackNode.Symlink(ctx, target, name, out)
		return errno
	})
	if errno == 0 {
		n.keepGroup(name, out)
	}
	return in, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = asCaller(ctx, func() syscall.Errno {
		in, errno = n.LoopbackNode.Link(ctx, target, name, out)
		return errno
	})
	return in, errno
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags) })
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Setxattr(ctx, attr, data, flags) })
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Removexattr(ctx, attr) })
}

// keepGroup gives a file just created in a set-gid directory the
// directory's group, as the source did before the loopback, running as
// root, gave the file the caller's group.
func (n *node) keepGroup(name string, out *fuse.EntryOut) {
	if os.Getuid() != 0 { // the loopback changes owners only as root
		return
	}
	var dir syscall.Stat_t
	if syscall.Stat(n.source(), &dir) != nil || dir.Mode&syscall.S_ISGID == 0 || out.Attr.Gid == dir.Gid {
		return
	}
	if syscall.Lchown(filepath.Join(n.source(), name), -1, int(dir.Gid)) == nil {
		out.Attr.Gid = dir.Gid
	}
}

// Setattr acts as the caller too, but for one change the kernel makes
// on a caller's behalf: when someone who may write a set-uid or set-gid
// file that is not theirs writes or truncates it, the kernel clears
// those bits with a mode change the caller could not make itself. That
// change is made as the mount, the rest as the caller.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if m, ok := in.GetMode(); ok && n.onlyDropsSetID(m) {
		mode := *in
		mode.Valid = fuse.FATTR_MODE
		if errno := n.LoopbackNode.Setattr(ctx, f, &mode, out); errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_MODE
		if rest.Valid&^(fuse.FATTR_FH|fuse.FATTR_LOCKOWNER|fuse.FATTR_KILL_SUIDGID) == 0 {
			return 0
		}
		in = &rest
	}
	return asCaller(ctx, func() syscall.Errno { return n.LoopbackNode.Setattr(ctx, f, in, out) })
}

// onlyDropsSetID reports whether mode is the source file's mode less its
// set-uid or set-gid bits, and differs from it.
func (n *node) onlyDropsSetID(mode uint32) bool {
	var st syscall.Stat_t
	if syscall.Lstat(n.source(), &st) != nil {
		return false
	}
	const setID = syscall.S_ISUID | syscall.S_ISGID
	cur, want := uint32(st.Mode)&07777, mode&07777
	return cur != want && cur&^setID == want && cur&setID != 0
}

// source is the node's path in the source directory.
func (n *node) source() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

func (n *node) wrap(ctx context.Context, fh fs.FileHandle) fs.FileHandle {
	f := &file{LoopbackFile: fh.(*fs.LoopbackFile), n: n}
	if c, ok := fuse.FromContext(ctx); ok {
		f.opener = c.Pid
	}
	return f
}

// file is an open file description: the loopback file's I/O, with its
// locks on baton.
type file struct {
	*fs.LoopbackFile
	n *node

	mu     sync.Mutex
	flocks map[uint64]string // flock owners locked through this file, with their key
	// held lists the owners (POSIX, and flock with flockBit) that hold
	// locks set through this file, on the locker heldOn; lost records
	// that such locks were lost with their session. From then on, until
	// the last close, I/O through the file fails with EIO, as Linux's NFS
	// client answers for a lost lock: the program must not go on writing
	// as if it still held them while another mount may hold them now.
	held   map[uint64]bool
	heldOn Locker
	lost   bool
	// opener is the process (thread id) that opened the file, setters
	// those that set locks through it, and outside the files whose
	// lost locks were found to be set by no ancestor of opener: see
	// treeLost.
	opener  uint32
	setters map[uint32]bool
	outside map[*file]bool
}

// flockBit marks a flock owner in file.held, apart from POSIX owners.
const flockBit = 1 << 63

var (
	_ fs.FileGetlker  = (*file)(nil)
	_ fs.FileSetlker  = (*file)(nil)
	_ fs.FileSetlkwer = (*file)(nil)
	_ fs.FileReleaser = (*file)(nil)
	_ fs.FileReader   = (*file)(nil)
	_ fs.FileWriter   = (*file)(nil)
	_ fs.FileFsyncer  = (*file)(nil)
)

func (f *file) lock(owner uint64, lk *fuse.FileLock, flags uint32) ranges.Lock {
	l := ranges.Lock{
		Key:   f.n.fs.key(f.n.Path(nil)),
		Flock: flags&fuse.FUSE_LK_FLOCK != 0,
		Owner: owner,
		Start: lk.Start,
		End:   lk.End,
	}
	if l.End > ranges.ToEnd {
		l.End = ranges.ToEnd
	}
	switch lk.Typ {
	case syscall.F_RDLCK:
		l.Type = ranges.ReadLock
	case syscall.F_WRLCK:
		l.Type = ranges.WriteLock
	}
	return l
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	lf := f.n.fs
	lockr, err := lf.o.Locks(ctx)
	if err != nil {
		return lf.errno("getlk", err)
	}
	h, found, err := lockr.Query(ctx, f.lock(owner, lk, flags))
	if err != nil {
		return lf.errno("getlk", err)
	}
	if !found {
		*out = fuse.FileLock{Typ: syscall.F_UNLCK}
		return 0
	}
	typ := uint32(syscall.F_WRLCK)
	if h.Type == ranges.ReadLock {
		typ = syscall.F_RDLCK
	}
	*out = fuse.FileLock{Start: h.Start, End: h.End, Typ: typ}
	return 0
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, owner, lk, flags, false)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, owner, lk, flags, true)
}

func (f *file) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	lf := f.n.fs
	lockr, err := lf.o.Locks(ctx)
	if err != nil {
		return lf.errno("setlk", err)
	}
	l := f.lock(owner, lk, flags)
	if lk.Typ == syscall.F_UNLCK {
		if err := lockr.Unlock(ctx, l); err != nil {
			return lf.errno("unlock", err)
		}
		if l.Flock || l.Start == 0 && l.End == ranges.ToEnd {
			f.mu.Lock()
			delete(f.held, heldKey(l))
			f.mu.Unlock()
		}
		return 0
	}
	if _, err := lockr.Set(ctx, l, wait); err != nil {
		return lf.errno("setlk", err)
	}
	f.mu.Lock()
	f.lostLocked()
	if f.held == nil {
		f.held = map[uint64]bool{}
	}
	f.held[heldKey(l)] = true
	f.heldOn = lockr
	if c, ok := fuse.FromContext(ctx); ok && c.Pid != 0 {
		if f.setters == nil {
			f.setters = map[uint32]bool{}
		}
		f.setters[c.Pid] = true
	}
	f.mu.Unlock()
	f.n.mu.Lock()
	if f.n.lockers == nil {
		f.n.lockers = map[*file]bool{}
	}
	f.n.lockers[f] = true
	f.n.mu.Unlock()
	if l.Flock {
		f.mu.Lock()
		if f.flocks == nil {
			f.flocks = map[uint64]string{}
		}
		f.flocks[owner] = l.Key
		f.mu.Unlock()
	}
	return 0
}

func heldKey(l ranges.Lock) uint64 {
	if l.Flock {
		return l.Owner | flockBit
	}
	return l.Owner &^ flockBit
}

// lostLocked reports whether locks set through f were lost with their
// session, remembering it until the last close. f.mu is held.
func (f *file) lostLocked() bool {
	if f.lost || len(f.held) == 0 || f.heldOn == nil {
		return f.lost
	}
	select {
	case <-f.heldOn.Lost():
		f.lost = true
	default:
	}
	return f.lost
}

// checkLost returns EIO, once logged, when locks set through f were
// lost, or locks on the same file set by the process that opened f or
// one of its ancestors (treeLost).
func (f *file) checkLost(op string) syscall.Errno {
	f.mu.Lock()
	lost := f.lost
	nowLost := f.lostLocked()
	f.mu.Unlock()
	if !nowLost && !f.treeLost() {
		return 0
	}
	if !lost {
		f.n.fs.o.Logger.Warn("locks lost with the session: I/O through the file fails with EIO until it is closed",
			"path", f.n.Path(nil), "op", op)
	}
	return syscall.EIO
}

// treeLost reports whether another open file of the same node lost
// locks that the process that opened f, or one of its ancestors, set:
// 'flock FILE cmd' locks through flock's descriptor, and cmd writes
// through its own. From then on I/O through f fails too, until it is
// closed. A process outside that tree writes on: a lock protects only
// the programs that hold it.
func (f *file) treeLost() bool {
	if f.opener == 0 {
		return false
	}
	var setters []uint32
	var checked []*file
	f.n.mu.Lock()
	for h := range f.n.lockers {
		if h == f {
			continue
		}
		f.mu.Lock()
		skip := f.outside[h]
		f.mu.Unlock()
		if skip {
			continue
		}
		h.mu.Lock()
		if h.lostLocked() {
			for pid := range h.setters {
				setters = append(setters, pid)
			}
			checked = append(checked, h)
		}
		h.mu.Unlock()
	}
	f.n.mu.Unlock()
	if len(checked) == 0 {
		return false
	}
	if descendsFrom(f.opener, setters) {
		f.mu.Lock()
		f.lost = true
		f.mu.Unlock()
		return true
	}
	f.mu.Lock()
	if f.outside == nil {
		f.outside = map[*file]bool{}
	}
	for _, h := range checked {
		f.outside[h] = true
	}
	f.mu.Unlock()
	return false
}

// PassthroughFd hands the kernel the source file for direct I/O only
// when Options.Passthrough asks for it (see there).
func (f *file) PassthroughFd() (int, bool) {
	if !f.n.fs.o.Passthrough {
		return -1, false
	}
	return f.LoopbackFile.PassthroughFd()
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := f.checkLost("read"); errno != 0 {
		return nil, errno
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.checkLost("write"); errno != 0 {
		return 0, errno
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.checkLost("fsync"); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}

// Release is the last close of the open file description: its flock
// locks go (the kernel unlocks POSIX locks itself, on every close).
func (f *file) Release(ctx context.Context) syscall.Errno {
	f.n.mu.Lock()
	delete(f.n.lockers, f)
	f.n.mu.Unlock()
	f.mu.Lock()
	flocks := f.flocks
	f.flocks = nil
	f.mu.Unlock()
	lf := f.n.fs
	for owner, key := range flocks {
		lockr, err := lf.o.Locks(context.Background())
		if err == nil {
			err = lockr.ReleaseOwner(context.Background(), key, true, owner)
		}
		if err != nil {
			lf.errno("release", err)
		}
	}
	return f.LoopbackFile.Release(ctx)
}

// errno maps a lock error onto the errno fcntl and flock return.
func (l *lockFS) errno(op string, err error) syscall.Errno {
	switch {
	case errors.Is(err, ranges.ErrConflict):
		return syscall.EAGAIN
	case errors.Is(err, ranges.ErrDeadlock):
		return syscall.EDEADLK
	case errors.Is(err, ranges.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, ranges.ErrUnavailable):
		// A cluster node that cannot serve the key's range locks for
		// now (a take-over's warm-up, a planned change): logged at most
		// once a minute, as it may last a lease or so.
		now := time.Now().UnixNano()
		if last := l.unavailableLogged.Load(); now-last >= int64(time.Minute) && l.unavailableLogged.CompareAndSwap(last, now) {
			l.o.Logger.Warn("range locks of a key are not served for now (a cluster node taking it over): "+
				"fcntl and flock on it fail with ENOLCK, waiting requests wait", "op", op, "err", err)
		}
		return syscall.ENOLCK
	case errors.Is(err, ranges.ErrLimit):
		// Linux's answer when it has no room for another lock.
		return syscall.ENOLCK
	case errors.Is(err, protocol.ErrNotAuthorized):
		return syscall.EACCES
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	}
	l.o.Logger.Warn("lock request failed", "op", op, "err", err)
	return syscall.EIO
}
