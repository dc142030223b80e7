package server

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Values and watches (docs/protocol-v2-watches.md, "v2 values and watches"): a
// session that asked for them with HELLO flag 0x08 may claim with a
// value, change it (PROCLAIM) and watch names (WATCH); the lock table
// decides every CHANGE (locktable/watch.go), and this file only answers
// frames, routes them on a cluster node, and bounds what a watcher that
// does not read may leave unsent.

// v2ValuesReadBuf is the read buffer of a values session: one largest
// frame of such a session, and room for a batch of small ones.
const v2ValuesReadBuf = 4 << 10

// maxFrame is the largest frame length the session may send.
func (v *v2conn) maxFrame() int {
	if v.values {
		return protocol.MaxValuesFrameLen
	}
	return protocol.MaxFrameLen
}

// welcomeValues takes a HELLO's values flag: the session gets the larger
// frame limit and a read buffer that holds one such frame. A session
// relayed from another node asks for them to relay watches
// (relaywatch.go).
func (s *session) welcomeValues(hello protocol.Frame, w *protocol.Frame) {
	v := s.v2
	if !hello.Values() {
		return
	}
	v.values = true
	w.Flags |= protocol.WelcomeValues
	buf := make([]byte, len(v.buf), v2ValuesReadBuf)
	copy(buf, v.buf)
	v.buf = buf
}

// watchFrame serves PROCLAIM or WATCH f (ce: its claim-level error) with
// srv.mu held. It returns the code of a session-level fault, if any.
func (s *session) watchFrame(now time.Time, f protocol.Frame, ce *protocol.ClaimError) ([]delivery, protocol.Code) {
	srv, v := s.srv, s.v2
	if !v.values {
		// As a server without values answers them: an unknown type.
		return nil, protocol.CodeUnknownMessage
	}
	key := locktable.Key{Session: s.id, Claim: locktable.ClaimID(f.Claim)}
	if f.Type == protocol.TypeProclaim {
		return s.proclaim(now, f, key, ce), 0
	}
	if s.idInUse(key) {
		return nil, protocol.CodeClaimInUse
	}
	s.claimUses(f.Claim)
	if ce != nil {
		c, _ := protocol.CodeOf(ce.Err)
		s.refuse(f, c)
		return nil, 0
	}
	if a := srv.Authorizer; a != nil && !a.Allow(s.peer.Identity, f.Name) {
		srv.notify(Event{Kind: EventDenied, Time: now, Lock: f.Name, Peer: Peer(s.peer), Protocol: protocol.Version2,
			Session: SessionID(s.id), Claim: ClaimID(key.Claim), Label: v.label})
		s.refuse(f, protocol.CodeNotAuthorized)
		return nil, 0
	}
	if !s.watchedHere(f) {
		return nil, 0
	}
	res, err := srv.table.Watch(now, s.id, key.Claim, f.Name)
	switch {
	case errors.Is(err, locktable.ErrClaimExists):
		return nil, protocol.CodeClaimInUse
	case err != nil:
		if limit := tableLimit(err); limit != "" {
			srv.notify(Event{Kind: EventLimit, Time: now, Action: limit, Peer: Peer(s.peer), Lock: f.Name, Session: SessionID(s.id), Claim: ClaimID(key.Claim), Code: protocol.CodeLimitReached})
		}
		s.refuse(f, claimErrorCode(err))
		return nil, 0
	}
	s.watchedLocally(f.Claim, f.Name)
	s.startWatchWriter()
	return srv.commit(now, res), 0
}

// watchWriter writes a watching session's pushes on a goroutine of its
// own. A watch may be pushed many changes, and the goroutine that makes
// one (another client's reader) must never wait for a watcher's slow
// socket: it appends the frames and wakes the writer, which blocks in
// the watcher's write instead, while the backlog bound watches what piles
// up meanwhile.
type watchWriter struct {
	wake chan struct{} // one pending wake-up at most
	stop chan struct{} // closed when the session ends
}

// startWatchWriter starts the session's writer, once, at its first
// watch. Called with srv.mu held.
func (s *session) startWatchWriter() {
	v := s.v2
	if v.writer.Load() != nil {
		return
	}
	w := &watchWriter{wake: make(chan struct{}, 1), stop: make(chan struct{})}
	v.writer.Store(w)
	go func() {
		for {
			select {
			case <-w.stop:
				return
			case <-w.wake:
				s.srv.deliver([]delivery{{to: s, flush: true, direct: true}})
			}
		}
	}()
}

// wakeWriter hands a flush to the session's writer, if it has one, and
// reports whether it did.
func (v *v2conn) wakeWriter() bool {
	w := v.writer.Load()
	if w == nil {
		return false
	}
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending: it writes these frames too
	}
	return true
}

// stopWriter ends the session's writer, if it has one.
func (v *v2conn) stopWriter() {
	if w := v.writer.Load(); w != nil {
		close(w.stop)
	}
}

