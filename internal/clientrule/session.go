package clientrule

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/protocol"
)

// The version 2 rule: one session, many claims (docs/protocol-v2-client.md,
// "v2 client obligations"). Like Rule it does no I/O and reads no clock.
// Received matches every answer against the FIFO of unanswered requests
// and every push against its claim; anything that does not fit closes the
// Session. The anchor is the send time of the latest request answered, and
// pushes never move it. baton.Session follows this rule, and
// internal/modelcheck's CheckSession checks it. The inputs in full:
// docs/design/2026-12-07-go-client.md#internalclientrulesessiongo.

// SessionState is the client's view of its session.
type SessionState uint8

const (
	// SessionIdle: nothing sent yet.
	SessionIdle SessionState = iota
	// SessionOpening: HELLO sent, WELCOME not yet received. Requests may
	// already be sent behind it.
	SessionOpening
	// SessionOpen: WELCOME received.
	SessionOpen
	// SessionClosed: the session is over; every claim is lost.
	SessionClosed
)

func (s SessionState) String() string {
	switch s {
	case SessionIdle:
		return "idle"
	case SessionOpening:
		return "opening"
	case SessionOpen:
		return "open"
	case SessionClosed:
		return "closed"
	}
	return fmt.Sprintf("SessionState(%d)", uint8(s))
}

// ClaimState is the client's view of one claim id.
type ClaimState uint8

const (
	// ClaimFree: no claim with this id, or one that has ended.
	ClaimFree ClaimState = iota
	// ClaimPending: CLAIM sent, not answered yet.
	ClaimPending
	// ClaimQueued: answered QUEUED, not promoted yet.
	ClaimQueued
	// ClaimHeld: granted (GRANTED or PROMOTED); for a watch, synced.
	ClaimHeld
	// ClaimEnded: ended (BUSY, REFUSED, RELEASED, REVOKED) while a
	// request about the id is still unanswered, so the id is not free.
	ClaimEnded
)

func (s ClaimState) String() string {
	return [...]string{"free", "pending", "queued", "held", "ended"}[s]
}

// RequestKind is the type of a request in the FIFO of unanswered ones.
type RequestKind uint8

// The requests of version 2.
const (
	ReqHello RequestKind = iota + 1
	ReqPing
	ReqClaim
	ReqRelease
	ReqWatch    // answered by CHANGE synced (or REFUSED)
	ReqProclaim // answered by PROCLAIMED (or REFUSED 0x24)
)

func (k RequestKind) String() string {
	return [...]string{"?", "HELLO", "PING", "CLAIM", "RELEASE", "WATCH", "PROCLAIM"}[k]
}

// Request is one unanswered request.
type Request struct {
	Kind  RequestKind
	Claim uint32    // CLAIM, RELEASE, WATCH, PROCLAIM
	Seq   uint64    // PING
	Sent  time.Time // when it was recorded, before its write
}

// Event is what a frame did, for the caller to act on. Kind is the
// frame's type; the fields are those of the frame. Releasing reports that
// the claim had a RELEASE outstanding: a GRANTED, QUEUED, PROMOTED or
// REVOKED for it changes nothing for the caller, whose RELEASED follows.
// Answers is the kind of the request an answer answers (0 for a push):
// a REFUSED that answers a PROCLAIM leaves its claim as it was.
type Event struct {
	Kind      protocol.Type
	Claim     uint32
	Token     uint64
	Code      protocol.Code
	Reason    string
	Releasing bool
	Answers   RequestKind
}

// Mutation is a deliberate defect for the model checker's mutation tests;
// a client never uses one.
type Mutation uint8

const (
	// NoMutation is the rule of docs/protocol.md.
	NoMutation Mutation = iota
	// MutAnchorAtReceive moves the anchor to the arrival time of an
	// answer instead of its request's send time.
	MutAnchorAtReceive
	// MutAnchorOnPush moves the anchor to the arrival time of a push
	// (PROMOTED, REVOKED).
	MutAnchorOnPush
)

type claimRec struct {
	state     ClaimState
	releasing bool   // a RELEASE of it is unanswered
	noWait    bool   // asked for BUSY rather than a queue place
	reqs      uint16 // unanswered requests about the id (CLAIM, RELEASE, WATCH, PROCLAIM)
	token     uint64
	watch     bool // the id is a watch's (WATCH), not a claim's
}

