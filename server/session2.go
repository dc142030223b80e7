package server

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// v2ReadBuf is the size of a version 2 session's read buffer: at least
// one largest frame (what is left of a batch is the start of one frame,
// moved to the front), and room for a batch of small frames (CLAIM,
// RELEASE, PING: 7 to about 30 bytes) answered with one write. 1 KiB is
// a size class of its own.
const v2ReadBuf = 1 << 10

// maxSpare bounds the output buffer a session keeps between writes: a
// burst of pushes (a thousand REVOKEDs) does not pin its memory forever.
const maxSpare = 4 << 10

// v2conn is the version 2 part of a session: the reader's buffer and
// lease bookkeeping, and the frames waiting to be written.
//
// Frames to a version 2 session are appended to out, under omu, at the
// moment they are decided (the reader's answers and the table's pushes,
// under srv.mu), so they go out in exactly that order; then one flusher
// at a time (under wmu) writes everything pending, in as few writes as
// the frames' arrival allows. omu is a leaf: nothing else is locked
// while it is held.
type v2conn struct {
	// Owned by the reader goroutine.
	buf          []byte // unprocessed bytes: buf[:len] of a v2ReadBuf array
	lease        time.Duration
	label        string
	seen         time.Time // when the last frame was read in full
	flushed      time.Time // the last seen the table has been told
	partialSince time.Time // when the frame now partly read began; zero if none
	// hungUp, detach and detached: what decides how the session ends
	// with its connection (clustercore.SessionEnd, which says what each
	// means).
	hungUp           bool
	detach, detached bool
	// leaseRecorded: a cluster node has recorded this session's lease
	// (clustercore.SessionLeaseFirst).
	leaseRecorded bool

	omu   sync.Mutex
	out   []byte // pending frames, in the order decided
	spare []byte // the buffer last written, reused for out
	// ending is set when the session is being closed: its own claims'
	// ends may promote its own waiting claims, and those pushes, to a
	// session that is going away, are not sent.
	ending bool
	// flushing is set while a goroutine is bound to write out until it
	// is empty (see flushV2).
	flushing bool
	// rel is set (under omu) by the session's first relayed claim: its
	// frames then pass through an ordered outbox (relay2.go).
	rel atomic.Pointer[relayState]
	// ringWatch is set by a RING with the watch flag (ring2.go).
	ringWatch atomic.Bool
	// resume is set (under srv.mu, before the session enters the claims
	// map) for a resumable session: what keeps it when its connection
	// breaks (resume.go).
	resume *resumeKey
	// keepRanges is set (under srv.mu) when a resumable session's
	// connection broke, or its client went elsewhere: its range locks
	// are kept for the client's resume (rangeresume.go).
	keepRanges bool
	// plainHash is what a plain session's upstreams carry in place of a
	// secret's hash (relay2.go); set under omu by its first upstream.
	plainHash [secretHashLen]byte
	// movedIDs are the claims of an upstream session handed over to a
	// new owner, whose RELEASE is answered MOVED (move_export.go). Guarded by
	// srv.mu.
	movedIDs map[uint32]bool
	// tickets is set (under srv.mu, before the session enters the
	// claims map) when the client asked for queue tickets (tickets.go).
	tickets bool
	// values is set likewise when the client asked for values and
	// watches (watch.go).
	values bool
	// writer is set (under srv.mu) by the session's first watch: the
	// goroutine that writes its pushes (watch.go).
	writer atomic.Pointer[watchWriter]
	// watches are the session's watches on a cluster node, relayed or
	// in this node's table, which follow their names (relaywatch.go);
	// watchesClosed is set when the session ended them. Guarded by
	// srv.mu.
	watches       map[uint32]*relayWatch
	watchesClosed bool
}

