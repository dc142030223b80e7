package modelcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// SessionConfig bounds the version 2 client-rule model: one client
// session following internal/clientrule's Session (docs/protocol-v2-client.md, "v2
// client obligations" 2-5) with two claims on two locks, the work each
// guards, the server's session and a FIFO channel each way, in discrete
// time steps. It is the v2 counterpart of ClientConfig, and the client
// it models is baton.Session.
type SessionConfig struct {
	// Lease is the session lease in time steps.
	Lease int
	// MaxDelay is the longest a frame spends in the channel, in steps.
	MaxDelay int
	// TimerLag is how many steps late the client's give-up and close-by
	// timers may fire.
	TimerLag int
	// WorkStop is the longest a claim's work takes to stop once told.
	WorkStop int

	// Mutation, when not empty, is one of SessionMutations: a rule of
	// the client dropped, so that the check must fail.
	Mutation string
}

// SessionMutations are the defects CheckSession must catch:
// anchor-at-receive (the anchor is an answer's arrival, not its
// request's send time), anchor-on-push (a pushed PROMOTED moves the
// anchor), close-at-giveup (the connection is closed at the give-up,
// before the work has stopped) and close-before-cancel (closed before the
// work is told).
var SessionMutations = []string{"anchor-at-receive", "anchor-on-push", "close-at-giveup", "close-before-cancel"}

// mutations returns the rule mutation and the close rule of c.Mutation.
func (c SessionConfig) mutations() (clientrule.Mutation, closeRule) {
	switch c.Mutation {
	case "anchor-at-receive":
		return clientrule.MutAnchorAtReceive, closeWhenStopped
	case "anchor-on-push":
		return clientrule.MutAnchorOnPush, closeWhenStopped
	case "close-at-giveup":
		return clientrule.NoMutation, closeAtGiveUp
	case "close-before-cancel":
		return clientrule.NoMutation, closeBeforeCancel
	}
	return clientrule.NoMutation, closeWhenStopped
}

// DefaultSessionConfig is the configuration CI always checks: a lease of
// 10 steps, delays of 0 or 1 step, a timer up to one step late, work that
// takes up to 3 steps to stop (more than the lease's last fifth), two
// claims on one session. Larger bounds multiply the states quickly: delays
// up to 3 steps make it 7 million states.
func DefaultSessionConfig() SessionConfig {
	return SessionConfig{Lease: 10, MaxDelay: 1, TimerLag: 1, WorkStop: 3}
}

func (c SessionConfig) String() string {
	s := fmt.Sprintf("lease %s, delays 0..%d, timer lag ≤ %s, work stops within %s, 2 claims",
		plural(c.Lease, "step"), c.MaxDelay, plural(c.TimerLag, "step"), plural(c.WorkStop, "step"))
	if c.Mutation != "" {
		s += ", mutation: " + c.Mutation
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c SessionConfig) Validate() error {
	switch {
	case c.Lease < 4 || c.Lease > 100:
		return fmt.Errorf("lease must be 4..100 steps, not %d", c.Lease)
	case c.MaxDelay < 0 || c.MaxDelay > 20:
		return fmt.Errorf("max delay must be 0..20 steps, not %d", c.MaxDelay)
	case c.TimerLag < 0 || c.TimerLag > 20:
		return fmt.Errorf("timer lag must be 0..20 steps, not %d", c.TimerLag)
	case c.WorkStop < 0 || c.WorkStop > 20:
		return fmt.Errorf("work stop must be 0..20 steps, not %d", c.WorkStop)
	case c.Mutation != "" && !slices.Contains(SessionMutations, c.Mutation):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(SessionMutations, ", "), c.Mutation)
	}
	return nil
}

// Property names reported by the v2 client-rule model.
const (
	PropSessionOwner = "whenever the client believes it holds a claim, the server has the session open and the claim held"
	PropSessionWork  = "the server never ends a held claim while the client's work for it runs, unless anchor + lease has passed"
	PropSessionProto = "a correct server never looks like a protocol violation to the v2 client"
)