// Session is the state of one version 2 session. Make one with
// NewSession. It is not safe for concurrent use.
type Session struct {
	lease time.Duration
	base  time.Duration
	floor time.Duration
	mut   Mutation

	state   SessionState
	pending []Request // unanswered, oldest first, from head
	head    int
	claims  map[uint32]claimRec

	anchor   time.Time
	deadline time.Time
	closeBy  time.Time

	pingSeq      uint64
	pingInflight bool
	pingSent     time.Time
	pongAt       time.Time
	srtt         time.Duration
	sampled      bool
}

// NewSession returns the rule of a session with lease L. minInterval is
// the PING floor as in New.
func NewSession(lease, minInterval time.Duration) *Session {
	return NewSessionMutant(lease, minInterval, NoMutation)
}

// NewSessionMutant is NewSession with a deliberate defect, for the model
// checker.
func NewSessionMutant(lease, minInterval time.Duration, m Mutation) *Session {
	if minInterval <= 0 {
		minInterval = DefaultMinInterval
	}
	base := lease / 4
	return &Session{lease: lease, base: base, floor: min(minInterval, base), mut: m, claims: map[uint32]claimRec{}}
}

// Clone returns an independent copy (for the model checker).
func (s *Session) Clone() *Session {
	c := *s
	c.pending = append([]Request(nil), s.pending[s.head:]...)
	c.head = 0
	c.claims = make(map[uint32]claimRec, len(s.claims))
	for id, r := range s.claims {
		c.claims[id] = r
	}
	return &c
}

// Lease returns the session lease.
func (s *Session) Lease() time.Duration { return s.lease }

// State returns the session state.
func (s *Session) State() SessionState { return s.state }

// Live reports whether the session may still send requests: opening or
// open.
func (s *Session) Live() bool { return s.state == SessionOpening || s.state == SessionOpen }

// Anchor returns the confirmation anchor; before the first answer, the
// send time of HELLO.
func (s *Session) Anchor() time.Time { return s.anchor }

// Deadline returns the give-up time, anchor + 0.8·L.
func (s *Session) Deadline() time.Time { return s.deadline }

// CloseBy returns anchor + L, the latest close after a give-up. It does
// not change once the session is closed.
func (s *Session) CloseBy() time.Time { return s.closeBy }

// SRTT returns the smoothed PING round trip, 0 before the first PONG.
func (s *Session) SRTT() time.Duration { return s.srtt }

// Interval returns clamp(L/4 − 2·srtt, floor, L/4).
func (s *Session) Interval() time.Duration { return max(s.floor, min(s.base, s.base-2*s.srtt)) }

// Pending returns the number of unanswered requests.
func (s *Session) Pending() int { return len(s.pending) - s.head }

// Oldest returns the oldest unanswered request; ok is false when there
// is none.
func (s *Session) Oldest() (r Request, ok bool) {
	if s.head == len(s.pending) {
		return Request{}, false
	}
	return s.pending[s.head], true
}

// Requests returns a copy of the unanswered requests, oldest first (for
// the model checker).
func (s *Session) Requests() []Request { return append([]Request(nil), s.pending[s.head:]...) }

// Claim returns the state of claim id and its token (0 unless held).
func (s *Session) Claim(id uint32) (ClaimState, uint64) {
	r := s.claims[id]
	return r.state, r.token
}

// Claims returns the number of ids not free.
func (s *Session) Claims() int { return len(s.claims) }

// Free reports whether id may be used for a new CLAIM: the claim with it
// has ended (or never was) and no request about it is unanswered.
func (s *Session) Free(id uint32) bool {
	_, used := s.claims[id]
	return !used
}

// Releasing reports whether a RELEASE of id is unanswered.
func (s *Session) Releasing(id uint32) bool { return s.claims[id].releasing }

func (s *Session) push(r Request) {
	if s.head > 0 && s.head >= len(s.pending)/2 {
		// Compact: amortized O(1), and the slice never grows beyond
		// twice the requests unanswered at once.
		n := copy(s.pending, s.pending[s.head:])
		clear(s.pending[n:])
		s.pending, s.head = s.pending[:n], 0
	}
	s.pending = append(s.pending, r)
}

