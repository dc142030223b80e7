package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// Resumable sessions: a version 2 session opened with HELLO flags bit 0
// gets a secret (the server keeps its hash), and when its connection
// breaks the table keeps it as a detached session for its origin until a
// lease has passed since it was last heard from. This file holds the kept
// sessions, their timers and the table calls; what an owner decides about
// a re-assertion is internal/clustercore/owner_reassert.go.
// Protocol: docs/protocol-v2-resume.md; design: "Resumable sessions and
// re-assertion in a cluster" and #serverresumego in
// docs/design/2026-12-07-cluster-relay.md.

// secretHashLen is the size of the hash of a session secret that the
// server keeps (SHA-256), and that a hop header version 3 carries.
const secretHashLen = protocol.SecretHashLen

// resumeKey is what a session needs to be kept: the origin it stands for
// and the hash of its secret.
type resumeKey struct {
	origin locktable.Origin
	hash   [secretHashLen]byte
	label  string // the session's, for the event that reports it kept
}

// keptSession is a resumable session whose connection broke.
type keptSession struct {
	resumeKey
	id    locktable.SessionID
	timer *time.Timer
	// moveHash is set for a session whose claims a planned change
	// installed here (move_install.go): its host adopts them with the secret
	// whose hash it is, or through an upstream session of the same
	// origin (as any relaying node its kept claims).
	moveHash *[secretHashLen]byte
	end      clustercore.KeptEnd // when it may end, once its lease has passed
	claims   int                 // its count in resumeState.keptClaims
}

// handedOver is what a planned change's hand-off carries of k, whose
// claims on the moving names go to the new owner still kept: its origin
// and the hashes of the secrets that may adopt them there.
func (k *keptSession) handedOver() moveSession {
	ms := moveSession{Session: k.id, Origin: k.origin}
	if k.hash != ([secretHashLen]byte{}) {
		ms.Resume = k.hash[:]
	}
	if k.moveHash != nil {
		ms.Adopt = k.moveHash[:]
	}
	return ms
}

// matches reports whether secret adopts k's claims.
func (k *keptSession) matches(secret [protocol.SecretLen]byte) bool {
	return secretMatches(&k.hash, secret) || k.moveHash != nil && secretMatches(k.moveHash, secret)
}

// resumeState is the server's kept sessions, guarded by srv.mu.
type resumeState struct {
	kept map[locktable.Origin]*keptSession
	byID map[locktable.SessionID]*keptSession
	// live are the open resumable sessions by origin, for a re-assertion
	// that names one whose client saw its connection break first.
	live map[locktable.Origin]*session
	// keptClaims counts the claims of the kept sessions, as they were
	// kept less those re-asserted since (MaxKeptClaims).
	keptClaims int
}

// newSecret returns a fresh session secret and its hash.
func newSecret() (secret [protocol.SecretLen]byte, hash [secretHashLen]byte) {
	rand.Read(secret[:]) // never fails (crypto/rand)
	return secret, sha256.Sum256(secret[:])
}

// secretMatches compares the hash of secret with hash in constant time.
func secretMatches(hash *[secretHashLen]byte, secret [protocol.SecretLen]byte) bool {
	h := sha256.Sum256(secret[:])
	return subtle.ConstantTimeCompare(h[:], hash[:]) == 1
}

// ringVersioner is a Router that knows the ring version it has applied:
// a cluster node, whose WELCOME to a resumable session carries it.
type ringVersioner interface {
	RingVersion() uint64
}

