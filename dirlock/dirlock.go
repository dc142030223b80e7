// Package dirlock is a mutual-exclusion lock kept in a shared directory,
// for processes on several hosts that share a file system (NFS, for
// example) and have no lock server. The lock never asks whether a process
// on another machine is dead: a dead holder's lock is taken back only on
// its own machine, after an exact local check, and one whose machine never
// comes back waits for an operator ('baton dirlock break'). Acquiring is a
// rename of a complete private directory to .baton-lock, so the lock
// appears with its record or not at all. User docs: docs/dirlock.md; the
// steps, checked by internal/modelcheck with a crash between any two:
// docs/design/2026-12-07-dirlock.md#dirlockdirlockgo.
package dirlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File names inside the shared directory.
const (
	LockName     = ".baton-lock" // the lock: a directory with one entry
	stagingPrefx = ".baton-tmp." // an acquisition's private directory
	trashPrefix  = ".baton-gone."
)

// Errors callers test with errors.Is.
var (
	// ErrBusy: the lock is held. A *HeldError says by whom.
	ErrBusy = errors.New("dirlock: lock is held")
	// ErrOtherHost: the lock is held by a process on another machine (or
	// in another pid namespace, or by a record without a machine id from
	// another boot), which this machine never judges, however long it
	// looks dead. Errors that match it also match ErrBusy.
	ErrOtherHost = errors.New("dirlock: lock is held by a process on another host")
	// ErrNoRecord: the lock directory exists but holds no entry baton can
	// read (made by hand, or damaged). No process breaks it; an operator
	// must look ('baton dirlock status', 'baton dirlock break --force').
	// Errors that match it also match ErrBusy.
	ErrNoRecord = errors.New("dirlock: lock directory has no readable record")
	// ErrNotSupported: the directory or the system cannot do the steps
	// (rename of a directory, mkdir) or the death check (Linux /proc).
	ErrNotSupported = errors.New("dirlock: not supported")
	// ErrNotHeld: Unlock found that the lock is not (or no longer) held by
	// this Mutex: an operator broke it.
	ErrNotHeld = errors.New("dirlock: lock not held")
)

// HeldError says who holds the lock. It matches ErrBusy, and also
// ErrOtherHost or ErrNoRecord when that is why it cannot be taken.
type HeldError struct {
	Dir     string
	Entry   string // the lock directory's entry, "" if none is readable
	Owner   Owner  // the process it names
	Verdict Verdict
	Cause   error // nil (alive here), ErrOtherHost or ErrNoRecord
}

func (e *HeldError) Error() string {
	switch {
	case e.Cause == ErrNoRecord:
		return fmt.Sprintf("dirlock: %s: lock directory %s has no readable record; an operator must inspect it", e.Dir, LockName)
	case e.Cause != nil:
		return fmt.Sprintf("dirlock: %s: held%s by %v: another host; only that host or an operator can free it", e.Dir, e.kind(), e.Owner)
	}
	if e.Verdict == Dead {
		return fmt.Sprintf("dirlock: %s: held%s by %v, dead; taking it back", e.Dir, e.kind(), e.Owner)
	}
	return fmt.Sprintf("dirlock: %s: held%s by %v, alive", e.Dir, e.kind(), e.Owner)
}

func (e *HeldError) kind() string {
	switch k, _, _ := strings.Cut(e.Entry, "."); k {
	case kindRelease:
		return " (being released)"
	case kindBreak:
		return " (being broken)"
	}
	return ""
}

// Unwrap lets errors.Is match ErrBusy and the cause.
func (e *HeldError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrBusy, e.Cause}
	}
	return []error{ErrBusy}
}

// Default backoff bounds of Lock.
const (
	DefaultMinBackoff = 10 * time.Millisecond
	DefaultMaxBackoff = time.Second
)

// Mutex is the lock in one shared directory. The zero value is not
// usable; use New. A Mutex is held at most once at a time; it may be
// used from several goroutines.
type Mutex struct {
	dir string
	// MinBackoff and MaxBackoff bound Lock's wait between attempts: it
	// starts at MinBackoff and doubles up to MaxBackoff, each wait drawn
	// uniformly from its upper half. Zero means the defaults.
	MinBackoff, MaxBackoff time.Duration

	mu    sync.Mutex
	entry string // our entry name in the lock directory while held
	self  Owner  // our identity with the nonce of the current acquisition
}