// SentHello records the opening at t. It panics unless the Session is
// idle.
func (s *Session) SentHello(t time.Time) {
	if s.state != SessionIdle {
		panic("clientrule: SentHello in state " + s.state.String())
	}
	s.state = SessionOpening
	s.push(Request{Kind: ReqHello, Sent: t})
	s.pingSent = t
	s.setAnchor(t)
}

// SentClaim records a CLAIM with id at t; noWait is its ClaimNoWait flag.
// It returns an error, and records nothing, when the session is not live
// or id is not free.
func (s *Session) SentClaim(id uint32, noWait bool, t time.Time) error {
	return s.sentNew(Request{Kind: ReqClaim, Claim: id, Sent: t}, claimRec{state: ClaimPending, reqs: 1, noWait: noWait})
}

// sentNew records req, which starts id's use as r.
func (s *Session) sentNew(req Request, r claimRec) error {
	if !s.Live() {
		return fmt.Errorf("clientrule: %v on a %v session", req.Kind, s.state)
	}
	if !s.Free(req.Claim) {
		return fmt.Errorf("clientrule: claim id %d is not free", req.Claim)
	}
	s.claims[req.Claim] = r
	s.push(req)
	return nil
}

// SentRelease records a RELEASE of id at t. It returns an error, and
// records nothing, when the session is not live or the claim is not
// pending, queued or held, or is already being released.
func (s *Session) SentRelease(id uint32, t time.Time) error {
	if !s.Live() {
		return fmt.Errorf("clientrule: RELEASE on a %v session", s.state)
	}
	r, ok := s.claims[id]
	if !ok || r.state == ClaimEnded || r.releasing {
		return fmt.Errorf("clientrule: RELEASE of claim %d in state %v (releasing %v)", id, r.state, r.releasing)
	}
	r.releasing = true
	r.reqs++
	s.claims[id] = r
	s.push(Request{Kind: ReqRelease, Claim: id, Sent: t})
	return nil
}

// SentWatch records a WATCH with id at t, as SentClaim records a CLAIM:
// a watch takes an id from the session's claim ids.
func (s *Session) SentWatch(id uint32, t time.Time) error {
	return s.sentNew(Request{Kind: ReqWatch, Claim: id, Sent: t}, claimRec{state: ClaimPending, reqs: 1, watch: true})
}

// SentProclaim records a PROCLAIM of claim id at t. It returns an error,
// and records nothing, when the session is not live or id is not a
// claim's that is pending, queued or held.
func (s *Session) SentProclaim(id uint32, t time.Time) error {
	if !s.Live() {
		return fmt.Errorf("clientrule: PROCLAIM on a %v session", s.state)
	}
	r, ok := s.claims[id]
	if !ok || r.watch || r.state == ClaimEnded {
		return fmt.Errorf("clientrule: PROCLAIM of claim %d in state %v (watch %v)", id, r.state, r.watch)
	}
	r.reqs++
	s.claims[id] = r
	s.push(Request{Kind: ReqProclaim, Claim: id, Sent: t})
	return nil
}

// NextPing returns when the next PING is due: max(previous PING's send +
// Interval, arrival of its PONG). ok is false while a PING is in flight
// and unless the session is open.
func (s *Session) NextPing() (t time.Time, ok bool) {
	if s.pingInflight || s.state != SessionOpen {
		return time.Time{}, false
	}
	t = s.pingSent.Add(s.Interval())
	if s.pongAt.After(t) {
		t = s.pongAt
	}
	return t, true
}

// SentPing records a PING at t and returns its sequence number. It panics
// when NextPing would report ok == false.
func (s *Session) SentPing(t time.Time) uint64 {
	if _, ok := s.NextPing(); !ok {
		panic("clientrule: SentPing not allowed")
	}
	s.pingSeq++
	s.pingInflight = true
	s.pingSent = t
	s.push(Request{Kind: ReqPing, Seq: s.pingSeq, Sent: t})
	return s.pingSeq
}

