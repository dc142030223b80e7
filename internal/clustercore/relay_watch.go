package clustercore

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Watches on a cluster node: a WATCH whose name another node owns is
// served through an upstream values session of this node's, and the
// owner's CHANGEs reach the client unchanged. A watch follows its name:
// when its upstream breaks or the name moves, the client gets CHANGE kind
// 5 (reset) and the watch starts again where the name now lives, so the
// next state it sees is never older. server/relaywatch.go does the I/O.
// User docs: docs/cluster.md, "Watches in a cluster"; design:
// docs/design/2026-12-07-cluster-relay.md#internalclustercorerelay_watchgo.

// Backoff between two attempts to watch a name whose owner does not
// serve it yet (warming up, moving, unreachable, no route).
const (
	WatchRetryMin = 20 * time.Millisecond
	WatchRetryMax = 250 * time.Millisecond
)

// Watch is one watch of a client session on a cluster node: relayed to
// the name's owner, or in this node's table (Local).
type Watch struct {
	ID   uint32
	Name string
	// Local: the watch is in this node's table now.
	Local bool
	// Ended: released, or the session ended; nothing more is sent for it.
	Ended bool
	// Pending: the WATCH has not been answered yet (its outbox slot
	// waits); pre holds the frames of its first state read so far.
	Pending bool
	pre     []byte
	// told: the client was sent frames of a state since its last reset.
	told bool
}

// NewRelayedWatch is a WATCH relayed to its name's owner, to answer.
func NewRelayedWatch(id uint32, name string) Watch {
	return Watch{ID: id, Name: name, Pending: true}
}

// NewLocalWatch is a watch this node's table answered.
func NewLocalWatch(id uint32, name string) Watch {
	return Watch{ID: id, Name: name, Local: true, told: true}
}

// WatchOut is what one step of a Watch sends its client: the WATCH's
// answer (Answer, when Answered: its outbox slot is given, Answer may be
// empty) and a push.
type WatchOut struct {
	Answered bool
	Answer   []byte
	Push     []byte
}

// End ends w; answer is the WATCH's answer if it was not given yet (nil:
// REFUSED 0x03). ok is false when w had ended already (nothing to do).
func (w *Watch) End(answer []byte) (out WatchOut, ok bool) {
	if w.Ended {
		return out, false
	}
	w.Ended = true
	if w.Pending {
		if answer == nil {
			answer = protocol.AppendRefused(nil, w.ID, protocol.CodeNotOwner, "")
		}
		out = w.answer(answer)
	}
	return out, true
}

// Release ends w for the client's RELEASE (whose RELEASED the caller
// answers): a WATCH not answered yet is refused 0x03.
func (w *Watch) Release() (WatchOut, bool) {
	return w.End(protocol.AppendRefused(nil, w.ID, protocol.CodeNotOwner, "watch released before its state"))
}

// Fail ends w for good with code: REFUSED when the WATCH was not
// answered yet, else REVOKED. ended is End's ok.
func (w *Watch) Fail(code protocol.Code) (out WatchOut, ended bool) {
	if w.Pending {
		return w.End(protocol.AppendRefused(nil, w.ID, code, ""))
	}
	out, ended = w.End(nil)
	out.Push = protocol.AppendRevoked(nil, w.ID, code, "")
	return out, ended
}

// Revoke ends w as its session ends (code 0: nothing is sent) or drops
// its watches with REVOKED code (the slow watcher's 0x08).
func (w *Watch) Revoke(code protocol.Code) (out WatchOut, ended bool) {
	push := code != 0 && !w.Ended
	out, ended = w.End(nil)
	if push {
		out.Push = protocol.AppendRevoked(nil, w.ID, code, "")
	}
	return out, ended
}

// Reset forgets the state read so far and sends the client CHANGE reset
// when it was told a state since the last one.
func (w *Watch) Reset() WatchOut {
	w.pre = w.pre[:0]
	if !w.told {
		return WatchOut{}
	}
	w.told = false
	return WatchOut{Push: protocol.AppendChange(nil, w.ID, protocol.Change{Kind: protocol.ChangeReset})}
}

// Pass sends the client the owner's CHANGE c: into the WATCH's answer
// while it has not been given (synced gives it), else as a push.
func (w *Watch) Pass(c protocol.Change) WatchOut {
	if w.Pending {
		w.pre = protocol.AppendChange(w.pre, w.ID, c)
		if c.Kind != protocol.ChangeSynced {
			return WatchOut{}
		}
		w.told = true
		out := w.answer(w.pre)
		w.pre = nil
		return out
	}
	w.told = true
	return WatchOut{Push: protocol.AppendChange(nil, w.ID, c)}
}