// appendOut appends the answers built by add to the pending output,
// unless the session is closing (after a session-level ERROR nothing is
// sent). Only the session's reader calls it. A session that relays
// claims holds them until its upstreams are confirmed after the batch
// was read (relay2.go).
func (v *v2conn) appendOut(s *session, add func(b []byte) []byte) {
	v.omu.Lock()
	if !s.closing.Load() && !v.ending {
		if rel := v.rel.Load(); rel == nil {
			v.out = add(v.out)
		} else {
			rel.add(v, &outEntry{B: add(nil), At: rel.answerAt()})
		}
	}
	v.omu.Unlock()
}

// appendPushOut is appendOut for pushes, which a relaying session orders
// behind its earlier frames but holds for no confirmation.
func (v *v2conn) appendPushOut(s *session, add func(b []byte) []byte) {
	v.omu.Lock()
	if !s.closing.Load() && !v.ending {
		if rel := v.rel.Load(); rel == nil {
			v.out = add(v.out)
		} else {
			rel.add(v, &outEntry{B: add(nil)})
		}
	}
	v.omu.Unlock()
}

// appendPush appends the frame the table asked for: PROMOTED, REVOKED or
// CHANGE.
func (v *v2conn) appendPush(s *session, send locktable.Send) {
	claim := uint32(send.Claim)
	v.appendPushOut(s, func(b []byte) []byte {
		switch send.Kind {
		case locktable.SendAcquired:
			return protocol.AppendPromoted(b, claim, send.Token)
		case locktable.SendError:
			return protocol.AppendRevoked(b, claim, send.Code, "")
		case locktable.SendChange:
			return protocol.AppendChange(b, claim, *send.Change)
		}
		return b
	})
}

// flushV2 writes every pending frame. A goroutine that pushes to the
// session (own false) and finds a flush in progress leaves its frames to
// that flusher, which writes until nothing is pending: so a pusher never
// queues behind a slow client's write, and the frames appended
// meanwhile, by anyone, go out together in the flusher's next write. The
// session's own reader (own true) waits for the flusher instead: a
// client that sends without reading is held back by its own writes, and
// its answers cannot pile up. An error is the caller's own write's.
func (s *session) flushV2(own bool) error {
	v := s.v2
	v.omu.Lock()
	if v.flushing && !own {
		v.omu.Unlock()
		return nil
	}
	v.flushing = true
	v.omu.Unlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for {
		v.omu.Lock()
		b := v.out
		if len(b) == 0 || s.closing.Load() {
			// Under omu: a frame appended after this finds flushing
			// false and flushes itself.
			v.flushing = false
			v.omu.Unlock()
			return nil
		}
		v.out = v.spare[:0]
		v.spare = nil
		v.omu.Unlock()
		err := s.writeLocked(b)
		v.keepSpare(b)
		if err != nil {
			v.omu.Lock()
			v.flushing = false
			v.omu.Unlock()
			return err
		}
	}
}

func (v *v2conn) keepSpare(b []byte) {
	if cap(b) > maxSpare {
		return
	}
	v.omu.Lock()
	if v.spare == nil {
		v.spare = b[:0]
	}
	v.omu.Unlock()
}

// runV2 serves a version 2 session after its preamble: HELLO, then
// frames in order until the session ends. It returns why, and the code of
// the session-level ERROR to send, if any. Its frame stays small (the
// opening and each batch are functions of their own): it is on the
// stack of every idle session.
func (s *session) runV2() (locktable.Reason, protocol.Code) {
	reason, code := s.runV2Frames()
	if s.v2.sessionEnd().Keeps(reason, code) {
		s.markRangesKept()
		if s.keepV2() {
			return ended, 0 // kept for a resume (resume.go)
		}
	}
	return reason, code
}

// sessionEnd is what decides how the session ends with its connection
// (clustercore.SessionEnd). Called by the reader.
func (v *v2conn) sessionEnd() clustercore.SessionEnd {
	return clustercore.SessionEnd{Resumable: v.resume != nil, Detach: v.detach, Detached: v.detached, HungUp: v.hungUp}
}

