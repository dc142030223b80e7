package rangelock

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// SessionID identifies a session, as in package locktable: the failure
// detector of all the locks its owners hold. Closing it releases them.
type SessionID uint64

// OwnerID is a lock owner within its session, chosen by the client: for
// fcntl locks the POSIX lock owner (a process, or an open file
// description for OFD locks), for flock an open file description.
type OwnerID uint64

// Owner is one lock owner. Two requests of the same Owner never conflict
// with each other: a new lock over the owner's own ranges replaces them.
type Owner struct {
	Session SessionID
	ID      OwnerID
}

func (o Owner) String() string { return fmt.Sprintf("s%d/o%d", o.Session, o.ID) }

// Namespace separates fcntl (POSIX) locks from flock locks: as on Linux,
// they never conflict with each other, even on the same key.
type Namespace uint8

const (
	// POSIX is fcntl's byte-range locks (F_SETLK, F_OFD_SETLK and their
	// waiting and query forms).
	POSIX Namespace = iota + 1
	// Flock is flock(2)'s whole-file locks.
	Flock
)

func (n Namespace) String() string {
	switch n {
	case POSIX:
		return "posix"
	case Flock:
		return "flock"
	}
	return "unknown"
}

// Type is a lock's type: Read (F_RDLCK, flock's LOCK_SH) is shared,
// Write (F_WRLCK, LOCK_EX) is exclusive.
type Type uint8

const (
	Read Type = iota + 1
	Write
)