// New returns the lock kept in directory dir, which must exist.
func New(dir string) *Mutex { return &Mutex{dir: dir} }

// Dir returns the directory the lock is kept in.
func (m *Mutex) Dir() string { return m.dir }

// testHook, when set (by tests only), is called between two steps, with
// the name of the point; tests use it to crash a process there.
var testHook func(point string)

func hook(point string) {
	if testHook != nil {
		testHook(point)
	}
}

// Lock takes the lock, waiting with bounded, jittered backoff while
// another process holds it. When ctx ends first it returns an error
// that matches ctx.Err() and the last reason it waited (ErrBusy,
// ErrOtherHost or ErrNoRecord); giving up never touches the lock.
func (m *Mutex) Lock(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	staging, self, err := m.start("Lock")
	if err != nil {
		return err
	}
	minB, maxB := m.MinBackoff, m.MaxBackoff
	if minB <= 0 {
		minB = DefaultMinBackoff
	}
	if maxB < minB {
		maxB = max(minB, DefaultMaxBackoff)
	}
	wait := minB
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := m.try(staging, self)
		if err == nil || !errors.Is(err, ErrBusy) {
			if err != nil {
				os.RemoveAll(staging)
			}
			return err
		}
		timer.Reset(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			os.RemoveAll(staging)
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-timer.C:
		}
		wait = min(2*wait, maxB)
	}
}

// TryLock takes the lock if it is free (or held by a provably dead
// process of this host), and otherwise returns a *HeldError, which
// matches ErrBusy.
func (m *Mutex) TryLock() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	staging, self, err := m.start("TryLock")
	if err != nil {
		return err
	}
	if err := m.try(staging, self); err != nil {
		os.RemoveAll(staging)
		return err
	}
	return nil
}

// start begins an acquisition: it removes this host's dead leftovers and
// prepares the staging directory. m.mu is held.
func (m *Mutex) start(caller string) (string, Owner, error) {
	if m.entry != "" {
		return "", Owner{}, fmt.Errorf("dirlock: %s: %s called on a Mutex that is already held", m.dir, caller)
	}
	self, err := selfIdentity()
	if err != nil {
		return "", Owner{}, err
	}
	m.cleanGarbage(self)
	return m.prepare(self)
}

// prepare makes this acquisition's staging directory with the record in
// it: the first two steps.
func (m *Mutex) prepare(self Owner) (string, Owner, error) {
	self = self.withNonce()
	staging := filepath.Join(m.dir, stagingPrefx+self.id())
	if err := os.Mkdir(staging, 0o755); err != nil {
		return "", self, fsError(m.dir, "mkdir", err)
	}
	hook("mkdir-staging")
	if err := writeRecord(filepath.Join(staging, kindOwner+"."+self.id()), self); err != nil {
		os.RemoveAll(staging)
		return "", self, fsError(m.dir, "write record", err)
	}
	hook("write-record")
	return staging, self, nil
}

// writeRecord writes the entry file: a readable copy of what its name
// says, and when. Decisions read the name only.
func writeRecord(path string, o Owner) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	hook("create-record")
	_, err = fmt.Fprintf(f, "host=%s\nmachine_id=%s\nboot_id=%s\npid_ns=%s\npid=%d\nstart_ticks=%d\nnonce=%s\nsince=%s\n",
		o.Hostname, cmp.Or(o.MachineID, noMachineID), o.BootID, o.PIDNS, o.PID, o.Start, o.Nonce, time.Now().UTC().Format(time.RFC3339Nano))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// maxBreaks bounds the breaks of one attempt: each needs a dead holder,
// so more than a few in a row means processes keep dying on this host.
const maxBreaks = 8

