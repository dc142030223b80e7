//go:build linux

package rangelock_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// The kernel is the oracle: TestKernelOracle applies the same random
// sequences of non-blocking operations to a Table and to the running
// kernel, and requires the same outcome at every step. The owners are
// separate open file descriptions of one temporary file: fcntl locks with
// F_OFD_SETLK and F_OFD_GETLK, and flock with LOCK_NB, on the same
// descriptors (the two namespaces are separate in both). On a mismatch
// rapid shrinks the sequence and prints the shortest one it finds.
//
// kernelChecks sequences of about 30 steps run by default; RAPID_CHECKS
// (or -args -rapid.checks=N) overrides it.
const kernelChecks = 2000

const (
	oracleOwners = 4 // owners 0 and 1 share session 1, 2 and 3 session 2
	oracleKey    = "file"
)

func TestKernelOracle(t *testing.T) {
	setRapidChecks(t, kernelChecks)
	dir := t.TempDir()
	n := 0
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		n++
		o := newOracle(rt, filepath.Join(dir, fmt.Sprintf("f%d", n)))
		defer o.closeAll()
		rt.Repeat(map[string]func(*rapid.T){
			"setlk":   o.setlk,
			"unlock":  o.unlock,
			"getlk":   o.getlk,
			"flock":   o.flock,
			"close":   o.close,
			"closeSS": o.closeSession,
		})
	})
	t.Logf("%d sequences against the kernel in %v", n, time.Since(start).Round(time.Millisecond))
}