func (t Type) String() string {
	switch t {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "unknown"
}

// MaxOffset is the last byte offset a lock can cover: Linux's OFFSET_MAX
// (the largest loff_t). A range to the end of the file ends here, however
// large the file grows.
const MaxOffset uint64 = math.MaxInt64

// Range is the bytes Start..End, both included, End ≤ MaxOffset.
type Range struct {
	Start, End uint64
}

// Whole is the whole file: what a flock lock covers.
var Whole = Range{0, MaxOffset}

// Span returns the range of length bytes from start, as fcntl's l_start
// and l_len (with l_whence SEEK_SET) give it: length 0 means to the end of
// the file. It returns ErrInvalidRange when the range would end past
// MaxOffset (Linux: EOVERFLOW or EINVAL).
func Span(start, length uint64) (Range, error) {
	if start > MaxOffset {
		return Range{}, ErrInvalidRange
	}
	if length == 0 {
		return Range{start, MaxOffset}, nil
	}
	if length-1 > MaxOffset-start {
		return Range{}, ErrInvalidRange
	}
	return Range{start, start + length - 1}, nil
}

// Len is the range's length as fcntl reports it: 0 for a range to
// MaxOffset (to the end of the file).
func (r Range) Len() uint64 {
	if r.End == MaxOffset {
		return 0
	}
	return r.End - r.Start + 1
}

func (r Range) valid() bool { return r.Start <= r.End && r.End <= MaxOffset }

func (r Range) overlaps(o Range) bool { return r.Start <= o.End && o.Start <= r.End }

func (r Range) String() string {
	if r.End == MaxOffset {
		return fmt.Sprintf("[%d,EOF]", r.Start)
	}
	return fmt.Sprintf("[%d,%d]", r.Start, r.End)
}

// Request is a lock request (fcntl F_SETLK/F_SETLKW, flock LOCK_SH or
// LOCK_EX) as the table sees it.
type Request struct {
	Key   string // the file: a path, or an inode id shared by its hard links
	NS    Namespace
	Owner Owner
	Type  Type
	Range Range // POSIX only; a flock lock is always Whole
	// Wait queues the request when it cannot be granted at once (F_SETLKW,
	// flock without LOCK_NB); otherwise it is answered Conflict.
	Wait bool
	// Tag names a waiting request within its session, chosen by the
	// caller: its Grant carries it, and Cancel takes it. It must not be in
	// use by another waiting request of the session.
	Tag uint64
}

// State is how a request was answered.
type State uint8

const (
	// Granted: the lock is held, with Answer.Token.
	Granted State = iota + 1
	// Conflict answers a request without Wait that cannot be granted at
	// once (EAGAIN); nothing changed, except that a flock conversion has
	// dropped the old lock, as on Linux.
	Conflict
	// Waiting: the request is queued; its grant comes later as a Grant
	// effect.
	Waiting
)

func (s State) String() string {
	switch s {
	case Granted:
		return "granted"
	case Conflict:
		return "conflict"
	case Waiting:
		return "waiting"
	}
	return "none"
}

// Lock is one held range (or, in a Conflict answer, possibly a waiting
// request that the new one would overtake).
type Lock struct {
	Owner Owner
	Type  Type
	Range Range
	// Waiting is set in a Conflict answer when no holder conflicts and the
	// request was refused because it would overtake this earlier, waiting
	// request (FIFO).
	Waiting bool
}

func (l Lock) String() string {
	s := fmt.Sprintf("%v %v %v", l.Owner, l.Type, l.Range)
	if l.Waiting {
		s += " (waiting)"
	}
	return s
}

// Answer is the table's reply to Set.
type Answer struct {
	State State
	Token uint64 // Granted: the fencing token of this grant
	// Conflict, in a Conflict answer, is the first conflicting holder in
	// the order Query uses, or else the earliest conflicting waiter.
	Conflict Lock
}

// Waiter describes a waiting request.
type Waiter struct {
	Owner Owner
	Tag   uint64
	Type  Type
	Range Range
	Since time.Time
}

// Grant is a promotion: a waiting request was granted and its session
// must be told (the push frame).
type Grant struct {
	Key    string
	NS     Namespace
	Owner  Owner
	Tag    uint64
	Type   Type
	Range  Range
	Token  uint64
	Waited time.Duration
	// NoWait marks the grant of a request made without Wait before the
	// token gate (gate.go): its answer, not a promotion.
	NoWait bool
}

// Cancelled is a waiting request that was removed without a grant
// (release-owner, close-session, Cancel); its session, if it lives on,
// answers the request with an error.
type Cancelled struct {
	Key   string
	NS    Namespace
	Owner Owner
	Tag   uint64
}

// Cause says which operation ended a held lock (Released).
type Cause uint8

const (
	// CauseUnlock: F_UNLCK or LOCK_UN (Unlock).
	CauseUnlock Cause = iota + 1
	// CauseRelease: the owner's locks on the key were dropped
	// (ReleaseOwner): its file was closed, or an operator released them.
	CauseRelease
	// CauseConvert: a flock conversion dropped the owner's old lock.
	CauseConvert
	// CauseSession: the owner's session ended (CloseSession).
	CauseSession
)

func (c Cause) String() string {
	switch c {
	case CauseUnlock:
		return "unlock"
	case CauseRelease:
		return "release"
	case CauseConvert:
		return "convert"
	case CauseSession:
		return "session"
	}
	return "unknown"
}

// Released reports that an owner's held lock on a key ended, wholly or
// in part: one per operation and owner and key (an unlock, a
// release-owner, a flock conversion, each owner of a closed session),
// never one per byte or per range. An operation that finds nothing held
// in its range reports none.
type Released struct {
	Key   string
	NS    Namespace
	Owner Owner
	// Type is Write when the owner held some of the released bytes for
	// writing, else Read.
	Type Type
	// Range spans the bytes released: from the first to the last byte
	// the owner held in the operation's range (which may leave holes the
	// owner did not hold).
	Range Range
	// Ranges is how many of the owner's held ranges ended or were cut.
	Ranges int
	Cause  Cause
}

// Result is what an operation requires of the caller, in order: the
// Released come first, since they happened before the grants they
// allowed.
type Result struct {
	Grants    []Grant
	Cancelled []Cancelled
	Released  []Released
}

// Limits bound what one session can make the table hold and how long a
// deadlock search may run. A zero cap is no cap; a zero SearchBound is
// DefaultSearchBound. A request refused by a limit changes nothing, as
// one answered ErrDeadlock (a flock conversion has dropped its old lock
// first, as Linux does).
type Limits struct {
	WaitingPerSession int // waiting requests of one session (ErrSessionWaiting)
	WaitingPerOwner   int // waiting requests of one owner (ErrOwnerWaiting)
	OwnersPerSession  int // owners of one session that hold or wait (ErrOwners)
	SearchBound       int // holders and waiters one deadlock search examines (ErrSearchBound)
}

func (l Limits) searchBound() int {
	if l.SearchBound <= 0 {
		return DefaultSearchBound
	}
	return l.SearchBound
}

// Errors returned by Table operations. A request answered with an error
// changes nothing, except that a refused flock conversion has dropped the
// old lock first, as Linux does.
var (
	ErrInvalidKey       = errors.New("rangelock: empty key")
	ErrInvalidNamespace = errors.New("rangelock: unknown namespace")
	ErrInvalidType      = errors.New("rangelock: unknown lock type")
	ErrInvalidRange     = errors.New("rangelock: range is empty or ends past the largest offset")
	ErrTagExists        = errors.New("rangelock: the session already has a waiting request with this tag")
	ErrNoWaiter         = errors.New("rangelock: no such waiting request")
	// ErrDeadlock refuses a waiting request that would close a cycle in
	// the wait-for graph (EDEADLK).
	ErrDeadlock = errors.New("rangelock: waiting would deadlock")
	// ErrSearchBound is an ErrDeadlock answered because the deadlock
	// search reached Limits.SearchBound before it could tell; as Linux
	// does, the request is refused rather than risk a cycle.
	ErrSearchBound = fmt.Errorf("%w (the wait-for search reached its bound)", ErrDeadlock)
	// ErrSessionWaiting refuses a waiting request of a session that has
	// Limits.WaitingPerSession waiting requests already.
	ErrSessionWaiting = errors.New("rangelock: the session has too many waiting requests")
	// ErrOwnerWaiting refuses a waiting request of an owner that has
	// Limits.WaitingPerOwner waiting requests already.
	ErrOwnerWaiting = errors.New("rangelock: the owner has too many waiting requests")
	// ErrOwners refuses a request of a new owner in a session that has
	// Limits.OwnersPerSession owners (holding or waiting) already.
	ErrOwners = errors.New("rangelock: the session has too many lock owners")
	// ErrConflict refuses to install a handed-over range that conflicts
	// with another owner's (Install).
	ErrConflict = errors.New("rangelock: the range conflicts with another owner's")
)
