// Package rangemirror keeps what one session's range locks are, as the
// server's answers and pushes to that session say, applied in the order
// the server sent them: the locks a re-assertion names after the
// session's server, or its connection, was lost. A relaying cluster node
// keeps one per upstream session (server/rangemove.go), a resumable
// client one per session (the baton package's resume).
//
// The server granted every mirrored lock to one session, so none
// conflicts with another in the mirror.
package rangemirror

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// Mirror is one session's range locks. It is not safe for concurrent
// use.
type Mirror struct {
	table *rangelock.Table
	// Waiting are the sets the server queued, by request id.
	Waiting map[uint32]protocol.Frame
}

// session is the session id of a mirror's locks.
const session rangelock.SessionID = 1

// New returns an empty mirror.
func New() *Mirror {
	return &Mirror{table: rangelock.New(&locktable.CounterTokens{}), Waiting: map[uint32]protocol.Frame{}}
}

// Target returns the namespace, owner (of session sid) and range RANGE
// frame f names.
func Target(f protocol.Frame, sid rangelock.SessionID) (rangelock.Namespace, rangelock.Owner, rangelock.Range) {
	o := rangelock.Owner{Session: sid, ID: rangelock.OwnerID(f.Owner)}
	if f.Flags&protocol.RangeFlock != 0 {
		return rangelock.Flock, o, rangelock.Whole
	}
	return rangelock.POSIX, o, rangelock.Range{Start: f.Start, End: f.End}
}

// Answered applies the server's answer st to RANGE request f. A
// re-assertion (RangeReassert, RangeResume) answered done holds its lock.
func (m *Mirror) Answered(f protocol.Frame, st protocol.RangeStatus) {
	ns, o, r := Target(f, session)
	now := time.Time{}
	switch f.Op {
	case protocol.RangeSet:
		switch {
		case st == protocol.RangeGranted:
			m.Set(f)
		case ns == rangelock.Flock && st != protocol.RangeUnavailable && st != protocol.RangeInvalid && st != protocol.RangeReqInUse:
			// A flock conversion the server did not grant at once has
			// dropped the old lock all the same, as Linux does.
			m.table.Unlock(now, f.Name, ns, o, r)
		}
		if st == protocol.RangeQueued {
			m.Waiting[f.Claim] = f
		}
	case protocol.RangeReassert, protocol.RangeResume:
		if st == protocol.RangeDone {
			m.Set(f)
		}
	case protocol.RangeUnlock:
		if st == protocol.RangeDone {
			m.table.Unlock(now, f.Name, ns, o, r)
		}
	case protocol.RangeRelease:
		if st == protocol.RangeDone {
			m.table.ReleaseOwner(now, f.Name, ns, o)
		}
	}
}

// Pushed applies the server's push st about the set that waited as req.
func (m *Mirror) Pushed(req uint32, st protocol.RangeStatus) {
	f, ok := m.Waiting[req]
	if !ok {
		return
	}
	delete(m.Waiting, req)
	if st == protocol.RangePromoted {
		m.Set(f)
	}
}

// Set adds the lock that set (or re-assertion) f was granted.
func (m *Mirror) Set(f protocol.Frame) {
	ns, o, r := Target(f, session)
	m.table.Set(time.Time{}, rangelock.Request{Key: f.Name, NS: ns, Owner: o, Type: rangelock.Type(f.LockType), Range: r})
}

// Take takes the locks on key out of the mirror.
func (m *Mirror) Take(key string) []rangelock.KeyLock {
	held, _ := m.table.TakeKeys(func(k string) bool { return k == key })
	return held
}

// Put adds locks taken from another mirror, or handed over.
func (m *Mirror) Put(locks []rangelock.KeyLock) {
	for _, kl := range locks {
		kl.Lock.Owner.Session = session
		m.table.Install(kl)
	}
}

// Keys returns the keys the mirror holds locks on.
func (m *Mirror) Keys() []string {
	var keys []string
	for key := range m.table.SessionsOn(func(string) bool { return true }) {
		keys = append(keys, key)
	}
	return keys
}

// Locks returns every lock of the mirror, by key and namespace, and
// keeps them.
func (m *Mirror) Locks() []rangelock.KeyLock {
	held, _ := m.table.TakeKeys(func(string) bool { return true })
	m.Put(held)
	return held
}

// Len returns how many ranges the mirror holds.
func (m *Mirror) Len() int { return m.table.Counts().Ranges }

// Frame is the RANGE frame of op that names held lock kl.
func Frame(op protocol.RangeOp, kl rangelock.KeyLock) protocol.Frame {
	f := protocol.Frame{Op: op, Name: kl.Key, Owner: uint64(kl.Lock.Owner.ID),
		LockType: uint8(kl.Lock.Type), Start: kl.Lock.Range.Start, End: kl.Lock.Range.End}
	if kl.NS == rangelock.Flock {
		f.Flags, f.Start, f.End = protocol.RangeFlock, 0, 0
	}
	return f
}