// sessClaims is the number of claims in the model: ids 1 and 2, on two
// different locks, each claimed at most once.
const sessClaims = 2

type v2Kind uint8

const (
	v2Hello    v2Kind = iota + 1 // client to server
	v2Ping                       // client to server
	v2Claim                      // client to server
	v2Release                    // client to server
	v2FIN                        // client to server: the client closed
	v2Welcome                    // server to client
	v2Pong                       // server to client
	v2Granted                    // server to client
	v2Queued                     // server to client
	v2Released                   // server to client
	v2Promoted                   // server to client (push)
	v2EOF                        // server to client: the server closed
)

func (k v2Kind) String() string {
	return [...]string{"?", "HELLO", "PING", "CLAIM", "RELEASE", "FIN", "WELCOME", "PONG", "GRANTED", "QUEUED", "RELEASED", "PROMOTED", "EOF"}[k]
}

type v2Frame struct {
	kind v2Kind
	id   uint8  // claim id, 0 for none
	seq  uint64 // PING, PONG
	age  uint8
}

func (f v2Frame) String() string {
	switch {
	case f.id != 0:
		return fmt.Sprintf("%v(%d)", f.kind, f.id)
	case f.kind == v2Ping || f.kind == v2Pong:
		return fmt.Sprintf("%v(%d)", f.kind, f.seq)
	}
	return f.kind.String()
}

// v2Chan is one direction of the connection, FIFO.
type v2Chan struct {
	n int
	f [10]v2Frame
}

func (c *v2Chan) push(f v2Frame) {
	if c.n == len(c.f) {
		panic("modelcheck: channel overflow")
	}
	c.f[c.n] = f
	c.n++
}

func (c *v2Chan) pop() v2Frame {
	f := c.f[0]
	copy(c.f[:], c.f[1:c.n])
	c.n--
	c.f[c.n] = v2Frame{}
	return f
}

type srvClaim uint8

const (
	scFree srvClaim = iota
	scQueued
	scHeld
)

type v2State struct {
	now     time.Time
	rule    *clientrule.Session // cloned before every change
	closed  bool                // FIN sent or EOF read
	used    [sessClaims]bool    // the id has been claimed
	work    [sessClaims]workState
	toldAt  [sessClaims]time.Time
	up      v2Chan
	down    v2Chan
	srvOpen bool // the server's session is open
	srvEnd  bool // ... and has ended
	srv     [sessClaims]srvClaim
	seen    time.Time // the server's lastSeenAt
}

type sessActKind uint8

const (
	sTick        sessActKind = iota + 1
	sSendHello               // the client opens
	sSendPing                // the client sends PING (any time the rule allows one)
	sSendClaim               // the client sends CLAIM(id)
	sWorkDone                // id's work returns on its own; the client sends RELEASE
	sCancel                  // the client gives up waiting for id (queued): RELEASE
	sGiveUp                  // the client's give-up timer fires
	sWorkStops               // id's work, told to stop, returns
	sCloseHeld               // the client closes the connection it kept open after a give-up
	sTellWork                // mutation closeBeforeCancel: the work is told after the close
	sClientRecv              // the client reads the next frame
	sSrvRecv                 // the server reads the next frame; a CLAIM finds its lock free
	sSrvRecvBusy             // the server reads a CLAIM whose lock another session holds
	sSrvPromote              // id's lock is released by its other holder: PROMOTED(id)
	sSrvExpire               // the server expires the session
)

type sessAct struct {
	k  sessActKind
	id uint8 // 1-based claim id for per-claim actions
}

type sessModel struct {
	cfg   SessionConfig
	lease time.Duration
	mut   clientrule.Mutation
	close closeRule
}

func (m *sessModel) initial() v2State {
	return v2State{now: epoch, rule: clientrule.NewSessionMutant(m.lease, 0, m.mut)}
}

// believes: the client believes it holds claim id.
func (s *v2State) believes(id uint8) bool {
	st, _ := s.rule.Claim(uint32(id))
	return s.rule.Live() && st == clientrule.ClaimHeld && !s.rule.Releasing(uint32(id))
}