// runV2Frames is runV2 until the session ends.
func (s *session) runV2Frames() (locktable.Reason, protocol.Code) {
	if reason, code := s.openV2(); reason != 0 {
		return reason, code
	}
	srv, v := s.srv, s.v2
	orphaned := false
	var deadline time.Time
	for {
		if !orphaned && len(v.buf) > 0 {
			reason, code, orphan := s.batch()
			switch {
			case code != 0 || reason != 0:
				return reason, code
			case orphan:
				// Another goroutine ended the session (shutdown, a failed
				// write) and is about to send or has sent its last
				// frame; read on until it has, for at most linger.
				orphaned = true
				deadline = time.Now().Add(srv.linger())
			}
		}
		if s.closing.Load() {
			return ended, 0
		}
		if !orphaned {
			deadline = v.seen.Add(v.lease)
			if !v.partialSince.IsZero() {
				deadline = minTime(deadline, v.partialSince.Add(srv.IOTimeout))
			}
		}
		s.conn.SetReadDeadline(deadline)
		had := len(v.buf)
		err := s.readMore()
		if err != nil && clientHungUp(err) {
			v.hungUp = true
		}
		if orphaned {
			v.buf = v.buf[:0]
		}
		if s.closing.Load() {
			return ended, 0
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			if len(v.buf) > had && !orphaned {
				continue // the bytes read with the error come first
			}
			return locktable.ReasonGraceful, 0
		}
		if orphaned {
			return ended, 0
		}
		now := time.Now()
		if !v.partialSince.IsZero() && !now.Before(v.partialSince.Add(srv.IOTimeout)) {
			srv.Logger.Debug("closing session: frame not completed within io-timeout", "remote_addr", s.peer.Addr)
			return locktable.ReasonIOTimeout, 0
		}
		switch err := s.expireV2(); {
		case err == nil:
			return ended, 0
		case errors.Is(err, locktable.ErrNoSession):
			orphaned = true
			deadline = time.Now().Add(srv.linger())
		}
		// ErrNotExpired: the deadline fired a hair early for the table's
		// strict "more than one lease"; the loop sets it again.
		if !orphaned {
			time.Sleep(time.Millisecond)
		}
	}
}