// welcome builds the WELCOME of a session opened by hello and sets up
// its resumption: a HELLO with flags gets the revision's WELCOME flags
// (a HELLO with none gets none, as before). Called with srv.mu held.
func (s *session) welcome(now time.Time, hello protocol.Frame) (_ protocol.Frame, ds []delivery) {
	srv, v := s.srv, s.v2
	_, ring := srv.Router.(ringVersioner)
	ws := clustercore.WelcomeFor(hello, s.hopResume != nil, ring)
	w := protocol.Frame{Type: protocol.TypeWelcome, Session: uint64(s.id), Flags: ws.Flags}
	switch {
	case s.hopResume != nil:
		k := *s.hopResume
		k.label = hello.Label
		v.resume = &k
	case ws.Secret:
		secret, hash := newSecret()
		v.resume = &resumeKey{origin: locktable.Origin{Node: srv.NodeID, Session: uint64(s.id)}, hash: hash, label: hello.Label}
		w.Secret, w.Node = secret, srv.NodeID
		if ring {
			w.Ring = srv.Router.(ringVersioner).RingVersion()
		}
	}
	v.detach, v.tickets = ws.Detach, ws.Tickets
	s.welcomeValues(hello, &w)
	if v.resume != nil {
		if srv.resume.live == nil {
			srv.resume.live = map[locktable.Origin]*session{}
		}
		// A relaying node that opens a second upstream for one client
		// session has given the first up (its connection broke on the
		// relaying node's side, which this node may not have seen yet):
		// the first is kept, for the second to adopt its claims.
		if old := srv.liveSession(v.resume.origin); old != nil && old != s && s.relaysFor(v.resume.origin) {
			ds = srv.keepAbandonedLocked(now, old)
		}
		srv.resume.live[v.resume.origin] = s
	}
	return w, ds
}

// keepAbandonedLocked keeps open session s as if its connection had
// broken now, and closes that connection: its client has gone elsewhere
// (clustercore.SessionAbandon decides what is kept and what ends).
// Its lease runs from now: its reader may have read frames the table has
// not been told of (leaseFlush), and nothing else may read its time, so
// now is the one time known to be no earlier than its last read. Called
// with srv.mu held.
func (srv *Server) keepAbandonedLocked(now time.Time, s *session) []delivery {
	var ds []delivery
	var a clustercore.SessionAbandon
	if _, err := srv.table.Touch(now, s.id); err == nil {
		ds, a.ClaimsKept = srv.keepLocked(now, s)
	}
	if a.Ranges = srv.ranges.table.HasSession(rangelock.SessionID(s.id)); a.Ranges {
		ds = append(ds, srv.keepRangesLocked(s)...)
	}
	if a.ClaimsLeft = srv.table.ClaimCount(s.id) > 0; a.EndsClaims() {
		ds = append(ds, srv.commit(now, srv.table.End(now, s.id, locktable.ReasonGraceful))...)
	}
	if a.Kept() {
		s.v2.keepRanges = true
		s.closing.Store(true) // its reader ends without ending its claims
		go s.conn.Close()
	}
	return ds
}

// forgetLiveLocked drops s from the open resumable sessions; called
// with srv.mu held when s is kept or ends.
func (srv *Server) forgetLiveLocked(s *session) {
	if v := s.v2; v != nil && v.resume != nil && srv.resume.live[v.resume.origin] == s {
		delete(srv.resume.live, v.resume.origin)
	}
}

// keepV2 keeps the session, whose connection broke, if it is resumable
// and has claims; it reports whether it did. Called by the session's
// reader as it ends.
func (s *session) keepV2() bool {
	srv, v := s.srv, s.v2
	if v == nil || v.resume == nil {
		return false
	}
	srv.mu.Lock()
	if s.closing.Load() || srv.claims[s.id] != s {
		srv.mu.Unlock()
		return false
	}
	if v.seen.After(v.flushed) {
		if _, err := srv.table.Touch(v.seen, s.id); err != nil {
			srv.mu.Unlock()
			return false
		}
		v.flushed = v.seen
	}
	ds, kept := srv.keepLocked(time.Now(), s)
	srv.mu.Unlock()
	srv.deliver(ds)
	return kept
}