func (s *v2State) running(i int) bool { return s.work[i] == wRunning || s.work[i] == wTold }

func (s *v2State) anyRunning() bool {
	for i := range sessClaims {
		if s.running(i) {
			return true
		}
	}
	return false
}

// holding: the client gave up but keeps its connection open.
func (s *v2State) holding() bool {
	return s.rule.State() == clientrule.SessionClosed && !s.closed
}

func (m *sessModel) enabled(s *v2State) []sessAct {
	var acts []sessAct
	live := s.rule.Live() && !s.closed
	if s.rule.State() == clientrule.SessionIdle {
		acts = append(acts, sessAct{k: sSendHello})
	}
	if _, ok := s.rule.NextPing(); ok && live {
		acts = append(acts, sessAct{k: sSendPing})
	}
	for i := range sessClaims {
		id := uint8(i + 1)
		st, _ := s.rule.Claim(uint32(id))
		if live && !s.used[i] {
			acts = append(acts, sessAct{k: sSendClaim, id: id})
		}
		if live && s.work[i] == wRunning && s.believes(id) {
			acts = append(acts, sessAct{k: sWorkDone, id: id})
		}
		if live && st == clientrule.ClaimQueued && !s.rule.Releasing(uint32(id)) {
			acts = append(acts, sessAct{k: sCancel, id: id})
		}
		if s.work[i] == wTold {
			acts = append(acts, sessAct{k: sWorkStops, id: id})
		}
		if s.work[i] == wRunning && s.rule.State() == clientrule.SessionClosed {
			acts = append(acts, sessAct{k: sTellWork, id: id}) // only the closeBeforeCancel mutant
		}
		if s.srvOpen && !s.srvEnd && s.srv[i] == scQueued {
			acts = append(acts, sessAct{k: sSrvPromote, id: id})
		}
	}
	if s.rule.Live() && s.now.After(s.rule.Deadline()) {
		acts = append(acts, sessAct{k: sGiveUp})
	}
	if s.holding() && (!s.anyRunning() || !s.now.Before(s.rule.CloseBy())) {
		acts = append(acts, sessAct{k: sCloseHeld})
	}
	if s.down.n > 0 {
		acts = append(acts, sessAct{k: sClientRecv})
	}
	if s.up.n > 0 {
		acts = append(acts, sessAct{k: sSrvRecv})
		if s.up.f[0].kind == v2Claim && !s.srvEnd {
			acts = append(acts, sessAct{k: sSrvRecvBusy})
		}
	}
	if s.srvOpen && !s.srvEnd && s.now.Sub(s.seen) > m.lease {
		acts = append(acts, sessAct{k: sSrvExpire})
	}
	if m.canTick(s) {
		acts = append(acts, sessAct{k: sTick})
	}
	return acts
}

func (m *sessModel) canTick(s *v2State) bool {
	for _, c := range []*v2Chan{&s.up, &s.down} {
		for i := range c.n {
			if int(c.f[i].age) >= m.cfg.MaxDelay {
				return false
			}
		}
	}
	lag := time.Duration(m.cfg.TimerLag) * clientStep
	switch {
	case s.rule.Live() && s.now.Add(-lag).After(s.rule.Deadline()):
		return false
	case s.holding() && !s.now.Add(-lag).Before(s.rule.CloseBy()):
		return false
	}
	for i := range sessClaims {
		switch {
		case s.work[i] == wTold && s.now.Sub(s.toldAt[i]) >= time.Duration(m.cfg.WorkStop)*clientStep:
			return false
		case s.work[i] == wRunning && s.rule.State() == clientrule.SessionClosed:
			return false
		}
	}
	return true
}