// openV2 reads HELLO within the io-timeout of accept that run set, opens
// the session in the table and answers WELCOME. It returns a zero reason
// when the session is open.
func (s *session) openV2() (locktable.Reason, protocol.Code) {
	srv := s.srv
	v := &v2conn{buf: make([]byte, 0, v2ReadBuf)}
	s.wmu.Lock()
	srv.mu.Lock()
	s.v2 = v
	srv.v2Sessions++
	srv.mu.Unlock()
	s.wmu.Unlock()

	var hello protocol.Frame
	var readErr error
	for {
		f, n, err := protocol.ParseHello(v.buf)
		if err != nil {
			code, _ := protocol.CodeOf(err)
			return locktable.ReasonProtocolError, code
		}
		if n > 0 {
			hello = f
			v.consume(n)
			v.partialSince = time.Time{}
			if len(v.buf) > 0 {
				v.partialSince = time.Now()
			}
			break
		}
		if readErr != nil {
			return s.readFailure(readErr)
		}
		readErr = s.readMore()
	}

	if srv.leaseTooLong(hello.Lease()) {
		return locktable.ReasonProtocolError, protocol.CodeInvalidLease
	}
	if !s.admitClient() {
		srv.limitHit(LimitClientSession, s.peer, "", 0)
		return locktable.ReasonProtocolError, protocol.CodeLimitReached
	}
	srv.mu.Lock()
	if srv.leaseTooLong(hello.Lease()) {
		// The cluster's ceiling came down since the check above
		// (LongestLease must not miss a session registered after it).
		srv.mu.Unlock()
		return locktable.ReasonProtocolError, protocol.CodeInvalidLease
	}
	now := time.Now()
	err := srv.table.Open(now, s.id, locktable.SessionParams{Lease: hello.Lease(), Peer: s.peer, Label: hello.Label})
	var kept []delivery
	if err == nil {
		srv.claims[s.id] = s
		var w protocol.Frame
		w, kept = s.welcome(now, hello)
		v.appendOut(s, func(b []byte) []byte { return protocol.AppendFrame(b, w) })
	}
	srv.mu.Unlock()
	srv.deliver(kept)
	if err != nil {
		// Only ErrShutdown: the shutdown sends ERROR 0x01.
		return locktable.ReasonShutdown, protocol.CodeShuttingDown
	}
	v.lease, v.label, v.seen, v.flushed = hello.Lease(), hello.Label, now, now
	s.conn.SetDeadline(time.Time{})
	if err := s.flushV2(true); err != nil {
		return writeFailureReason(err), 0
	}
	return 0, 0
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// readMore reads what the socket has into the free part of the buffer.
// It reports bytes read together with an error by leaving them in buf.
func (s *session) readMore() error {
	v := s.v2
	n, err := s.conn.Read(v.buf[len(v.buf):cap(v.buf)])
	v.buf = v.buf[:len(v.buf)+n]
	if n > 0 && v.partialSince.IsZero() {
		v.partialSince = time.Now()
	}
	return err
}

// consume drops the first n bytes of the buffer.
func (v *v2conn) consume(n int) {
	m := copy(v.buf, v.buf[n:])
	v.buf = v.buf[:m]
}

// maxBatchHold is how long one session's batch holds the table mutex
// before it lets the other sessions in between two of its frames.
const maxBatchHold = 200 * time.Microsecond

// batch processes every whole frame in the buffer, in order, under one
// hold of the table mutex when any needs the table (or more than one,
// each at most about maxBatchHold and one frame long), and writes the
// answers, with whatever pushes were decided meanwhile, in one write. It
// returns a session-level fault (a reason and an ERROR code, or a reason
// alone when a write failed), or orphan when the table no longer has the
// session.
func (s *session) batch() (reason locktable.Reason, code protocol.Code, orphan bool) {
	srv, v := s.srv, s.v2
	// The token gate holds back grants, never answers: the tables queue
	// a CLAIM or RANGE set they would grant before the gate
	// (locktable.Table.SetGate, rangelock.Table.SetGate), so requests
	// keep their order across connections.
	node := s.node()
	leaseWait := false
	now := time.Now()
	node.begin(s, now)
	locked := false
	var lockedAt time.Time
	var ds []delivery
	off := 0
	for off < len(v.buf) {
		if locked && time.Since(lockedAt) >= maxBatchHold {
			// Let the other sessions in between this one's frames: a
			// buffer full of costly ones (range sets that search the
			// wait-for graph) would otherwise hold the mutex, and this
			// processor, for all of them.
			srv.mu.Unlock()
			locked = false
			runtime.Gosched()
		}
		f, n, err := protocol.ParseClientFrameMax(v.buf[off:], v.maxFrame())
		if n == 0 && err == nil {
			break
		}
		var ce *protocol.ClaimError
		if err != nil && !errors.As(err, &ce) {
			code, _ = protocol.CodeOf(err)
			reason = locktable.ReasonProtocolError
			break
		}
		if node.leaseFirst(s, f, ce) {
			leaseWait = true // it and the frames after it wait
			break
		}
		off += n
		if s.answerUnlocked(now, f) {
			continue
		}
		if !locked {
			srv.mu.Lock()
			locked = true
			now = time.Now()
			lockedAt = now
			if orphan = s.touchLocked(now); orphan {
				break
			}
		}
		more, c, o := s.answerLocked(now, f, ce)
		ds = append(ds, more...)
		if c != 0 {
			code, reason = c, locktable.ReasonProtocolError
		}
		if orphan = o; c != 0 || o {
			break
		}
	}
	if s.endFrames(off, now, locked, code == 0 && !orphan) {
		orphan = true
	}
	return s.finishBatch(ds, leaseWait, reason, code, orphan)
}

// finishBatch, srv.mu let go, delivers what the batch's frames pushed
// and, when the session goes on, flushes its answers; a batch that
// stopped for the lease (leaseWait) records it and goes on reading.
func (s *session) finishBatch(ds []delivery, leaseWait bool, reason locktable.Reason, code protocol.Code, orphan bool) (locktable.Reason, protocol.Code, bool) {
	srv, v := s.srv, s.v2
	// Pushes to other sessions first: a PROMOTED is on the path of a
	// handover, this session's own answers only on its own.
	srv.deliver(othersOnly(ds, s))
	if code == 0 && !orphan {
		node := s.node()
		node.pump(s)
		if err := s.flushV2(true); err != nil && v.sessionEnd().WriteEnds(wroteToHungUp(err)) {
			return writeFailureReason(err), 0, false
		}
		if leaseWait {
			if !node.recordLease(s) {
				return locktable.ReasonProtocolError, protocol.CodeNotOwner, false
			}
			return s.batch()
		}
	}
	return reason, code, orphan
}

// v2Node is what a version 2 session's batch does beyond this node's
// own tables. A single server's (v2Single) does nothing, so that the
// batch reads as the single server's; a cluster node's (v2Cluster)
// records the session's lease before it may hold anything, relays
// claims to their owners (relay2.go) and answers for the claims a
// planned change moved away (move_export.go).
type v2Node interface {
	// begin starts a batch read at now.
	begin(s *session, now time.Time)
	// leaseFirst tells whether frame f (ce: its claim-level error)
	// waits for the session's lease to be recorded (recordLease).
	leaseFirst(s *session, f protocol.Frame, ce *protocol.ClaimError) bool
	// recordLease records the session's lease, with srv.mu let go;
	// false ends the session with ERROR 0x03.
	recordLease(s *session) bool
	// claimUses tells that a CLAIM uses id (again).
	claimUses(s *session, id uint32)
	// claim answers CLAIM f when this node does not claim it in its own
	// table (relayed to its owner, held, or refused), and tells whether
	// it did. Called with srv.mu held.
	claim(s *session, now time.Time, f protocol.Frame) bool
	// release answers RELEASE id when the claim is not in this node's
	// table (relayed, a relayed watch's, or moved away), and tells
	// whether it did. Called with srv.mu held.
	release(s *session, id uint32) bool
	// pump sends what the batch relayed, before its answers are flushed.
	pump(s *session)
	// ended closes the upstreams of a session whose frames ended for
	// reason, with session-level ERROR code (0: none), releasing its
	// relayed claims first when it does not keep them
	// (clustercore.SessionEnd.ReleasesRelayed).
	ended(s *session, reason locktable.Reason, code protocol.Code)
	// finishing ends the session's relayed watches as it finishes.
	finishing(s *session)
}

// node returns the session's v2Node; neither takes room in a session.
func (s *session) node() v2Node {
	if s.srv.Router != nil {
		return v2Cluster{}
	}
	return v2Single{}
}

type v2Single struct{}

func (v2Single) begin(*session, time.Time)                                      {}
func (v2Single) leaseFirst(*session, protocol.Frame, *protocol.ClaimError) bool { return false }
func (v2Single) recordLease(*session) bool                                      { return true }
func (v2Single) claimUses(*session, uint32)                                     {}
func (v2Single) claim(*session, time.Time, protocol.Frame) bool                 { return false }
func (v2Single) release(*session, uint32) bool                                  { return false }
func (v2Single) pump(*session)                                                  {}
func (v2Single) ended(*session, locktable.Reason, protocol.Code)                {}
func (v2Single) finishing(*session)                                             {}

type v2Cluster struct{}

func (v2Cluster) begin(s *session, now time.Time) {
	if rel := s.v2.rel.Load(); rel != nil {
		rel.box.Read(now)
	}
}

func (v2Cluster) leaseFirst(s *session, f protocol.Frame, ce *protocol.ClaimError) bool {
	return !s.v2.leaseRecorded && clustercore.SessionLeaseFirst(f, ce != nil, s.aclAllows)
}

func (v2Cluster) recordLease(s *session) bool {
	if !s.srv.Router.RecordLease(s.v2.lease) {
		return false
	}
	s.v2.leaseRecorded = true
	return true
}

func (v2Cluster) claimUses(s *session, id uint32) { s.claimUses(id) }

func (v2Cluster) claim(s *session, now time.Time, f protocol.Frame) bool { return s.routeClaim(now, f) }

func (v2Cluster) release(s *session, id uint32) bool {
	return s.relayRelease(id) || s.releaseWatch(id) || s.answerMoved(id)
}

func (v2Cluster) pump(s *session) {
	if s.v2.rel.Load() != nil {
		s.relayPump()
	}
}

func (v2Cluster) ended(s *session, reason locktable.Reason, code protocol.Code) {
	s.dropUpstreams(s.v2.sessionEnd().ReleasesRelayed(reason, code))
}

func (v2Cluster) finishing(s *session) { s.endRelayWatches() }

// aclAllows tells whether the ACL allows the session's client the name.
func (s *session) aclAllows(name string) bool {
	a := s.srv.Authorizer
	return a == nil || a.Allow(s.peer.Identity, name)
}

// answerUnlocked answers the frames that need no srv.mu: PING, RING and
// DETACH. It tells whether f was one of them.
func (s *session) answerUnlocked(now time.Time, f protocol.Frame) bool {
	v := s.v2
	switch f.Type {
	case protocol.TypePing:
		s.srv.observe(Event{Kind: EventHeartbeat, Time: now, Peer: Peer(s.peer), Protocol: protocol.Version2, Session: SessionID(s.id)})
		v.appendOut(s, func(b []byte) []byte { return protocol.AppendPong(b, f.Seq) })
	case protocol.TypeRing:
		s.answerRing(f)
	case protocol.TypeDetach:
		// The client will come back: the connection's end keeps the
		// session, whatever follows.
		v.detached = true
		v.appendOut(s, protocol.AppendDetached)
	default:
		return false
	}
	return true
}

// touchLocked refreshes the lease as the batch takes srv.mu (held):
// every frame read in full does. It tells whether the session is
// orphaned: one the table no longer has was ended by another goroutine,
// and one closing was kept for a resume (resume.go).
func (s *session) touchLocked(now time.Time) (orphan bool) {
	if _, err := s.srv.table.Touch(now, s.id); err != nil || s.closing.Load() {
		return true
	}
	s.v2.flushed = now
	return false
}

// answerLocked answers a frame that reads or changes the tables: RANGE,
// PROCLAIM, WATCH, RELEASE or CLAIM (ce: its claim-level error). Called
// with srv.mu held. A nonzero code ends the session with a protocol
// error; orphan tells that the session was ended elsewhere.
func (s *session) answerLocked(now time.Time, f protocol.Frame, ce *protocol.ClaimError) (ds []delivery, code protocol.Code, orphan bool) {
	switch f.Type {
	case protocol.TypeRange:
		return s.rangeOp(now, f), 0, false
	case protocol.TypeProclaim, protocol.TypeWatch:
		ds, code := s.watchFrame(now, f, ce)
		if code != 0 {
			return nil, code, false
		}
		return ds, 0, false
	case protocol.TypeRelease:
		return s.answerRelease(now, f), 0, false
	}
	return s.answerClaim(now, f, ce)
}

// answerRelease answers a RELEASE: relayed to the claim's owner, a
// watch's end, a claim moved away, or a release in this node's table.
// Called with srv.mu held.
func (s *session) answerRelease(now time.Time, f protocol.Frame) []delivery {
	if s.node().release(s, f.Claim) {
		return nil
	}
	srv := s.srv
	key := locktable.Key{Session: s.id, Claim: locktable.ClaimID(f.Claim)}
	res, _ := srv.table.Release(now, key) // not in use: RELEASED all the same
	ds := srv.commit(now, res)
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendReleased(b, f.Claim) })
	return ds
}

