package modelcheck

import (
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Mutations of the claims model: each wraps the real table so that it
// breaks one rule the way a real bug could, and the checker must report
// that rule with a shortest counterexample (see TestClaimsMutantsAreCaught
// and modelcheck -model=claims -mutation=...).
const (
	// MutReaderOvertakes grants a shared claim beside shared holders even
	// though a writer waits: readers overtake a queued writer.
	MutReaderOvertakes = "reader-overtakes"
	// MutSemaphoreOverLimit grants a semaphore claim when the name already
	// has its limit of holders.
	MutSemaphoreOverLimit = "semaphore-over-limit"
)

// Mutations of the watch part of the claims model (ClaimsConfig.Watches
// and Values): each edits the frames the real table returns to its
// watches, as a bug in its watch code would (see watchMutant).
const (
	// MutGrantUntold: a grant is not told to the name's watches.
	MutGrantUntold = "grant-untold"
	// MutFreedAfterGrant: a holder's end is told after the grant it
	// made possible, not before: changes out of the table's order.
	MutFreedAfterGrant = "freed-after-grant"
	// MutGrantsReversed: the grants of one operation (readers admitted
	// together) are told newest first.
	MutGrantsReversed = "grants-reversed"
	// MutValueUntold: a holder's value change is not told.
	MutValueUntold = "value-untold"
	// MutUnwatchKept: a watch ended by its session is still told the
	// changes of its name.
	MutUnwatchKept = "unwatch-kept"
)

// ClaimsMutations lists the mutations of the claims model.
var ClaimsMutations = []string{MutReaderOvertakes, MutSemaphoreOverLimit,
	MutGrantUntold, MutFreedAfterGrant, MutGrantsReversed, MutValueUntold, MutUnwatchKept}

// NewClaimsMutant returns a fresh real table wrapped with mutation, or
// nil for an unknown mutation.
func NewClaimsMutant(mutation string) func() ClaimsTable {
	var wrong func(li locktable.LockInfo, req locktable.ClaimRequest) bool
	switch mutation {
	case MutReaderOvertakes:
		wrong = func(li locktable.LockInfo, req locktable.ClaimRequest) bool {
			if req.Mode != locktable.Shared || len(li.Waiters) == 0 {
				return false
			}
			for _, h := range li.Holders {
				if h.Mode != locktable.Shared {
					return false
				}
			}
			return true
		}
	case MutSemaphoreOverLimit:
		wrong = func(li locktable.LockInfo, req locktable.ClaimRequest) bool {
			return req.Mode == locktable.Semaphore && len(li.Waiters) == 0 && len(li.Holders) == int(li.Limit)
		}
	case MutGrantUntold, MutFreedAfterGrant, MutGrantsReversed, MutValueUntold, MutUnwatchKept:
		return func() ClaimsTable { return newWatchMutant(mutation) }
	default:
		return nil
	}
	return func() ClaimsTable {
		return &shadowGrant{Table: locktable.New(&locktable.CounterTokens{}), wrong: wrong}
	}
}

// shadowGrant grants the claims for which wrong is true at once, against
// the rules: it takes them on a shadow name nobody else uses and reports
// the grant under the real name.
type shadowGrant struct {
	*locktable.Table
	wrong func(li locktable.LockInfo, req locktable.ClaimRequest) bool
}

const shadowSuffix = "~shadow"

func (m *shadowGrant) Claim(now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result, error) {
	li, held := m.Table.Lock(req.Name)
	if !held || !m.wrong(li, req) {
		return m.Table.Claim(now, sid, cid, req)
	}
	name := req.Name
	req.Name += shadowSuffix
	st, res, err := m.Table.Claim(now, sid, cid, req)
	for i := range res.Events {
		res.Events[i].Lock = name
	}
	return st, res, err
}

// watchMutant wraps the real table and edits the frames each operation
// returns for watches: it drops or reorders changes, or copies them to a
// watch that has ended. Watch's own answer (the state a watch starts
// with) is left alone.
type watchMutant struct {
	*locktable.Table
	mutation string
	names    map[locktable.Key]string // every watch started: its name
	gone     []locktable.Key          // watches ended by Release, in order
}

func newWatchMutant(mutation string) *watchMutant {
	return &watchMutant{Table: locktable.New(&locktable.CounterTokens{}), mutation: mutation, names: map[locktable.Key]string{}}
}

// edit applies the mutation to one operation's result.
func (m *watchMutant) edit(res locktable.Result) locktable.Result {
	is := func(s locktable.Send, kind protocol.ChangeKind) bool {
		return s.Kind == locktable.SendChange && s.Change.Kind == kind
	}
	key := func(s locktable.Send) locktable.Key { return locktable.Key{Session: s.Session, Claim: s.Claim} }
	var out []locktable.Send
	switch m.mutation {
	case MutGrantUntold:
		out = slices.DeleteFunc(res.Sends, func(s locktable.Send) bool { return is(s, protocol.ChangeHeld) })
	case MutValueUntold:
		out = slices.DeleteFunc(res.Sends, func(s locktable.Send) bool { return is(s, protocol.ChangeValue) })
	case MutFreedAfterGrant:
		// Hold each freed change back until the next held change to the
		// same watch, when there is one.
		held := map[locktable.Key][]locktable.Send{}
		for i, s := range res.Sends {
			k := key(s)
			switch {
			case is(s, protocol.ChangeFreed) && slices.ContainsFunc(res.Sends[i+1:], func(n locktable.Send) bool {
				return key(n) == k && is(n, protocol.ChangeHeld)
			}):
				held[k] = append(held[k], s)
			case is(s, protocol.ChangeHeld):
				out = append(append(out, s), held[k]...)
				delete(held, k)
			default:
				out = append(out, s)
			}
		}
	case MutGrantsReversed:
		// Each watch's held changes swap places, last first.
		out = res.Sends
		at := map[locktable.Key][]int{}
		for i, s := range out {
			if is(s, protocol.ChangeHeld) {
				at[key(s)] = append(at[key(s)], i)
			}
		}
		for _, idx := range at {
			for i, j := 0, len(idx)-1; i < j; i, j = i+1, j-1 {
				out[idx[i]], out[idx[j]] = out[idx[j]], out[idx[i]]
			}
		}
	case MutUnwatchKept:
		for _, s := range res.Sends {
			out = append(out, s)
			if s.Kind != locktable.SendChange {
				continue
			}
			for _, g := range m.gone {
				if g != key(s) && m.names[g] == m.names[key(s)] {
					c := s
					c.Session, c.Claim = g.Session, g.Claim
					out = append(out, c)
				}
			}
		}
	}
	res.Sends = out
	return res
}

func (m *watchMutant) Watch(now time.Time, sid locktable.SessionID, wid locktable.ClaimID, name string) (locktable.Result, error) {
	res, err := m.Table.Watch(now, sid, wid, name)
	if err == nil {
		m.names[locktable.Key{Session: sid, Claim: wid}] = name
	}
	return res, err
}

func (m *watchMutant) Claim(now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result, error) {
	st, res, err := m.Table.Claim(now, sid, cid, req)
	return st, m.edit(res), err
}

func (m *watchMutant) Release(now time.Time, k locktable.Key) (locktable.Result, error) {
	if m.Table.Watching(k.Session, k.Claim) {
		m.gone = append(m.gone, k)
	}
	res, err := m.Table.Release(now, k)
	return m.edit(res), err
}

func (m *watchMutant) CloseSession(now time.Time, sid locktable.SessionID, reason locktable.Reason) locktable.Result {
	return m.edit(m.Table.CloseSession(now, sid, reason))
}

func (m *watchMutant) ExpireSession(now time.Time, sid locktable.SessionID) (locktable.Result, error) {
	res, err := m.Table.ExpireSession(now, sid)
	return m.edit(res), err
}

func (m *watchMutant) ForceReleaseClaim(now time.Time, name string, k locktable.Key) (locktable.Result, error) {
	res, err := m.Table.ForceReleaseClaim(now, name, k)
	return m.edit(res), err
}

func (m *watchMutant) KickClaim(now time.Time, name string, k locktable.Key) (locktable.Result, error) {
	res, err := m.Table.KickClaim(now, name, k)
	return m.edit(res), err
}

func (m *watchMutant) Revoke(now time.Time, allow func(p locktable.Peer, lock string) bool, owners bool) locktable.Result {
	return m.edit(m.Table.Revoke(now, allow, owners))
}

func (m *watchMutant) Shutdown(now time.Time) locktable.Result {
	return m.edit(m.Table.Shutdown(now))
}

func (m *watchMutant) SetValue(now time.Time, k locktable.Key, value string) (locktable.Result, error) {
	res, err := m.Table.SetValue(now, k, value)
	return m.edit(res), err
}