// Here moves w into this node's table, which now owns its name and has
// accepted it: whatever the table sends from now on is the state's, and
// the WATCH's answer, if still due, is the table's synced, so the slot
// is given as an empty answer before it.
func (w *Watch) Here() WatchOut {
	w.Local, w.told = true, true
	if w.Pending {
		return w.answer(nil)
	}
	return WatchOut{}
}

// FollowsLocal reports whether a local watch the table ended with code
// follows its name (a reset is sent and it is relayed; Follow): only
// for 0x03 (the name left this node), while w and its session's watches
// have not ended. Otherwise the caller forgets it.
func (w *Watch) FollowsLocal(code protocol.Code, sessionEnded bool) bool {
	return w.Local && code == protocol.CodeNotOwner && !w.Ended && !sessionEnded
}

// Follow makes local watch w a relayed one, after FollowsLocal.
func (w *Watch) Follow() WatchOut {
	w.Local = false
	return w.Reset()
}

func (w *Watch) answer(b []byte) WatchOut {
	w.Pending = false
	return WatchOut{Answered: true, Answer: b}
}

// WatchAttempt is how one attempt to watch at the owner ended.
type WatchAttempt struct {
	Again  bool          // watch again where the name lives (reset first)
	Served bool          // the owner served the watch before it ended
	Code   protocol.Code // else: end the watch with this code
	Err    error
}

// ErrWatchAnswer: the owner sent a frame that is not about the watch.
var ErrWatchAnswer = errors.New("clustercore: the owner's frame does not fit the watch")

// WatchOwnerFrame classifies frame f of the upstream session of watch id:
// pass says it is a CHANGE for the client (Pass); else done says the
// upstream ends, as a says.
func WatchOwnerFrame(id uint32, f protocol.Frame) (pass, done bool, a WatchAttempt) {
	switch f.Type {
	case protocol.TypeWelcome:
		if f.Flags&protocol.WelcomeValues == 0 {
			// A node of an earlier revision: it cannot serve a watch.
			return false, true, WatchAttempt{Code: protocol.CodeUnsupportedFeature}
		}
		return false, false, a
	case protocol.TypePong:
		return false, false, a
	case protocol.TypeError:
		// The owner ends the session (it stops, or shuts down): the
		// name goes elsewhere.
		return false, true, WatchAttempt{Again: true, Err: fmt.Errorf("the owner ended the session: %v", f.Code)}
	}
	if f.Claim != id {
		return false, true, WatchAttempt{Again: true, Err: ErrWatchAnswer}
	}
	switch f.Type {
	case protocol.TypeChange:
		return true, false, a
	case protocol.TypeRefused, protocol.TypeRevoked:
		if f.Code == protocol.CodeNotOwner {
			// Not served there now (warming up, moving), or no longer
			// (the name left it): ask again where it lives.
			return false, true, WatchAttempt{Again: true, Err: fmt.Errorf("the owner answered %v", f.Code)}
		}
		return false, true, WatchAttempt{Code: f.Code}
	}
	return false, true, WatchAttempt{Again: true, Err: ErrWatchAnswer}
}

// WatchOverBacklog reports whether a client session with backlog bytes
// unsent is a slow watcher under bound (0: none); backlog is
// only asked for when there is a bound.
func WatchOverBacklog(bound int, backlog func() int) bool {
	return bound > 0 && backlog() > bound
}

// WatchRelayRoom reports whether a node that relays relayed watches may
// relay one more under bound (0: none): each holds a connection to the
// owner, and the node's file descriptors are not a client's to spend. A
// new WATCH over it is refused 0x07; a local watch whose name leaves
// while the node is over it ends with REVOKED 0x07 instead of following.
func WatchRelayRoom(bound int, relayed int64) bool {
	return bound <= 0 || relayed < int64(bound)
}

// WatchBackoff spaces the attempts of a watch whose owner does not serve
// its name yet.
type WatchBackoff struct{ wait time.Duration }

// Next returns how long to wait before the next attempt; served says the
// owner served the watch in the last attempt, which starts the backoff
// again.
func (b *WatchBackoff) Next(served bool) time.Duration {
	if b.wait == 0 || served {
		b.wait = WatchRetryMin
	}
	wait := b.wait
	b.wait = min(2*b.wait, WatchRetryMax)
	return wait
}