// try is one attempt: rename the staging directory to the lock; if the
// lock exists, break it when its entry names a provably dead process of
// this host, and rename again.
func (m *Mutex) try(staging string, self Owner) error {
	lock := filepath.Join(m.dir, LockName)
	var err error
	for range maxBreaks {
		err = os.Rename(staging, lock)
		if err == nil {
			hook("rename")
			m.entry, m.self = kindOwner+"."+self.id(), self
			syncDir(m.dir)
			return nil
		}
		if !exists(err) {
			return fsError(m.dir, "rename", err)
		}
		entry, owner, verdict, rerr := readLock(m.dir, self)
		switch {
		case errors.Is(rerr, errEmptyLock):
			// A release or break that has taken its entry out but not yet
			// removed the directory (or crashed there): the lock is free.
			// rmdir removes only an empty directory, never a held lock.
			os.Remove(lock)
			continue
		case errors.Is(rerr, os.ErrNotExist):
			continue // released meanwhile
		case rerr != nil:
			return rerr
		}
		if verdict != Dead {
			return heldError(m.dir, entry, owner, verdict)
		}
		hook("judged-dead")
		if err := breakLock(m.dir, entry, self); err != nil {
			return err
		}
		err = heldError(m.dir, entry, owner, verdict)
	}
	return err
}

func heldError(dir, entry string, o Owner, v Verdict) error {
	e := &HeldError{Dir: dir, Entry: entry, Owner: o, Verdict: v}
	switch {
	case entry == "":
		e.Cause = ErrNoRecord
	case v == CannotJudge:
		e.Cause = ErrOtherHost
	}
	return e
}

// errEmptyLock: the lock directory has no entry at all. It is free: a
// release or break empties it before removing it. It matches
// os.ErrNotExist (Inspect: not held).
var errEmptyLock = fmt.Errorf("dirlock: empty lock directory: %w", os.ErrNotExist)

// readLock reads the lock directory's entry and judges the process it
// names. An unreadable lock directory is entry "" (ErrNoRecord).
func readLock(dir string, self Owner) (entry string, o Owner, v Verdict, err error) {
	f, err := os.Open(filepath.Join(dir, LockName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", Owner{}, 0, err
		}
		return "", Owner{}, 0, fsError(dir, "open lock", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return "", Owner{}, 0, fsError(dir, "read lock", err)
	}
	switch len(names) {
	case 0:
		return "", Owner{}, 0, errEmptyLock
	case 1:
	default:
		return "", Owner{}, 0, nil
	}
	_, o, ok := parseEntry(names[0])
	if !ok {
		return "", Owner{}, 0, nil
	}
	return names[0], o, judge(o, self), nil
}

// breakLock frees a lock whose entry names a dead process of this host:
// claim that exact entry by renaming it, then take the claimed entry out
// of the lock directory and remove the directory. Losing the claim to
// another breaker is not an error: the caller tries again.
func breakLock(dir, entry string, self Owner) error {
	lock := filepath.Join(dir, LockName)
	self = self.withNonce()
	claimed := kindBreak + "." + self.id()
	err := os.Rename(filepath.Join(lock, entry), filepath.Join(lock, claimed))
	if errors.Is(err, os.ErrNotExist) {
		return nil // another process claimed it, or it is a new lock now
	}
	if err != nil {
		return fsError(dir, "claim dead entry", err)
	}
	hook("claim")
	return removeLock(dir, claimed, self)
}

// removeLock frees the lock whose entry we have claimed (claimed is our
// release or break entry): it moves that entry out of the lock directory,
// which leaves the directory empty, and then removes the directory if it
// is still empty. Every step names our own entry or needs an empty
// directory, so none can touch a new holder's lock: an operator may have
// broken the lock meanwhile and another process taken it (moving the
// whole directory away, as before, moved that holder's lock). An empty
// lock directory is free: Lock removes it.
func removeLock(dir, claimed string, self Owner) error {
	lock := filepath.Join(dir, LockName)
	trash := filepath.Join(dir, trashPrefix+self.id())
	err := os.Rename(filepath.Join(lock, claimed), trash)
	if errors.Is(err, os.ErrNotExist) {
		return nil // an operator broke the lock after our claim: it is not ours to remove
	}
	if err != nil {
		return fsError(dir, "move entry out", err)
	}
	hook("move-away")
	// rmdir: fails if a new holder's lock is there by now (or it is gone
	// already); both fine. A crash here leaves an empty directory, which
	// the next Lock removes the same way.
	os.Remove(lock)
	syncDir(dir)
	// What cannot be removed now (an NFS client's .nfsXXXX of a file still
	// open) is a leftover, removed once this process is dead by the next
	// Lock on this host.
	os.RemoveAll(trash)
	return nil
}

// moveLockAway removes a lock directory without a readable entry, for an
// operator's forced break: there is no entry to claim.
func moveLockAway(dir string, self Owner) error {
	trash := filepath.Join(dir, trashPrefix+self.id())
	if err := os.Rename(filepath.Join(dir, LockName), trash); err != nil {
		return fsError(dir, "move lock away", err)
	}
	syncDir(dir)
	os.RemoveAll(trash)
	return nil
}

// Unlock releases the lock. It returns ErrNotHeld if this Mutex does not
// hold it, or if its entry is gone (an operator broke the lock).
func (m *Mutex) Unlock() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entry == "" {
		return fmt.Errorf("%w: %s: Unlock of a Mutex that is not held", ErrNotHeld, m.dir)
	}
	entry, self := m.entry, m.self
	m.entry = ""
	lock := filepath.Join(m.dir, LockName)
	err := os.Rename(filepath.Join(lock, entry), filepath.Join(lock, kindRelease+"."+self.id()))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s: the lock's record was removed while held (broken by an operator?)", ErrNotHeld, m.dir)
	}
	if err != nil {
		return fsError(m.dir, "release", err)
	}
	hook("release-claim")
	return removeLock(m.dir, kindRelease+"."+self.id(), self)
}