// setRapidChecks sets rapid's number of checks unless the command line
// or the environment chose one, and keeps rapid from writing fail files
// into the source tree (the shrunk sequence is printed in any case).
func setRapidChecks(t *testing.T, n int) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set["rapid.checks"] && !env {
		if err := flag.Set("rapid.checks", fmt.Sprint(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := flag.Set("rapid.nofailfile", "true"); err != nil {
		t.Fatal(err)
	}
}

type oracle struct {
	path  string
	fds   [oracleOwners]int
	table *rangelock.Table
	now   time.Time
}

func newOracle(t *rapid.T, path string) *oracle {
	o := &oracle{path: path, table: rangelock.New(&locktable.CounterTokens{}), now: time.Unix(1e9, 0)}
	for i := range o.fds {
		o.fds[i] = -1
		o.reopen(t, i)
	}
	return o
}

func (o *oracle) reopen(t *rapid.T, i int) {
	if o.fds[i] >= 0 {
		if err := unix.Close(o.fds[i]); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	fd, err := unix.Open(o.path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	o.fds[i] = fd
}

func (o *oracle) closeAll() {
	for _, fd := range o.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func owner(i int) rangelock.Owner {
	return rangelock.Owner{Session: rangelock.SessionID(i/2 + 1), ID: rangelock.OwnerID(i + 1)}
}

// span draws a range the way fcntl takes it: small offsets, so ranges
// overlap often, and a few near the largest offset, where a length can
// overflow.
func span(t *rapid.T) (start, length int64) {
	s := rapid.IntRange(0, 14).Draw(t, "start")
	start = int64(s)
	switch s {
	case 13:
		start = math.MaxInt64 - 3
	case 14:
		start = math.MaxInt64
	}
	return start, int64(rapid.IntRange(0, 6).Draw(t, "len"))
}

func lockType(t *rapid.T) (int16, rangelock.Type) {
	if rapid.Bool().Draw(t, "write") {
		return unix.F_WRLCK, rangelock.Write
	}
	return unix.F_RDLCK, rangelock.Read
}

type outcome string

const (
	granted  outcome = "granted"
	conflict outcome = "conflict"
	invalid  outcome = "invalid"
)

func kernelOutcome(t *rapid.T, err error) outcome {
	switch {
	case err == nil:
		return granted
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		return conflict
	case errors.Is(err, unix.EOVERFLOW), errors.Is(err, unix.EINVAL):
		return invalid
	}
	t.Fatalf("kernel: unexpected error %v", err)
	return ""
}

func (o *oracle) setlk(t *rapid.T) {
	i := rapid.IntRange(0, oracleOwners-1).Draw(t, "owner")
	kt, tt := lockType(t)
	start, length := span(t)
	lk := unix.Flock_t{Type: kt, Whence: 0, Start: start, Len: length}
	kernel := kernelOutcome(t, unix.FcntlFlock(uintptr(o.fds[i]), unix.F_OFD_SETLK, &lk))
	var table outcome
	r, err := rangelock.Span(uint64(start), uint64(length))
	if err != nil {
		table = invalid
	} else {
		ans, res, err := o.table.Set(o.now, rangelock.Request{Key: oracleKey, NS: rangelock.POSIX, Owner: owner(i), Type: tt, Range: r})
		if err != nil || len(res.Grants)+len(res.Cancelled) > 0 {
			t.Fatalf("table: Set: %+v, %v", res, err)
		}
		table = granted
		if ans.State == rangelock.Conflict {
			table = conflict
			q, ok, _ := o.table.Query(oracleKey, rangelock.POSIX, owner(i), tt, r)
			if !ok || q != ans.Conflict {
				t.Fatalf("table: Set answered conflict with %v, but Query says %v, %v", ans.Conflict, q, ok)
			}
		}
	}
	if kernel != table {
		t.Fatalf("owner %d %v lock start %d len %d: kernel %s, table %s; table holds %v", i, tt, start, length, kernel, table, o.table.Holders(oracleKey, rangelock.POSIX))
	}
}

func (o *oracle) unlock(t *rapid.T) {
	i := rapid.IntRange(0, oracleOwners-1).Draw(t, "owner")
	start, length := span(t)
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: start, Len: length}
	kernel := kernelOutcome(t, unix.FcntlFlock(uintptr(o.fds[i]), unix.F_OFD_SETLK, &lk))
	table := granted
	if r, err := rangelock.Span(uint64(start), uint64(length)); err != nil {
		table = invalid
	} else if res, err := o.table.Unlock(o.now, oracleKey, rangelock.POSIX, owner(i), r); err != nil || len(res.Grants)+len(res.Cancelled) > 0 {
		t.Fatalf("table: Unlock: %+v, %v", res, err)
	}
	if kernel != table {
		t.Fatalf("owner %d unlock start %d len %d: kernel %s, table %s", i, start, length, kernel, table)
	}
}

func (o *oracle) getlk(t *rapid.T) {
	i := rapid.IntRange(0, oracleOwners-1).Draw(t, "owner")
	kt, tt := lockType(t)
	start, length := span(t)
	lk := unix.Flock_t{Type: kt, Whence: 0, Start: start, Len: length}
	err := unix.FcntlFlock(uintptr(o.fds[i]), unix.F_OFD_GETLK, &lk)
	kernel := string(kernelOutcome(t, err))
	if err == nil {
		kernel = "none"
		if lk.Type != unix.F_UNLCK {
			kernel = fmt.Sprintf("type %d start %d len %d", lk.Type, lk.Start, lk.Len)
		}
	}
	table := string(invalid)
	if r, err := rangelock.Span(uint64(start), uint64(length)); err == nil {
		l, ok, err := o.table.Query(oracleKey, rangelock.POSIX, owner(i), tt, r)
		if err != nil {
			t.Fatalf("table: Query: %v", err)
		}
		table = "none"
		if ok {
			typ := int16(unix.F_RDLCK)
			if l.Type == rangelock.Write {
				typ = unix.F_WRLCK
			}
			table = fmt.Sprintf("type %d start %d len %d", typ, l.Range.Start, l.Range.Len())
		}
	}
	if kernel != table {
		t.Fatalf("owner %d getlk %v start %d len %d: kernel %s, table %s; table holds %v", i, tt, start, length, kernel, table, o.table.Holders(oracleKey, rangelock.POSIX))
	}
}

func (o *oracle) flock(t *rapid.T) {
	i := rapid.IntRange(0, oracleOwners-1).Draw(t, "owner")
	op := rapid.SampledFrom([]string{"sh", "ex", "un"}).Draw(t, "op")
	how := map[string]int{"sh": unix.LOCK_SH, "ex": unix.LOCK_EX, "un": unix.LOCK_UN}[op]
	err := unix.Flock(o.fds[i], how|unix.LOCK_NB)
	kernel := granted
	if errors.Is(err, unix.EWOULDBLOCK) {
		kernel = conflict
	} else if err != nil {
		t.Fatalf("flock: %v", err)
	}
	table := granted
	if op == "un" {
		if res, err := o.table.Unlock(o.now, oracleKey, rangelock.Flock, owner(i), rangelock.Whole); err != nil || len(res.Grants)+len(res.Cancelled) > 0 {
			t.Fatalf("table: Unlock: %+v, %v", res, err)
		}
	} else {
		typ := rangelock.Read
		if op == "ex" {
			typ = rangelock.Write
		}
		ans, res, err := o.table.Set(o.now, rangelock.Request{Key: oracleKey, NS: rangelock.Flock, Owner: owner(i), Type: typ})
		if err != nil || len(res.Grants)+len(res.Cancelled) > 0 {
			t.Fatalf("table: Set: %+v, %v", res, err)
		}
		if ans.State == rangelock.Conflict {
			table = conflict
		}
	}
	if kernel != table {
		t.Fatalf("owner %d flock %s: kernel %s, table %s; table holds %v", i, op, kernel, table, o.table.Holders(oracleKey, rangelock.Flock))
	}
}

// close closes one owner's descriptor: every lock of its open file
// description goes, in both namespaces. It then opens the file again, as
// a new description with no locks.
func (o *oracle) close(t *rapid.T) {
	i := rapid.IntRange(0, oracleOwners-1).Draw(t, "owner")
	o.reopen(t, i)
	for _, ns := range []rangelock.Namespace{rangelock.POSIX, rangelock.Flock} {
		if res, err := o.table.ReleaseOwner(o.now, oracleKey, ns, owner(i)); err != nil || len(res.Grants)+len(res.Cancelled) > 0 {
			t.Fatalf("table: ReleaseOwner: %+v, %v", res, err)
		}
	}
}

// closeSession closes the descriptors of both owners of one session.
func (o *oracle) closeSession(t *rapid.T) {
	s := rapid.IntRange(0, oracleOwners/2-1).Draw(t, "session")
	o.reopen(t, 2*s)
	o.reopen(t, 2*s+1)
	if res := o.table.CloseSession(o.now, rangelock.SessionID(s+1)); len(res.Grants)+len(res.Cancelled) > 0 {
		t.Fatalf("table: CloseSession: %+v", res)
	}
}