func (m *sessModel) apply(s v2State, act sessAct, describe bool) (v2State, string, *failure) {
	s.rule = s.rule.Clone()
	var line string
	say := func(format string, args ...any) {
		if describe {
			line = fmt.Sprintf("t=%-3d ", m.t(s.now)) + fmt.Sprintf(format, args...)
		}
	}
	var f *failure
	func() {
		defer func() {
			if p := recover(); p != nil {
				f = fail(PropClientPresent, "clientrule panicked: %v", p)
			}
		}()
		i := int(act.id) - 1
		switch act.k {
		case sTick:
			s.now = s.now.Add(clientStep)
			for _, c := range []*v2Chan{&s.up, &s.down} {
				for j := range c.n {
					c.f[j].age++
				}
			}
			say(tickLine)
		case sSendHello:
			s.rule.SentHello(s.now)
			s.up.push(v2Frame{kind: v2Hello})
			say("client sends PREAMBLE+HELLO; gives up after t=%s unless answered", m.ts(s.rule.Deadline()))
		case sSendPing:
			seq := s.rule.SentPing(s.now)
			s.up.push(v2Frame{kind: v2Ping, seq: seq})
			say("client sends PING(%d)", seq)
		case sSendClaim:
			if err := s.rule.SentClaim(uint32(act.id), false, s.now); err != nil {
				f = fail(PropClientPresent, "SentClaim: %v", err)
				return
			}
			s.used[i] = true
			s.up.push(v2Frame{kind: v2Claim, id: act.id})
			say("client sends CLAIM(%d)", act.id)
		case sWorkDone, sCancel:
			s.work[i] = max(s.work[i], wStopped)
			if err := s.rule.SentRelease(uint32(act.id), s.now); err != nil {
				f = fail(PropClientPresent, "SentRelease: %v", err)
				return
			}
			s.up.push(v2Frame{kind: v2Release, id: act.id})
			if act.k == sWorkDone {
				say("claim %d's work returns; client sends RELEASE(%d)", act.id, act.id)
			} else {
				say("client stops waiting for claim %d: sends RELEASE(%d)", act.id, act.id)
			}
		case sGiveUp:
			if !s.rule.Expire(s.now) {
				f = fail(PropClientPresent, "the rule refused to give up at t=%d after its deadline t=%s", m.t(s.now), m.ts(s.rule.Deadline()))
			}
			say("client's give-up timer fires (deadline t=%s): every claim lost, %s", m.ts(s.rule.Deadline()), m.giveUp(&s))
		case sWorkStops:
			s.work[i] = wStopped
			say("claim %d's work returns, %d steps after it was told to stop", act.id, m.t(s.now)-m.t(s.toldAt[i]))
		case sCloseHeld:
			why := "every claim's work has stopped"
			if s.anyRunning() {
				why = fmt.Sprintf("close-by time t=%s (anchor + lease) has come, work still running", m.ts(s.rule.CloseBy()))
			}
			m.clientClose(&s)
			say("client closes the connection it kept open: %s", why)
		case sTellWork:
			m.tell(&s, i)
			say("client tells claim %d's work to stop, after the close", act.id)
		case sClientRecv:
			f = m.clientRecv(&s, say)
		case sSrvRecv, sSrvRecvBusy:
			f = m.serverRecv(&s, act.k == sSrvRecvBusy, say)
		case sSrvPromote:
			s.srv[i] = scHeld
			s.down.push(v2Frame{kind: v2Promoted, id: act.id})
			say("the other holder of claim %d's lock releases: server pushes PROMOTED(%d)", act.id, act.id)
		case sSrvExpire:
			f = m.overlap(&s, -1)
			s.srvEnd = true
			s.srv = [sessClaims]srvClaim{}
			s.down.push(v2Frame{kind: v2EOF})
			say("server expires the session (last seen t=%d, %d steps ago > lease %d): every claim ends, connection closed",
				m.t(s.seen), m.t(s.now)-m.t(s.seen), m.cfg.Lease)
		}
	}()
	if f == nil {
		for i := range sessClaims {
			id := uint8(i + 1)
			if s.believes(id) && (!s.srvOpen || s.srvEnd || s.srv[i] != scHeld) {
				f = fail(PropSessionOwner, "at t=%d the client believes it holds claim %d (anchor t=%s, gives up after t=%s) but at the server it is not held",
					m.t(s.now), id, m.ts(s.rule.Anchor()), m.ts(s.rule.Deadline()))
				break
			}
		}
	}
	return s, line, f
}