// answerClaim answers a CLAIM (ce: its claim-level error): refused,
// re-asserted, relayed to its owner, or claimed in this node's table.
// Called with srv.mu held; results as answerLocked's.
func (s *session) answerClaim(now time.Time, f protocol.Frame, ce *protocol.ClaimError) (ds []delivery, code protocol.Code, orphan bool) {
	srv, v := s.srv, s.v2
	key := locktable.Key{Session: s.id, Claim: locktable.ClaimID(f.Claim)}
	// The id in use is a session-level fault, checked before the
	// claim-level ones (docs/protocol-v2-server.md, v2 validation 14).
	if s.idInUse(key) {
		return nil, protocol.CodeClaimInUse, false
	}
	s.node().claimUses(s, f.Claim)
	if ce != nil {
		c, _ := protocol.CodeOf(ce.Err)
		s.refuse(f, c)
		return nil, 0, false
	}
	if a := srv.Authorizer; a != nil && !a.Allow(s.peer.Identity, f.Name) {
		srv.notify(Event{Kind: EventDenied, Time: now, Lock: f.Name, Peer: Peer(s.peer), Protocol: protocol.Version2,
			Session: SessionID(s.id), Claim: ClaimID(key.Claim), Mode: Mode(f.Mode), Label: v.label})
		s.refuse(f, protocol.CodeNotAuthorized)
		return nil, 0, false
	}
	if f.HasValue() && !s.valuedClaim(f) {
		return nil, 0, false // refused (watch.go)
	}
	if f.Reassert() {
		return s.reassert(now, f), 0, false // answered, or relayed to its owner (resume.go)
	}
	if s.node().claim(s, now, f) {
		return nil, 0, false // relayed to its owner, held, or refused (relay2.go)
	}
	return s.claimHere(now, f)
}