// keepLocked makes session s a kept session: its claims stay, it is sent
// nothing, and a timer ends it when its lease has passed. Called with
// srv.mu held; the caller ends s's connection and delivers ds.
func (srv *Server) keepLocked(now time.Time, s *session) (ds []delivery, kept bool) {
	key := s.v2.resume
	if srv.resume.kept[key.origin] == nil && !srv.keepAllowedLocked(s, srv.table.ClaimCount(s.id)) {
		return nil, false
	}
	err := srv.table.Detach(s.id, key.origin)
	var moveHash *[secretHashLen]byte
	if errors.Is(err, locktable.ErrBadState) {
		// The same origin kept twice: a relaying node re-opened the
		// upstream of one client session, which broke too, before it
		// re-asserted all the claims of the first (or a planned change
		// installed them here, move_install.go). Their client may still believe
		// it has them, and its relaying node may still re-assert them:
		// this session takes them over, and keeps them for its own
		// lease, which runs no earlier than the older one's. A claim
		// whose id this session uses again was given up by the relaying
		// node: it ends with the older session.
		if old := srv.resume.kept[key.origin]; old != nil {
			moveHash = old.moveHash
			for _, cid := range srv.table.SessionClaims(old.id) {
				srv.table.Adopt(now, key.origin, cid, s.id)
			}
			if _, still := srv.table.DetachedSession(key.origin); still {
				ds = srv.endKeptLocked(now, old, locktable.ReasonGraceful)
			} else {
				srv.forgetKeptLocked(old)
			}
		}
		err = srv.table.Detach(s.id, key.origin)
	}
	if err != nil {
		return ds, false // nothing to keep
	}
	if srv.resume.kept == nil {
		srv.resume.kept = map[locktable.Origin]*keptSession{}
		srv.resume.byID = map[locktable.SessionID]*keptSession{}
	}
	k := &keptSession{resumeKey: *key, id: s.id, moveHash: moveHash, claims: srv.table.ClaimCount(s.id)}
	srv.resume.keptClaims += k.claims
	srv.forgetLiveLocked(s)
	srv.resume.kept[k.origin] = k
	srv.resume.byID[k.id] = k
	delete(srv.claims, s.id)
	srv.armKeptLocked(k)
	srv.notify(Event{Kind: EventSessionKept, Time: now, Peer: Peer(s.peer), Protocol: protocol.Version2, Session: SessionID(s.id), Label: key.label})
	srv.Logger.Debug("keeping a resumable session", "session", s.id, "origin", k.origin, "remote_addr", s.peer.Addr)
	return ds, true
}

// armKeptLocked sets k's timer for its deadline (clustercore.KeptTimerAt).
func (srv *Server) armKeptLocked(k *keptSession) {
	d, err := srv.table.Deadline(k.id)
	if err != nil {
		return
	}
	wait := time.Until(clustercore.KeptTimerAt(d))
	if k.timer == nil {
		k.timer = time.AfterFunc(wait, func() { srv.expireKept(k) })
	} else {
		k.timer.Reset(wait)
	}
}

// expireKept ends kept session k once its lease has passed.
func (srv *Server) expireKept(k *keptSession) {
	srv.mu.Lock()
	if srv.resume.byID[k.id] != k {
		srv.mu.Unlock()
		return
	}
	now := time.Now()
	if retryAt, held := srv.holdExpiryLocked(k, now); held {
		k.timer.Reset(retryAt.Sub(now))
		srv.mu.Unlock()
		return
	}
	res, err := srv.table.ExpireSession(now, k.id)
	if errors.Is(err, locktable.ErrNotExpired) {
		srv.armKeptLocked(k)
		srv.mu.Unlock()
		return
	}
	ds := srv.commit(now, res)
	srv.forgetKeptLocked(k)
	srv.mu.Unlock()
	srv.deliver(ds)
}

// holdExpiryLocked reports whether the end of kept session k, whose
// timer fired at now, must wait because one of its claims is on a name
// this node does not serve now (clustercore.KeptEnd says why and for how
// long), and when to look again. Called with srv.mu held.
func (srv *Server) holdExpiryLocked(k *keptSession, now time.Time) (retryAt time.Time, held bool) {
	d, err := srv.table.Deadline(k.id)
	if err != nil || !k.end.MayHold(now, d, srv.Router != nil) {
		return time.Time{}, false // no cluster, or not expired yet: the table says so
	}
	var names []string
	for _, cid := range srv.table.SessionClaims(k.id) {
		if c, err := srv.table.DetachedClaim(k.origin, cid); err == nil {
			names = append(names, c.Name)
		}
	}
	serves := func(name string) bool { return srv.Router.Route(name, 0, false).Action == RouteServe }
	retryAt, warn, held := k.end.HoldFor(now, d, srv.table.SessionLease(k.id), names, serves)
	if warn != "" {
		srv.Logger.Warn("a kept session's lease passed more than a lease ago; its end waits until this node serves its lock",
			"lock", warn, "origin", k.origin)
	}
	return retryAt, held
}