// proclaim serves PROCLAIM f of claim key: the new value, or PROCLAIMED
// with "not in use", or REFUSED 0x24 for a value too long.
func (s *session) proclaim(now time.Time, f protocol.Frame, key locktable.Key, ce *protocol.ClaimError) []delivery {
	srv, v := s.srv, s.v2
	if ce != nil {
		c, _ := protocol.CodeOf(ce.Err)
		v.appendOut(s, func(b []byte) []byte { return protocol.AppendRefused(b, f.Claim, c, "") })
		return nil
	}
	if s.relayInUse(f.Claim) {
		s.relayProclaim(now, f) // its value lives at its owner
		return nil
	}
	status := protocol.ProclaimSet
	res, err := srv.table.SetValue(now, key, f.Value)
	if err != nil {
		status = protocol.ProclaimNotInUse
	}
	ds := srv.commit(now, res)
	v.appendOut(s, func(b []byte) []byte { return protocol.AppendProclaimed(b, f.Claim, status) })
	return ds
}

// idInUse reports whether claim id key names a claim or a watch of the
// session, here or relayed. Called with srv.mu held.
func (s *session) idInUse(key locktable.Key) bool {
	if _, err := s.srv.table.ClaimStatus(key); err == nil {
		return true
	}
	return s.srv.table.Watching(key.Session, key.Claim) || s.relayInUse(uint32(key.Claim)) || s.relayWatchInUse(uint32(key.Claim))
}

// servedHere reports whether this node serves valued CLAIM f, itself or
// through the claim relay (relayvalues.go). On a cluster node that does
// not, f is answered REFUSED 0x03: the name is warming up or moving (the
// client retries).
func (s *session) servedHere(f protocol.Frame) bool {
	r := s.srv.Router
	if r == nil {
		return true
	}
	if clustercore.ValuedServed(r.Route(f.Name, 0, s.forwarded).Action.core()) {
		return true
	}
	s.refuse(f, protocol.CodeNotOwner)
	return false
}

// watchedHere reports whether this node serves WATCH f from its own
// table. A name another node owns is watched through it (relaywatch.go)
// unless a bound refuses it 0x07 (clustercore.WatchBounds); one warming
// up or moving is refused 0x03 (clustercore.WatchRoute).
func (s *session) watchedHere(f protocol.Frame) bool {
	srv := s.srv
	if srv.Router == nil {
		return true
	}
	switch clustercore.WatchRoute(srv.Router.Route(f.Name, 0, s.forwarded).Action.core()) {
	case clustercore.WatchHere:
		return true
	case clustercore.WatchRefuse:
		s.refuse(f, protocol.CodeNotOwner)
		return false
	}
	b := clustercore.WatchBounds{MaxClaims: srv.MaxSessionClaims, MaxRelayed: srv.MaxRelayedWatches, Relayed: srv.relayedWatches.Load()}
	if b.MaxClaims > 0 {
		b.Claims = srv.table.ClaimCount(s.id) + len(s.v2.watches) // its local watches are in v.watches too
	}
	if limit := b.Relay(); limit != clustercore.WatchNoLimit {
		action := LimitSessionClaims
		if limit == clustercore.WatchLimitRelayed {
			action = LimitRelayedWatches
		}
		srv.notify(Event{Kind: EventLimit, Time: time.Now(), Action: action, Peer: Peer(s.peer), Lock: f.Name, Session: SessionID(s.id), Claim: ClaimID(f.Claim), Code: protocol.CodeLimitReached})
		s.refuse(f, protocol.CodeLimitReached)
		return false
	}
	s.relayWatchTo(f)
	return false
}

// valuedClaim checks a CLAIM with a value before it is served: a
// session without values, or one whose name another node serves, is
// answered here, and it reports false.
func (s *session) valuedClaim(f protocol.Frame) bool {
	if !s.v2.values {
		s.refuse(f, protocol.CodeUnsupportedFeature)
		return false
	}
	if f.Reassert() {
		return true // resume.go routes it, and refuses to relay a value
	}
	return s.servedHere(f)
}

// backlogLocked returns how many bytes the session has decided and not yet
// handed to a write. Called with omu held.
func (v *v2conn) backlogLocked() int {
	n := len(v.out)
	if rel := v.rel.Load(); rel != nil {
		n += rel.box.Backlog()
	}
	return n
}

// pushChange appends CHANGE send to session s, unless the session's
// backlog is over MaxWatchBacklog: then every watch of s ends with
// REVOKED 0x08 instead, and the changes that follow in the same result
// (dropped) are not sent. It reports whether it appended a frame, which
// the session's flush must write. Called with srv.mu held.
func (srv *Server) pushChange(s *session, send locktable.Send, dropped map[*session]bool) bool {
	if dropped[s] {
		return false
	}
	v := s.v2
	v.omu.Lock()
	over := srv.MaxWatchBacklog > 0 && v.backlogLocked() > srv.MaxWatchBacklog
	v.omu.Unlock()
	if !over {
		v.appendPush(s, send)
		return true
	}
	dropped[s] = true
	now := time.Now()
	if s.srv.Router != nil {
		s.endRelayWatchesLocked(protocol.CodeSlowWatcher)
	}
	for _, id := range srv.table.EndWatches(s.id) {
		v.appendPush(s, locktable.Send{Kind: locktable.SendError, Session: s.id, Claim: id, Code: protocol.CodeSlowWatcher})
		srv.notify(Event{Kind: EventLimit, Time: now, Action: LimitWatchBacklog, Peer: Peer(s.peer), Session: SessionID(s.id), Claim: ClaimID(id), Code: protocol.CodeSlowWatcher})
	}
	return true // the REVOKEDs need the flush
}

// Watches returns how many watches the server has, for the metric
// baton_watches.
func (srv *Server) Watches() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.WatchCount()
}