func (m *sessModel) clientRecv(s *v2State, say func(string, ...any)) *failure {
	fr := s.down.pop()
	if fr.kind == v2EOF {
		s.rule.Close()
		s.closed = true
		for i := range sessClaims {
			m.tell(s, i)
		}
		say("client reads EOF: every claim lost, work told to stop")
		return nil
	}
	if s.closed {
		say("client ignores %v: its connection is closed", fr)
		return nil
	}
	pf := protocol.Frame{Claim: uint32(fr.id), Seq: fr.seq, Token: 1}
	switch fr.kind {
	case v2Welcome:
		pf.Type = protocol.TypeWelcome
	case v2Pong:
		pf.Type = protocol.TypePong
	case v2Granted:
		pf.Type = protocol.TypeGranted
	case v2Queued:
		pf.Type = protocol.TypeQueued
	case v2Released:
		pf.Type = protocol.TypeReleased
	case v2Promoted:
		pf.Type = protocol.TypePromoted
	}
	_, err := s.rule.Received(pf, s.now)
	var then string
	switch {
	case errors.Is(err, clientrule.ErrViolation):
		return fail(PropSessionProto, "the client took %v from a correct server as a protocol violation: %v", fr, err)
	case err != nil: // ErrExpired: a give-up
		then = "; every claim lost, " + m.giveUp(s)
	default:
		for i := range sessClaims {
			if s.believes(uint8(i+1)) && s.work[i] == wNone {
				s.work[i] = wRunning
				then += fmt.Sprintf("; claim %d's work starts", i+1)
			}
		}
	}
	say("client reads %v (anchor t=%s, gives up after t=%s)%s%s", fr, m.ts(s.rule.Anchor()), m.ts(s.rule.Deadline()), errSuffix(err), then)
	return nil
}

func (m *sessModel) serverRecv(s *v2State, busy bool, say func(string, ...any)) *failure {
	fr := s.up.pop()
	if s.srvEnd {
		say("server ignores %v: the session has ended", fr)
		return nil
	}
	i := int(fr.id) - 1
	switch fr.kind {
	case v2FIN:
		f := m.overlap(s, -1)
		s.srvEnd = true
		s.srv = [sessClaims]srvClaim{}
		say("server reads the client's close: session ended, every claim released")
		return f
	case v2Hello:
		s.srvOpen = true
		s.down.push(v2Frame{kind: v2Welcome})
		say("server reads HELLO: replies WELCOME")
	case v2Ping:
		s.down.push(v2Frame{kind: v2Pong, seq: fr.seq})
		say("server reads %v: replies PONG(%d)", fr, fr.seq)
	case v2Claim:
		if busy {
			s.srv[i] = scQueued
			s.down.push(v2Frame{kind: v2Queued, id: fr.id})
			say("server reads %v; another session holds the lock: replies QUEUED(%d)", fr, fr.id)
		} else {
			s.srv[i] = scHeld
			s.down.push(v2Frame{kind: v2Granted, id: fr.id})
			say("server reads %v; the lock is free: replies GRANTED(%d)", fr, fr.id)
		}
	case v2Release:
		f := m.overlap(s, i)
		s.srv[i] = scFree
		s.down.push(v2Frame{kind: v2Released, id: fr.id})
		say("server reads %v: claim released, replies RELEASED(%d)", fr, fr.id)
		if f != nil {
			return f
		}
	}
	s.seen = s.now
	return nil
}

// giveUp acts out a give-up by the client's close rule.
func (m *sessModel) giveUp(s *v2State) string {
	switch m.close {
	case closeAtGiveUp:
		for i := range sessClaims {
			m.tell(s, i)
		}
		m.clientClose(s)
		return "work told to stop, connection closed"
	case closeBeforeCancel:
		m.clientClose(s)
		return "connection closed (the work is not told yet)"
	}
	for i := range sessClaims {
		m.tell(s, i)
	}
	if !s.anyRunning() {
		m.clientClose(s)
		return "no work runs: connection closed"
	}
	return fmt.Sprintf("work told to stop, connection kept open until it stops or t=%s (anchor + lease)", m.ts(s.rule.CloseBy()))
}