// endKeptLocked ends kept session k at once, for reason.
func (srv *Server) endKeptLocked(now time.Time, k *keptSession, reason locktable.Reason) []delivery {
	ds := srv.commit(now, srv.table.End(now, k.id, reason))
	srv.forgetKeptLocked(k)
	return ds
}

// forgetKeptLocked drops k from the kept sessions (after the table has
// ended it, or it has given up its last claim).
func (srv *Server) forgetKeptLocked(k *keptSession) {
	if k.timer != nil {
		k.timer.Stop()
	}
	delete(srv.resume.kept, k.origin)
	delete(srv.resume.byID, k.id)
	srv.resume.keptClaims -= k.claims
	k.claims = 0
}

// dropKeptLocked forgets every kept session at shutdown, after the table
// has ended them.
func (srv *Server) dropKeptLocked() {
	for _, k := range srv.resume.byID {
		srv.forgetKeptLocked(k)
	}
}

// isKeptLocked reports whether sid is a kept session: a version 2
// session whose events still count for version 2.
func (srv *Server) isKeptLocked(sid locktable.SessionID) bool {
	return srv.resume.byID[sid] != nil
}

// KeptSessions returns the number of resumable sessions kept after their
// connection broke.
func (srv *Server) KeptSessions() int {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.resume.byID)
}

// Results of a re-assertion, for EventReasserted's Action and the
// metrics.
const (
	ReassertAdopted    = "adopted"    // taken over from a kept session
	ReassertInstalled  = "installed"  // installed with its old token on a node that took the name over
	ReassertRequeued   = "requeued"   // a queued claim on a name taken over queued again
	ReassertRefused    = "refused"    // REFUSED 0x04
	ReassertStaleRing  = "stale_ring" // REFUSED 0x05
	ReassertRetry      = "retry"      // REFUSED 0x03: this node cannot decide now
	ReassertRelayed    = "relayed"    // sent on to the name's owner
	reassertResultsLen = 7
)

// ReassertResults lists the results of a re-assertion, for metrics that
// pre-create their labels.
var ReassertResults = [reassertResultsLen]string{ReassertAdopted, ReassertInstalled, ReassertRequeued,
	ReassertRefused, ReassertStaleRing, ReassertRetry, ReassertRelayed}

// reassert answers re-assertion f (CLAIM with flags bit 1) as
// clustercore decides. now is when its batch was read. Called by the
// reader with srv.mu held; the claim id is not in use.
func (s *session) reassert(now time.Time, f protocol.Frame) []delivery {
	srv := s.srv
	var rt Route
	if srv.Router != nil {
		rt = srv.Router.Route(f.Name, 0, s.forwarded)
	}
	gated := rt.Action == RouteHold && rt.Gated
	switch clustercore.ReassertStepFor(srv.Router != nil, clustercore.OwnerRoute{Serve: rt.Action == RouteServe,
		Gated: gated, Since: rt.Since, Forward: rt.Action == RouteForward}, s.forwarded) {
	case clustercore.ReassertForward:
		s.reasserted(f, ReassertRelayed, 0, 0)
		s.relayClaim(now, f, rt.Addr) // the owner answers
		return nil
	case clustercore.ReassertNotNow:
		s.reassertRefused(f, ReassertRetry, protocol.CodeNotOwner)
		return nil
	}
	ds, ok := s.adopt(now, f)
	if ok {
		return ds
	}
	if gated {
		return append(ds, s.takeOver(now, f, rt.Since)...)
	}
	s.reassertRefused(f, ReassertRefused, protocol.CodeReassertRefused)
	return ds
}

// reassertHolders describes the open session of origin o and s's part
// in it, for a re-assertion with secret; the caller adds what it keeps
// for o. Called with srv.mu held.
func (s *session) reassertHolders(o locktable.Origin, secret [protocol.SecretLen]byte) clustercore.ReassertHolders {
	h := clustercore.ReassertHolders{Relays: s.relaysFor(o)}
	if live := s.srv.liveSession(o); live != nil && live != s {
		h.Live, h.LiveMatches = true, secretMatches(&live.v2.resume.hash, secret)
	}
	return h
}

