package modelcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Values and watches in the claims model (ClaimsConfig.Watches and
// Values). A watch's picture of its name is built only from the
// SendChange frames the table returns for it, frame by frame, the way a
// client builds it; the checker compares it with its own record of the
// holders after every step and checks each intermediate picture as it
// forms.

// Property names of the watch part of the claims model.
const (
	PropWatchPicture = "each watch's picture, built only from the changes it was sent, is its name's holders in grant order, with their values"
	PropWatchOrder   = "a watch never passes through a picture the table never had: each holder it is told has a token above every one told before, and an exclusive holder is alone"
	PropWatchEnded   = "a watch is told nothing after it ends"
)

// watchBase is above every claim id the model uses (the refused claims'
// id is at most 7), so a watch id never names a claim.
const watchBase = 10

// claimValues are the values a claim may carry: with
// ClaimsConfig.Values every claim is made with the first, and may change
// it once to the second (held, the change is told; queued, its grant
// carries it). Claims without a value are the configurations without
// Values. Two values keep the state space small.
var claimValues = [2]string{"p", "q"}

// valueCode encodes a value in the canonical state.
func valueCode(v string) byte {
	switch v {
	case "":
		return 0
	case claimValues[0]:
		return 1
	case claimValues[1]:
		return 2
	}
	return 3
}

// wRec is one watch as the checker records it: its picture of the name,
// built from the frames it was sent.
type wRec struct {
	s      int
	id     locktable.ClaimID
	lock   int
	ended  bool
	synced bool
	pic    []protocol.Change // ChangeHeld frames, as told and updated
	told   uint64            // the largest holder token told so far
}

func (w *wRec) String() string { return fmt.Sprintf("s%d/w%d", w.s+1, w.id) }

// watchOf returns the watch (ended or not) with key k, or nil.
func (r *claimsRun) watchOf(k locktable.Key) *wRec {
	for _, w := range r.watches {
		if claimsSession(w.s) == k.Session && w.id == k.Claim {
			return w
		}
	}
	return nil
}

// liveWatches returns the live watches of session s (every session when
// s is -1), in the order they began.
func (r *claimsRun) liveWatches(s int) []*wRec {
	var out []*wRec
	for _, w := range r.watches {
		if !w.ended && (s < 0 || w.s == s) {
			out = append(out, w)
		}
	}
	return out
}

// endWatches records that session s's watches ended.
func (r *claimsRun) endWatches(s int) {
	for _, w := range r.liveWatches(s) {
		w.ended = true
	}
}

// allEnded checks that op ended every watch of ws.
func (r *claimsRun) allEnded(ws []*wRec, op string) *failure {
	for _, w := range ws {
		if !w.ended {
			return fail(PropConsistent, "%s should have ended %s, but the table sent it no error", op, w)
		}
	}
	return nil
}

// watchOps appends the watch and value steps of open session s.
func (r *claimsRun) watchOps(ops []claimsOp, s int) []claimsOp {
	if r.sess[s].watched < r.cfg.Watches {
		for l := range r.cfg.RW + r.cfg.Sems {
			ops = append(ops, claimsOp{kind: cWatch, s: int8(s), l: int8(l)})
		}
	}
	live := r.liveWatches(s)
	for _, w := range live {
		ops = append(ops, claimsOp{kind: cUnwatch, s: int8(s), c: int8(w.id)})
	}
	if len(live) > 0 {
		ops = append(ops, claimsOp{kind: cEndWatches, s: int8(s)})
	}
	return ops
}

// watchStep applies a watch or value step.
func (r *claimsRun) watchStep(op claimsOp) (line string, f *failure) {
	s := int(op.s)
	ss := r.sess[s]
	sid := claimsSession(s)
	var res locktable.Result
	switch op.kind {
	case cWatch:
		ss.watched++
		w := &wRec{s: s, id: locktable.ClaimID(watchBase + ss.watched), lock: int(op.l)}
		r.watches = append(r.watches, w)
		var err error
		res, err = r.t.Watch(r.now, sid, w.id, r.lockName(w.lock))
		if r.describe {
			line = fmt.Sprintf("%s watches %q", w, r.lockName(w.lock))
		}
		if err != nil {
			return line, fail(PropConsistent, "watch %s of %q failed: %v", w, r.lockName(w.lock), err)
		}
		ss.lastSeen = r.now
	case cUnwatch:
		w := r.watchOf(locktable.Key{Session: sid, Claim: locktable.ClaimID(op.c)})
		var err error
		res, err = r.t.Release(r.now, locktable.Key{Session: sid, Claim: w.id})
		if r.describe {
			line = fmt.Sprintf("%s ends its watch", w)
		}
		if err != nil {
			return line, fail(PropConsistent, "release of watch %s failed: %v", w, err)
		}
		w.ended = true
		ss.lastSeen = r.now
	case cEndWatches:
		live := r.liveWatches(s)
		ids := r.t.EndWatches(sid)
		if r.describe {
			line = fmt.Sprintf("the server ends s%d's watches (it fell behind)", s+1)
		}
		var want []locktable.ClaimID
		for _, w := range live {
			want = append(want, w.id)
			w.ended = true
		}
		if !slices.Equal(ids, want) {
			return line, fail(PropConsistent, "EndWatches of s%d returned %v, want %v", s+1, ids, want)
		}
		return line, nil
	case cSetValue:
		c := r.find(locktable.Key{Session: sid, Claim: locktable.ClaimID(op.c)})
		c.value = claimValues[1]
		var err error
		res, err = r.t.SetValue(r.now, c.key(), c.value)
		if r.describe {
			line = fmt.Sprintf("%s sets its value to %q", c, c.value)
		}
		if err != nil {
			return line, fail(PropConsistent, "value change of live %s failed: %v", c, err)
		}
		ss.lastSeen = r.now
	}
	if r.describe && len(res.Events)+len(res.Sends) > 0 {
		line += " → " + r.formatResult(res)
	}
	return line, r.apply(res, nil, 0, 0, false)
}

// watchSends applies, in order, the frames of one result that concern
// watches: each change to its watch's picture, each error that ends a
// watch of a revoked session, and each session-level error to the
// session's watches. It returns the frames other than changes.
func (r *claimsRun) watchSends(sends []locktable.Send) ([]locktable.Send, *failure) {
	rest := make([]locktable.Send, 0, len(sends))
	for _, sd := range sends {
		k := locktable.Key{Session: sd.Session, Claim: sd.Claim}
		switch sd.Kind {
		case locktable.SendChange:
			if f := r.told(k, sd.Change); f != nil {
				return nil, f
			}
			continue
		case locktable.SendError:
			if w := r.watchOf(k); w != nil && !w.ended && slices.Contains(r.revoking, w) {
				w.ended = true
			}
		case locktable.SendSessionError:
			r.endWatches(int(sd.Session) - 1)
		}
		rest = append(rest, sd)
	}
	return rest, nil
}

// told applies change ch to watch k's picture and checks the picture it
// forms.
func (r *claimsRun) told(k locktable.Key, ch *protocol.Change) *failure {
	w := r.watchOf(k)
	switch {
	case w == nil:
		return fail(PropConsistent, "CHANGE %s to %s, which is not a watch", changeString(ch), r.name(k))
	case w.ended:
		return fail(PropWatchEnded, "%s was told %s after it ended", w, changeString(ch))
	case w.synced && ch.Kind == protocol.ChangeSynced:
		return fail(PropConsistent, "%s was told synced twice", w)
	}
	at := slices.IndexFunc(w.pic, func(h protocol.Change) bool { return h.Token == ch.Token })
	switch ch.Kind {
	case protocol.ChangeHeld:
		if ch.Token <= w.told {
			return fail(PropWatchOrder, "%s was told holder token %d of %q after token %d", w, ch.Token, r.lockName(w.lock), w.told)
		}
		w.told = ch.Token
		w.pic = append(w.pic, *ch)
		exclusive := slices.ContainsFunc(w.pic, func(h protocol.Change) bool { return h.Mode == protocol.ModeExclusive })
		if exclusive && len(w.pic) > 1 || r.sem(w.lock) && len(w.pic) > r.cfg.Limit {
			return fail(PropWatchOrder, "%s's picture of %q became %s, which the table never had", w, r.lockName(w.lock), pictureString(w.pic))
		}
	case protocol.ChangeValue, protocol.ChangeFreed:
		if at < 0 || w.pic[at].Mode != ch.Mode {
			return fail(PropWatchPicture, "%s was told %s, but its picture of %q is %s", w, changeString(ch), r.lockName(w.lock), pictureString(w.pic))
		}
		if ch.Kind == protocol.ChangeFreed {
			w.pic = slices.Delete(w.pic, at, at+1)
		} else {
			w.pic[at].Value = ch.Value
		}
	case protocol.ChangeSynced:
		w.synced = true
	default:
		return fail(PropConsistent, "%s was told %s by a single table", w, changeString(ch))
	}
	return nil
}

// checkWatches checks, after a step, that every live watch is synced and
// its picture is its lock's holders in grant order, with their modes,
// values, labels and identities.
func (r *claimsRun) checkWatches() *failure {
	for _, w := range r.watches {
		if w.ended {
			continue
		}
		want := make([]protocol.Change, 0, len(r.holders[w.lock]))
		for _, c := range r.holders[w.lock] {
			want = append(want, protocol.Change{Kind: protocol.ChangeHeld, Mode: wireMode(c.mode), Token: c.token,
				Value: c.value, Label: fmt.Sprintf("session %d", c.s+1), Identity: sessionIdentity(c.s)})
		}
		if !w.synced || !slices.Equal(w.pic, want) {
			return fail(PropWatchPicture, "%s's picture of %q is %s (synced %v), but its holders in grant order are %s",
				w, r.lockName(w.lock), pictureString(w.pic), w.synced, pictureString(want))
		}
	}
	return nil
}

// verifyWatchers compares the table's watcher counts with the record.
func (r *claimsRun) verifyWatchers(snap []locktable.LockInfo) *failure {
	n := make([]int, r.cfg.RW+r.cfg.Sems)
	for _, w := range r.liveWatches(-1) {
		n[w.lock]++
	}
	for l := range n {
		if got := r.t.Watchers(r.lockName(l)); got != n[l] {
			return fail(PropConsistent, "%q has %d watchers, want %d", r.lockName(l), got, n[l])
		}
	}
	for _, li := range snap {
		for l := range n {
			if r.lockName(l) == li.Name && li.Watchers != n[l] {
				return fail(PropConsistent, "the snapshot of %q lists %d watchers, want %d", li.Name, li.Watchers, n[l])
			}
		}
	}
	return nil
}

// wireMode is a mode as the protocol numbers it.
func wireMode(m locktable.Mode) protocol.Mode {
	switch m {
	case locktable.Shared:
		return protocol.ModeShared
	case locktable.Semaphore:
		return protocol.ModeSemaphore
	}
	return protocol.ModeExclusive
}

func changeString(ch *protocol.Change) string {
	switch ch.Kind {
	case protocol.ChangeHeld, protocol.ChangeValue:
		return fmt.Sprintf("%v(%d, %q)", ch.Kind, ch.Token, ch.Value)
	case protocol.ChangeFreed:
		return fmt.Sprintf("%v(%d)", ch.Kind, ch.Token)
	}
	return ch.Kind.String()
}

func pictureString(pic []protocol.Change) string {
	parts := make([]string, len(pic))
	for i, h := range pic {
		parts[i] = fmt.Sprintf("%d %v %q (%s)", h.Token, h.Mode, h.Value, h.Label)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