// Expire closes the session and reports true if it is live and t is
// after the deadline.
func (s *Session) Expire(t time.Time) bool {
	if !s.Live() || !t.After(s.deadline) {
		return false
	}
	s.state = SessionClosed
	return true
}

// Close ends the session (ERROR, EOF, a failed write, local close).
func (s *Session) Close() { s.state = SessionClosed }

func (s *Session) setAnchor(t time.Time) {
	s.anchor = t
	s.deadline = t.Add(GiveUpAfter(s.lease))
	s.closeBy = t.Add(CloseAfter(s.lease))
}

// Received processes a server frame that arrived at t and returns what it
// did. Errors: ErrExpired (the frame came after the deadline: a give-up)
// and ErrViolation, wrapped with the details; both leave the Session
// closed. A session-level ERROR closes the Session and is returned as an
// event. A frame on a closed Session is ignored (zero Event, nil).
func (s *Session) Received(f protocol.Frame, t time.Time) (Event, error) {
	switch s.state {
	case SessionClosed:
		return Event{}, nil
	case SessionIdle:
		return Event{}, s.violate("%v before HELLO was sent", f)
	}
	if t.After(s.deadline) {
		s.state = SessionClosed
		return Event{}, ErrExpired
	}
	ev := Event{Kind: f.Type, Claim: f.Claim, Token: f.Token, Code: f.Code, Reason: f.Reason}
	switch f.Type {
	case protocol.TypeSessionError:
		s.state = SessionClosed
		return ev, nil
	case protocol.TypePromoted, protocol.TypeRevoked:
		if r := s.claims[f.Claim]; !(f.Type == protocol.TypeRevoked && r.watch && r.state == ClaimPending) {
			return s.pushed(f, t, ev)
		}
		// A watch dropped (slow watcher) before its synced was sent:
		// the REVOKED takes the synced's place as the WATCH's answer.
	case protocol.TypeChange:
		if r := s.claims[f.Claim]; !(f.Change == protocol.ChangeSynced && r.watch && r.state == ClaimPending) {
			return s.changed(f, ev)
		}
		// The synced that ends a new watch's state answers its WATCH.
	case protocol.TypeWelcome, protocol.TypePong, protocol.TypeGranted, protocol.TypeQueued,
		protocol.TypeBusy, protocol.TypeRefused, protocol.TypeReleased, protocol.TypeProclaimed:
	default:
		return Event{}, s.violate("unexpected %v", f)
	}
	req, ok := s.Oldest()
	if !ok {
		return Event{}, s.violate("%v with no request unanswered", f)
	}
	if !fits(req, f) {
		return Event{}, s.violate("%v does not answer the oldest request, %v(claim %d, seq %d)", f, req.Kind, req.Claim, req.Seq)
	}
	if f.Type == protocol.TypeWelcome && f.Flags != 0 {
		return Event{}, s.violate("WELCOME with reserved flags 0x%02x", f.Flags)
	}
	switch noWait := s.claims[f.Claim].noWait; {
	case f.Type == protocol.TypeQueued && noWait:
		return Event{}, s.violate("%v for a no-wait claim", f)
	case f.Type == protocol.TypeBusy && !noWait:
		return Event{}, s.violate("%v for a claim that waits", f)
	}
	s.head++
	ev.Answers = req.Kind
	if s.mut == MutAnchorAtReceive {
		s.setAnchor(t)
	} else {
		s.setAnchor(req.Sent)
	}
	switch f.Type {
	case protocol.TypeWelcome:
		s.state = SessionOpen
		s.pongAt = t
	case protocol.TypePong:
		s.pingInflight = false
		s.pongAt = t
		rtt := max(t.Sub(req.Sent), 0)
		if s.sampled {
			s.srtt += (rtt - s.srtt) / 5
		} else {
			s.srtt, s.sampled = rtt, true
		}
	case protocol.TypeChange, protocol.TypeProclaimed:
		r := s.claims[f.Claim]
		r.reqs--
		ev.Releasing = r.releasing
		if f.Type == protocol.TypeChange {
			r.state = ClaimHeld
		}
		s.store(f.Claim, r)
	case protocol.TypeGranted, protocol.TypeQueued, protocol.TypeBusy, protocol.TypeRefused, protocol.TypeRevoked:
		r := s.claims[f.Claim] // exists: fits checked the request
		r.reqs--
		ev.Releasing = r.releasing
		switch {
		case req.Kind == ReqProclaim:
			// A refused PROCLAIM (a value too long) changes nothing.
		case f.Type == protocol.TypeGranted:
			r.state, r.token = ClaimHeld, f.Token
		case f.Type == protocol.TypeQueued:
			r.state = ClaimQueued
		default:
			r.state = ClaimEnded
		}
		s.store(f.Claim, r)
	case protocol.TypeReleased:
		r := s.claims[f.Claim]
		r.reqs--
		r.releasing = false
		r.state = ClaimEnded
		s.store(f.Claim, r)
	}
	return ev, nil
}