// Held reports whether the lock's entry still names this Mutex's
// acquisition: false once an operator broke it.
func (m *Mutex) Held() bool {
	m.mu.Lock()
	entry := m.entry
	m.mu.Unlock()
	if entry == "" {
		return false
	}
	_, err := os.Lstat(filepath.Join(m.dir, LockName, entry))
	return err == nil
}

// checkInterval is how often Do checks that the lock's entry is still
// this process's while fn runs (a variable for tests).
var checkInterval = time.Second

// Do takes the lock in dir (waiting as Lock does), runs fn, and releases
// the lock when fn returns or panics; it has the shape of the server
// client's Client.Do, without lease and token: a directory lock has no
// fencing token. fn's context is cancelled, with cause ErrNotHeld, if the
// lock's entry disappears while fn runs (checked every second) (an operator broke it); fn must
// stop its guarded work then.
//
// If fn did not run, Do returns why (Lock's error). Otherwise it returns
// errors.Join(fn's error, the release error), the latter ErrNotHeld if
// the lock was broken while fn ran.
func Do(ctx context.Context, dir string, fn func(ctx context.Context) error) error {
	m := New(dir)
	if err := m.Lock(ctx); err != nil {
		return err
	}
	unlocked := false
	defer func() {
		if !unlocked {
			m.Unlock() // fn panicked
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(checkInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if !m.Held() {
					cancel(fmt.Errorf("%w: %s: the lock's record is gone", ErrNotHeld, dir))
					return
				}
			}
		}
	}()
	fnErr := func() error {
		defer func() { close(stop); <-done }()
		return fn(fctx)
	}()
	unlocked = true
	return errors.Join(fnErr, m.Unlock())
}

// cleanGarbage removes staging and trash directories left by dead
// processes of this host. Failures are ignored: garbage is never read.
func (m *Mutex) cleanGarbage(self Owner) {
	for _, g := range garbage(m.dir, self) {
		if g.Verdict == Dead {
			os.RemoveAll(filepath.Join(m.dir, g.Name))
		}
	}
}

// Leftover is a staging or trash directory in the shared directory.
type Leftover struct {
	Name    string
	Owner   Owner
	Verdict Verdict
}

func garbage(dir string, self Owner) []Leftover {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Leftover
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			rest, ok := strings.CutPrefix(n, stagingPrefx)
			if !ok {
				rest, ok = strings.CutPrefix(n, trashPrefix)
			}
			if !ok {
				continue
			}
			l := Leftover{Name: n}
			if o, ok := parseID(rest); ok {
				l.Owner, l.Verdict = o, judge(o, self)
			}
			out = append(out, l)
		}
		if err != nil || len(names) == 0 {
			return out
		}
	}
}

// exists reports whether a rename failed because the target exists.
func exists(err error) bool {
	return errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, os.ErrExist)
}

// fsError wraps a file-system error; the errors that say the file system
// cannot do the step match ErrNotSupported.
func fsError(dir, step string, err error) error {
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EXDEV) ||
		errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w: %s: %s: %w", ErrNotSupported, dir, step, err)
	}
	return fmt.Errorf("dirlock: %s: %s: %w", dir, step, err)
}

// syncDir makes a rename in dir durable where the file system allows it.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