// claimHere claims f in this node's table and answers GRANTED, QUEUED
// or BUSY, or refuses it. Called with srv.mu held; results as
// answerLocked's.
func (s *session) claimHere(now time.Time, f protocol.Frame) (ds []delivery, code protocol.Code, orphan bool) {
	srv, v := s.srv, s.v2
	key := locktable.Key{Session: s.id, Claim: locktable.ClaimID(f.Claim)}
	st, res, err := srv.table.Claim(now, s.id, key.Claim, locktable.ClaimRequest{
		Name: f.Name, Mode: locktable.Mode(f.Mode), Limit: f.Limit, NoWait: f.NoWait(), Value: f.Value})
	if err != nil {
		if errors.Is(err, locktable.ErrShutdown) || errors.Is(err, locktable.ErrNoSession) {
			return nil, 0, true
		}
		if errors.Is(err, locktable.ErrClaimExists) {
			return nil, protocol.CodeClaimInUse, false
		}
		if limit := tableLimit(err); limit != "" {
			srv.notify(Event{Kind: EventLimit, Time: now, Action: limit, Peer: Peer(s.peer), Lock: f.Name, Session: SessionID(s.id), Claim: ClaimID(key.Claim), Code: protocol.CodeLimitReached})
		}
		s.refuse(f, claimErrorCode(err))
		return nil, 0, false
	}
	if st.State == locktable.Waiting {
		srv.queued[protocol.Version2]++
	}
	ticket := srv.table.Ticket(key)
	ds = srv.commit(now, res)
	v.appendOut(s, func(b []byte) []byte { return v.appendClaimed(b, f.Claim, st, ticket) })
	return ds, 0, false
}