// adopt moves the claim that f re-asserts from the kept session of its
// origin into s (clustercore.ReassertHolders says when), and answers it,
// when that claim fits f (clustercore.AdoptFits); it reports whether it
// did. A resumable session of that origin still open here is kept
// first, its connection closed.
func (s *session) adopt(now time.Time, f protocol.Frame) ([]delivery, bool) {
	srv := s.srv
	o := locktable.Origin{Node: f.Node, Session: f.Session}
	var ds []delivery
	h := s.reassertHolders(o, f.Secret)
	if k := srv.resume.kept[o]; k != nil {
		h.Kept, h.KeptMatches = true, k.matches(f.Secret)
	}
	switch h.Holder() {
	case clustercore.HolderNone:
		return nil, false
	case clustercore.HolderLive:
		ds = srv.keepAbandonedLocked(now, srv.liveSession(o))
	}
	k := srv.resume.kept[o]
	if k == nil {
		return ds, false
	}
	cid := locktable.ClaimID(f.Claim)
	if c, err := srv.table.DetachedClaim(o, cid); err != nil || !clustercore.AdoptFits(c, f) {
		return ds, false
	}
	st, err := srv.table.Adopt(now, o, cid, s.id)
	if err != nil {
		return ds, false
	}
	if f.HasValue() {
		// The client's value is the latest: a PROCLAIM may have been
		// lost with the old connection.
		res, _ := srv.table.SetValue(now, locktable.Key{Session: s.id, Claim: cid}, f.Value)
		ds = append(ds, srv.commit(now, res)...)
	}
	ticket := srv.table.Ticket(locktable.Key{Session: s.id, Claim: cid})
	if k.claims > 0 {
		k.claims--
		srv.resume.keptClaims--
	}
	if _, still := srv.table.DetachedSession(o); !still {
		srv.forgetKeptLocked(k) // every claim of it has been taken over
	}
	s.reasserted(f, ReassertAdopted, 0, st.Token)
	s.v2.appendOut(s, func(b []byte) []byte { return s.v2.appendClaimed(b, f.Claim, st, ticket) })
	return ds, true
}

// liveSession returns the open resumable session that origin o names on
// this node: one of its own, or one relayed to it by o's node.
func (srv *Server) liveSession(o locktable.Origin) *session {
	if s := srv.resume.live[o]; s != nil && srv.claims[s.id] == s {
		return s
	}
	return nil
}

// takeOver answers re-assertion f for a name this node took over without
// its state (a removed node's, or its own before a restart) at ring
// since, and is warming up, as clustercore.TakeOverFor decides.
func (s *session) takeOver(now time.Time, f protocol.Frame, since uint64) []delivery {
	srv := s.srv
	switch how, held := clustercore.TakeOverFor(f, since); how {
	case clustercore.TakeOverStaleRing:
		s.reassertRefused(f, ReassertStaleRing, protocol.CodeStaleRing)
		return nil
	case clustercore.TakeOverRequeue:
		s.reasserted(f, ReassertRequeued, 0, 0)
		s.holdGated(held)
		return nil
	}
	st, res, err := srv.table.Reassert(now, s.id, locktable.ClaimID(f.Claim), locktable.ClaimRequest{
		Name: f.Name, Mode: locktable.Mode(f.Mode), Limit: f.Limit, Value: f.Value}, f.Token)
	if err != nil {
		code := clustercore.TakeOverRefusal(err, claimErrorCode(err))
		s.reassertRefused(f, ReassertRefused, code)
		return nil
	}
	ds := srv.commit(now, res)
	s.reasserted(f, ReassertInstalled, 0, st.Token)
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendGranted(b, f.Claim, st.Token) })
	return ds
}

// reassertRefused answers re-assertion f REFUSED(code) and reports it
// with result.
func (s *session) reassertRefused(f protocol.Frame, result string, code protocol.Code) {
	s.reasserted(f, result, code, 0)
	s.refuse(f, code)
}

// reasserted reports the outcome of re-assertion f to the observers.
func (s *session) reasserted(f protocol.Frame, result string, code protocol.Code, token uint64) {
	s.srv.notify(Event{Kind: EventReasserted, Time: time.Now(), Lock: f.Name, Peer: Peer(s.peer), Token: token, Code: code,
		Action: result, Protocol: protocol.Version2, Session: SessionID(s.id), Claim: ClaimID(f.Claim),
		Mode: Mode(f.Mode), Label: s.v2.label})
}
