package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// rangeMirror is what a relaying node knows of the range locks an owner
// holds for one upstream session: the owner's answers and pushes applied
// in the order the owner sent them, so that after a failover the node
// can re-assert exactly those locks at the key's next owner
// (rangemove.go). The owner granted every mirrored lock at once to one
// session, so none conflicts with another in the mirror.
type rangeMirror struct {
	table   *rangelock.Table
	waiting map[uint32]protocol.Frame // sets the owner queued, by req
}

// mirrorSession is the session id of a mirror's locks.
const mirrorSession rangelock.SessionID = 1

func newRangeMirror() *rangeMirror {
	return &rangeMirror{table: rangelock.New(&locktable.CounterTokens{}), waiting: map[uint32]protocol.Frame{}}
}

// rangeTarget returns the namespace, owner and range RANGE frame f names.
func rangeTarget(f protocol.Frame, sid rangelock.SessionID) (rangelock.Namespace, rangelock.Owner, rangelock.Range) {
	o := rangelock.Owner{Session: sid, ID: rangelock.OwnerID(f.Owner)}
	if f.Flags&protocol.RangeFlock != 0 {
		return rangelock.Flock, o, rangelock.Whole
	}
	return rangelock.POSIX, o, rangelock.Range{Start: f.Start, End: f.End}
}

// answered applies the owner's answer st to RANGE request f.
func (m *rangeMirror) answered(f protocol.Frame, st protocol.RangeStatus) {
	ns, o, r := rangeTarget(f, mirrorSession)
	now := time.Time{}
	switch f.Op {
	case protocol.RangeSet:
		switch {
		case st == protocol.RangeGranted:
			m.set(f)
		case ns == rangelock.Flock && st != protocol.RangeUnavailable && st != protocol.RangeInvalid && st != protocol.RangeReqInUse:
			// A flock conversion the owner did not grant at once has
			// dropped the old lock all the same, as Linux does.
			m.table.Unlock(now, f.Name, ns, o, r)
		}
		if st == protocol.RangeQueued {
			m.waiting[f.Claim] = f
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

// pushed applies the owner's push st about the set that waited as req.
func (m *rangeMirror) pushed(req uint32, st protocol.RangeStatus) {
	f, ok := m.waiting[req]
	if !ok {
		return
	}
	delete(m.waiting, req)
	if st == protocol.RangePromoted {
		m.set(f)
	}
}

// set adds the lock set f was granted.
func (m *rangeMirror) set(f protocol.Frame) {
	ns, o, r := rangeTarget(f, mirrorSession)
	m.table.Set(time.Time{}, rangelock.Request{Key: f.Name, NS: ns, Owner: o, Type: rangelock.Type(f.LockType), Range: r})
}

// take takes the locks on key out of the mirror.
func (m *rangeMirror) take(key string) []rangelock.KeyLock {
	held, _ := m.table.TakeKeys(func(k string) bool { return k == key })
	return held
}

// put adds locks taken from another mirror, or handed over.
func (m *rangeMirror) put(locks []rangelock.KeyLock) {
	for _, kl := range locks {
		kl.Lock.Owner.Session = mirrorSession
		m.table.Install(kl)
	}
}

// keys returns the keys the mirror holds locks on.
func (m *rangeMirror) keys() []string {
	var keys []string
	for key := range m.table.SessionsOn(func(string) bool { return true }) {
		keys = append(keys, key)
	}
	return keys
}