// changed handles a CHANGE that is a push: one for a watch that is
// being answered (its current holders, before the synced that answers
// the WATCH) or synced, or that a RELEASE is ending. Pushes do not move
// the anchor.
func (s *Session) changed(f protocol.Frame, ev Event) (Event, error) {
	r, ok := s.claims[f.Claim]
	switch {
	case !ok || !r.watch:
		return Event{}, s.violate("%v for claim %d, which is not a watch", f, f.Claim)
	case r.state != ClaimPending && r.state != ClaimHeld:
		return Event{}, s.violate("%v for watch %d in state %v", f, f.Claim, r.state)
	}
	ev.Releasing = r.releasing
	return ev, nil
}

// pushed handles PROMOTED and REVOKED.
func (s *Session) pushed(f protocol.Frame, t time.Time, ev Event) (Event, error) {
	r, ok := s.claims[f.Claim]
	switch {
	case !ok:
		return Event{}, s.violate("%v for claim %d, which is not a claim", f, f.Claim)
	case f.Type == protocol.TypePromoted && r.watch:
		return Event{}, s.violate("%v for watch %d", f, f.Claim)
	case f.Type == protocol.TypePromoted && r.state != ClaimQueued:
		return Event{}, s.violate("%v for claim %d in state %v", f, f.Claim, r.state)
	case f.Type == protocol.TypeRevoked && r.state != ClaimQueued && r.state != ClaimHeld:
		return Event{}, s.violate("%v for claim %d in state %v", f, f.Claim, r.state)
	}
	if s.mut == MutAnchorOnPush {
		s.setAnchor(t)
	}
	ev.Releasing = r.releasing
	if f.Type == protocol.TypePromoted {
		r.state, r.token = ClaimHeld, f.Token
	} else {
		r.state = ClaimEnded
	}
	s.store(f.Claim, r)
	return ev, nil
}

// store keeps r, or forgets the id once it has ended and nothing about
// it is unanswered.
func (s *Session) store(id uint32, r claimRec) {
	if r.state == ClaimEnded && r.reqs == 0 {
		delete(s.claims, id)
		return
	}
	s.claims[id] = r
}

// fits reports whether answer f fits request req.
func fits(req Request, f protocol.Frame) bool {
	switch f.Type {
	case protocol.TypeWelcome:
		return req.Kind == ReqHello
	case protocol.TypePong:
		return req.Kind == ReqPing && req.Seq == f.Seq
	case protocol.TypeGranted, protocol.TypeQueued, protocol.TypeBusy:
		return req.Kind == ReqClaim && req.Claim == f.Claim
	case protocol.TypeRefused:
		return (req.Kind == ReqClaim || req.Kind == ReqWatch || (req.Kind == ReqProclaim && f.Code == protocol.CodeValueTooLong)) && req.Claim == f.Claim
	case protocol.TypeReleased:
		return req.Kind == ReqRelease && req.Claim == f.Claim
	case protocol.TypeChange, protocol.TypeRevoked:
		return req.Kind == ReqWatch && req.Claim == f.Claim
	case protocol.TypeProclaimed:
		return req.Kind == ReqProclaim && req.Claim == f.Claim
	}
	return false
}

func (s *Session) violate(format string, args ...any) error {
	s.state = SessionClosed
	return fmt.Errorf("%w: %s", ErrViolation, fmt.Sprintf(format, args...))
}