// appendClaimed appends the answer to a CLAIM of claim that the table
// took as st: GRANTED, QUEUED (with ticket, if the session asked for
// tickets), or BUSY.
func (v *v2conn) appendClaimed(b []byte, claim uint32, st locktable.Status, ticket uint64) []byte {
	switch st.State {
	case locktable.Owner:
		return protocol.AppendGranted(b, claim, st.Token)
	case locktable.Waiting:
		return v.appendQueued(b, claim, ticket)
	}
	return protocol.AppendBusy(b, claim)
}

// endFrames consumes the off bytes of frames the batch read and, when
// the batch went well (ok), refreshes the lease if no frame did for a
// while; then it lets go of srv.mu if held (locked). It tells whether
// the session turned out orphaned.
func (s *session) endFrames(off int, now time.Time, locked, ok bool) (orphan bool) {
	srv, v := s.srv, s.v2
	v.consume(off)
	if off > 0 {
		// A frame still partly read began with the last read.
		v.partialSince = time.Time{}
		if len(v.buf) > 0 {
			v.partialSince = now
		}
	}
	if off > 0 && ok {
		v.seen = now
		if !locked && flushDue(now, v.flushed, v.lease) {
			srv.mu.Lock()
			locked = true
			if _, err := srv.table.Touch(now, s.id); err != nil {
				orphan = true
			} else {
				v.flushed = now
			}
		}
	}
	if locked {
		srv.mu.Unlock()
	}
	return orphan
}

