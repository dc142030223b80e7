package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Status is what Inspect finds in a shared directory.
type Status struct {
	Dir string
	// Held: the lock directory exists.
	Held bool
	// Entry is the lock directory's one entry ("" if Held and it has no
	// readable entry: NoRecord), Kind its kind: "owner" (held), "release"
	// (being released), "break" (being broken: its process found the
	// previous holder dead).
	Entry, Kind string
	NoRecord    bool
	Owner       Owner   // the process the entry names
	Verdict     Verdict // as judged from this host
	Record      string  // the entry file's contents, for people
	// Self is this process's host identity, for comparison.
	Self Owner
	// Leftovers are staging and trash directories of crashed (or
	// running) acquisitions and releases: not the lock.
	Leftovers []Leftover
}

// Inspect reads the lock in dir without changing anything.
func Inspect(dir string) (Status, error) {
	self, err := selfIdentity()
	if err != nil {
		return Status{}, err
	}
	st := Status{Dir: dir, Self: self}
	if _, err := os.Stat(dir); err != nil {
		return st, fmt.Errorf("dirlock: %w", err)
	}
	entry, o, v, err := readLock(dir, self)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return st, err
	default:
		st.Held, st.Entry, st.Owner, st.Verdict = true, entry, o, v
		st.NoRecord = entry == ""
		if entry != "" {
			st.Kind, _, _ = strings.Cut(entry, ".")
			if b, err := os.ReadFile(filepath.Join(dir, LockName, entry)); err == nil {
				st.Record = string(b)
			}
		}
	}
	st.Leftovers = garbage(dir, self)
	return st, nil
}

// Break frees the lock in dir for an operator. Without force it does so
// only if the entry's process is provably dead on this host (what any
// Lock on this host would do); otherwise it returns a *HeldError. With
// force it frees whatever is there: the holder, if alive, is no longer
// protected (its Unlock returns ErrNotHeld, Do cancels fn's context).
// It returns the status it acted on; a lock that is not held is not an
// error (Held is false).
func Break(dir string, force bool) (Status, error) {
	st, err := Inspect(dir)
	if err != nil || !st.Held {
		return st, err
	}
	if !force && (st.NoRecord || st.Verdict != Dead) {
		return st, heldError(dir, st.Entry, st.Owner, st.Verdict)
	}
	if st.NoRecord {
		return st, moveLockAway(dir, st.Self.withNonce())
	}
	self := st.Self.withNonce()
	lock := filepath.Join(dir, LockName)
	err = os.Rename(filepath.Join(lock, st.Entry), filepath.Join(lock, kindBreak+"."+self.id()))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return st, fmt.Errorf("dirlock: %s: the lock changed while breaking it; look again", dir)
		}
		return st, fsError(dir, "claim entry", err)
	}
	return st, removeLock(dir, kindBreak+"."+self.id(), self)
}