func (m *sessModel) tell(s *v2State, i int) {
	if s.work[i] == wRunning {
		s.work[i], s.toldAt[i] = wTold, s.now
	}
}

func (m *sessModel) clientClose(s *v2State) {
	if !s.closed {
		s.closed = true
		s.up.push(v2Frame{kind: v2FIN})
	}
}

// overlap checks PropSessionWork when the server is about to end claim i
// (every held claim when i is -1).
func (m *sessModel) overlap(s *v2State, i int) *failure {
	for j := range sessClaims {
		if (i >= 0 && j != i) || s.srv[j] != scHeld || !s.running(j) {
			continue
		}
		a := s.rule.Anchor()
		if !s.now.Before(a.Add(m.lease)) {
			continue
		}
		return fail(PropSessionWork, "at t=%d the server ends held claim %d while its work is %v, before anchor t=%s + lease = t=%s",
			m.t(s.now), j+1, s.work[j], m.ts(a), m.ts(a.Add(m.lease)))
	}
	return nil
}

// t and ts print times in steps, as the client-rule model does.
func (m *sessModel) t(at time.Time) int     { return (*clientModel)(nil).t(at) }
func (m *sessModel) ts(at time.Time) string { return (*clientModel)(nil).ts(at) }

// key is the canonical encoding of s: times relative to now and clamped
// where the future cannot tell values apart. The rule's RTT estimate and
// PING times are left out: they only set the earliest next PING, which
// the model does not constrain.
func (m *sessModel) key(s *v2State) string {
	b := make([]byte, 0, 96)
	rel := func(t time.Time) { b = binary.AppendVarint(b, int64(s.now.Sub(t)/clientStep)) }
	late := time.Duration(m.cfg.TimerLag+1) * clientStep
	clamp := func(t time.Time) {
		b = binary.AppendVarint(b, int64(min(s.now.Sub(t), late)/clientStep))
	}
	b = append(b, byte(s.rule.State()), bool2(s.closed), bool2(s.srvOpen), bool2(s.srvEnd))
	if s.rule.Live() {
		rel(s.rule.Deadline())
		for _, r := range s.rule.Requests() {
			b = append(b, byte(r.Kind), byte(r.Claim))
			rel(r.Sent)
		}
		b = append(b, 0xff)
	}
	if s.anyRunning() || s.holding() {
		clamp(s.rule.CloseBy())
		clamp(s.rule.Anchor().Add(m.lease))
	}
	for i := range sessClaims {
		st, _ := s.rule.Claim(uint32(i + 1))
		b = append(b, byte(st), bool2(s.rule.Releasing(uint32(i+1))), bool2(s.used[i]), byte(s.work[i]), byte(s.srv[i]))
		if s.work[i] == wTold {
			b = binary.AppendVarint(b, int64(min(s.now.Sub(s.toldAt[i]), time.Duration(m.cfg.WorkStop)*clientStep)/clientStep))
		}
	}
	if s.srvOpen && !s.srvEnd {
		b = binary.AppendVarint(b, int64(min(s.now.Sub(s.seen), m.lease+clientStep)/clientStep))
	}
	for _, c := range []*v2Chan{&s.up, &s.down} {
		b = append(b, byte(c.n))
		for i := range c.n {
			b = append(b, byte(c.f[i].kind), c.f[i].id, c.f[i].age)
		}
	}
	return string(b)
}

func bool2(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// CheckSession explores every behaviour of the v2 client-rule model
// breadth first and checks, in every state, that a claim the client
// believes held is held at the server, that the server never ends a held
// claim under running work before anchor + lease, and that a correct
// server never looks like a violation.
func CheckSession(cfg SessionConfig) Report {
	m := &sessModel{cfg: cfg, lease: time.Duration(cfg.Lease) * clientStep}
	m.mut, m.close = cfg.mutations()
	return exploreSteps(Report{Model: "session", Config: cfg.String()}, stepModel[v2State, sessAct](m))
}