// othersOnly drops the flushes of session self from ds: its reader
// flushes itself.
func othersOnly(ds []delivery, self *session) []delivery {
	out := ds[:0]
	for _, d := range ds {
		if !(d.flush && d.to == self) {
			out = append(out, d)
		}
	}
	return out
}

// refuse appends REFUSED(claim, code) for CLAIM f.
func (s *session) refuse(f protocol.Frame, code protocol.Code) {
	s.srv.observe(Event{Kind: EventRefused, Time: time.Now(), Lock: f.Name, Peer: Peer(s.peer), Code: code,
		Protocol: protocol.Version2, Session: SessionID(s.id), Claim: ClaimID(f.Claim), Mode: Mode(f.Mode), Label: s.v2.label})
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRefused(b, f.Claim, code, "") })
}

// claimErrorCode is the REFUSED code of a claim-level error of the table.
func claimErrorCode(err error) protocol.Code {
	switch {
	case errors.Is(err, locktable.ErrModeConflict):
		return protocol.CodeModeConflict
	case errors.Is(err, locktable.ErrLimitMismatch):
		return protocol.CodeLimitMismatch
	case errors.Is(err, locktable.ErrInvalidMode):
		return protocol.CodeUnknownMode
	case errors.Is(err, locktable.ErrInvalidLimit):
		return protocol.CodeInvalidLimit
	case tableLimit(err) != "":
		return protocol.CodeLimitReached
	}
	if c, ok := protocol.CodeOf(err); ok {
		return c
	}
	return protocol.CodeInvalidFrame
}

// expireV2 ends the session if its lease has passed. It returns
// locktable.ErrNotExpired if not, and locktable.ErrNoSession if another
// goroutine has ended it.
func (s *session) expireV2() error {
	srv, v := s.srv, s.v2
	srv.mu.Lock()
	if v.seen.After(v.flushed) {
		if _, err := srv.table.Touch(v.seen, s.id); err != nil {
			srv.mu.Unlock()
			return err
		}
		v.flushed = v.seen
	}
	now := time.Now()
	res, err := srv.table.ExpireSession(now, s.id)
	if err != nil {
		srv.mu.Unlock()
		return err
	}
	ds := srv.commit(now, res)
	// Closing before anyone can see the session gone: a shutdown starting
	// now must not send 0x01 to a session that expired (no frame).
	s.closing.Store(true)
	delete(srv.claims, s.id)
	srv.mu.Unlock()
	srv.deliver(ds)
	return nil
}

// A read buffer must hold one whole frame.
var _ [v2ReadBuf - protocol.MaxFrameSize]struct{}
