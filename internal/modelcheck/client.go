package modelcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// ClientConfig bounds the client-rule model: one client following
// internal/clientrule (docs/protocol.md "Client obligations" 2-4), the work
// it guards, one server session and a FIFO channel each way, in discrete
// time steps.
type ClientConfig struct {
	// Lease is the claim's lease in time steps.
	Lease int
	// MaxDelay is the longest a frame spends in the channel, in steps:
	// every frame is delivered after an arbitrary 0..MaxDelay steps.
	MaxDelay int
	// GiveUp is the give-up factor: the client gives up when now is after
	// anchor + GiveUp·lease. docs/protocol.md and clientrule use 0.8.
	GiveUp float64
	// TimerLag is how many steps late the client's give-up timer may fire
	// (scheduling, a GC pause): it gives up at some step after its
	// deadline, at most TimerLag steps after the first one. The timer
	// that closes the connection at anchor + lease lags the same.
	TimerLag int
	// WorkStop is the longest the guarded work takes to stop once told
	// (fn's context cancelled, a child signalled): it stops after an
	// arbitrary 0..WorkStop steps. Above 0.2·lease it outlasts the
	// margin, and the close at anchor + lease ends the claim under it.
	WorkStop int

	// close is how the client closes after a give-up; only the mutation
	// tests set anything but closeWhenStopped.
	close closeRule
}

// closeRule is when a client that gave up closes its connection.
type closeRule uint8

const (
	// closeWhenStopped: tell the work at once, close when it has stopped
	// and at anchor + lease at the latest (docs/protocol.md, client
	// obligation 3; the v1 claim's finish in lock.go).
	closeWhenStopped closeRule = iota
	// closeAtGiveUp (a mutation): tell the work and close at once.
	closeAtGiveUp
	// closeBeforeCancel (a mutation): close at once, tell the work
	// afterwards, as the v1 claim's finish once did.
	closeBeforeCancel
)

// DefaultClientConfig is the configuration CI checks: a lease of 10
// steps, delays of 0 to 3 steps, a timer up to one step late, the
// protocol's give-up factor, 0.8, and work that takes up to 4 steps to
// stop, twice the lease's last fifth.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 0.8, TimerLag: 1, WorkStop: 4}
}

func (c ClientConfig) String() string {
	s := fmt.Sprintf("lease %s, delays 0..%d, give-up %.2f·lease, timer lag ≤ %s, work stops within %s",
		plural(c.Lease, "step"), c.MaxDelay, c.GiveUp, plural(c.TimerLag, "step"), plural(c.WorkStop, "step"))
	switch c.close {
	case closeAtGiveUp:
		s += ", mutation: close at give-up"
	case closeBeforeCancel:
		s += ", mutation: close before cancel"
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c ClientConfig) Validate() error {
	switch {
	case c.Lease < 4 || c.Lease > 1000:
		return fmt.Errorf("lease must be 4..1000 steps, not %d", c.Lease)
	case c.MaxDelay < 0 || c.MaxDelay > 100:
		return fmt.Errorf("max delay must be 0..100 steps, not %d", c.MaxDelay)
	case c.TimerLag < 0 || c.TimerLag > 100:
		return fmt.Errorf("timer lag must be 0..100 steps, not %d", c.TimerLag)
	case c.WorkStop < 0 || c.WorkStop > 100:
		return fmt.Errorf("work stop must be 0..100 steps, not %d", c.WorkStop)
	case !(c.GiveUp > 0 && c.GiveUp <= 2):
		return fmt.Errorf("give-up factor must be in (0, 2], not %v", c.GiveUp)
	}
	return nil
}

// Property names reported by the client-rule model.
const (
	PropClientOwner   = "whenever the client considers itself owner, the server still has it as owner"
	PropClientWork    = "the server never ends the claim while the client's work runs, unless anchor + lease has passed"
	PropClientProto   = "a correct server never looks like a protocol violation to the client"
	PropTimeAdvances  = "time can always advance"
	PropClientPresent = "the client rule accepts every call the model makes"
)

// step is one time step; the model's clock starts at the epoch.
const clientStep = time.Second

// serverToken is the fencing token of the session's only grant.
const serverToken = 1

type frameKind uint8

const (
	fAcquire   frameKind = iota + 1 // client to server
	fHeartbeat                      // client to server
	fFIN                            // client to server: the client closed the connection
	fWaiting                        // server to client
	fAcquired                       // server to client
	fEOF                            // server to client: the server closed the connection
)

func (k frameKind) String() string {
	return [...]string{"?", "ACQUIRE", "HEARTBEAT", "FIN", "WAITING", "ACQUIRED(1)", "EOF"}[k]
}

type inFlight struct {
	kind frameKind
	age  int // steps spent in the channel
}

// channel is one direction of the TCP connection: FIFO, at most a few
// frames (the rule keeps one ACQUIRE or HEARTBEAT in flight).
type channel struct {
	n int
	f [4]inFlight
}

func (c *channel) push(k frameKind) {
	if c.n == len(c.f) {
		panic("modelcheck: channel overflow")
	}
	c.f[c.n] = inFlight{kind: k}
	c.n++
}

func (c *channel) pop() frameKind {
	k := c.f[0].kind
	copy(c.f[:], c.f[1:c.n])
	c.n--
	c.f[c.n] = inFlight{}
	return k
}

type sessState uint8

const (
	sNone    sessState = iota // ACQUIRE not arrived
	sWaiting                  // queued behind another owner
	sOwner
	sEnded // expired, or the client's close arrived
)

func (s sessState) String() string {
	return [...]string{"no session", "waiting", "owner", "ended"}[s]
}

// workState is the guarded work (Do's fn, baton run's command). It starts
// the moment the client becomes owner, the earliest Do can start fn.
type workState uint8

const (
	wNone    workState = iota // not started: the claim was never owner
	wRunning                  // running, not told to stop
	wTold                     // told to stop (context cancelled); still running
	wStopped                  // returned
)

func (w workState) String() string {
	return [...]string{"not started", "running", "told to stop but still running", "stopped"}[w]
}

// clientState is one state of the model. It is a plain value: copying it
// copies everything, the clientrule.Rule included.
type clientState struct {
	now      time.Time
	rule     clientrule.Rule
	sentAt   time.Time // send time of the frame in flight, the checker's record
	closed   bool      // the client closed its connection (FIN sent or EOF seen)
	work     workState
	toldAt   time.Time // when the work was told to stop
	up, down channel
	sess     sessState
	lastSeen time.Time
}

type clientAct uint8

const (
	aTick          clientAct = iota + 1 // time advances one step
	aSendAcquire                        // the client sends ACQUIRE
	aSendHeartbeat                      // the client sends HEARTBEAT (any time the rule allows one)
	aGiveUp                             // the client's give-up timer fires
	aRelease                            // the client is done and closes the connection
	aClientRecv                         // the client reads the next frame
	aServerFree                         // ACQUIRE arrives; the lock is free
	aServerHeld                         // ACQUIRE arrives; another session owns the lock
	aServerRecv                         // the server reads the next HEARTBEAT or FIN
	aOtherEnds                          // the other owner ends; the server promotes and pushes
	aServerExpire                       // the server expires the session
	aWorkStops                          // the work told to stop returns
	aCloseHeld                          // the client closes the connection it kept open after a give-up
	aTellWork                           // mutation closeBeforeCancel: the work is told after the close
)

type clientModel struct {
	cfg    ClientConfig
	lease  time.Duration // the server's lease
	scaled time.Duration // the Rule's lease (see initial)
}

func (m *clientModel) initial() clientState {
	// clientrule gives up at 0.8·lease with no knob; a client with factor f
	// is a Rule whose lease is scaled by f/0.8. The lease a Rule is given
	// otherwise sets only its heartbeat schedule, which the model does not
	// constrain (a heartbeat may go out at any step the rule allows one).
	// Its close-by time scales with it: the mutants that give up late also
	// close late.
	return clientState{now: epoch, rule: clientrule.New(m.scaled, 0)}
}

func (s *clientState) active() bool {
	st := s.rule.State()
	return st == clientrule.Pending || st == clientrule.Waiting || st == clientrule.Owner
}

// holding: the client gave up but keeps its connection open for the work
// to stop.
func (s *clientState) holding() bool {
	return s.rule.State() == clientrule.Closed && !s.closed
}

// running: the work has started and not yet returned.
func (s *clientState) running() bool { return s.work == wRunning || s.work == wTold }

// mayCloseHeld: a client holding its connection may close it now, because
// its work has stopped (or never started) or its close-by time has come.
func (s *clientState) mayCloseHeld() bool {
	return s.holding() && (!s.running() || !s.now.Before(s.rule.CloseBy()))
}

// enabled lists the actions possible in s.
func (m *clientModel) enabled(s *clientState) []clientAct {
	var acts []clientAct
	st := s.rule.State()
	if st == clientrule.Idle {
		acts = append(acts, aSendAcquire)
	}
	if _, ok := s.rule.NextHeartbeat(); ok && s.active() && !s.closed {
		acts = append(acts, aSendHeartbeat)
	}
	if s.active() && s.now.After(s.rule.Deadline()) {
		acts = append(acts, aGiveUp)
	}
	if s.active() {
		acts = append(acts, aRelease)
	}
	if s.down.n > 0 {
		acts = append(acts, aClientRecv)
	}
	if s.up.n > 0 {
		if s.up.f[0].kind == fAcquire {
			acts = append(acts, aServerFree, aServerHeld)
		} else {
			acts = append(acts, aServerRecv)
		}
	}
	if s.sess == sWaiting {
		acts = append(acts, aOtherEnds)
	}
	if s.work == wTold {
		acts = append(acts, aWorkStops)
	}
	if s.mayCloseHeld() {
		acts = append(acts, aCloseHeld)
	}
	if s.work == wRunning && s.rule.State() == clientrule.Closed {
		acts = append(acts, aTellWork) // only the closeBeforeCancel mutant gets here
	}
	if (s.sess == sWaiting || s.sess == sOwner) && s.now.Sub(s.lastSeen) > m.lease {
		acts = append(acts, aServerExpire)
	}
	if m.canTick(s) {
		acts = append(acts, aTick)
	}
	return acts
}

// canTick: time stands still while a frame has spent MaxDelay steps in
// the channel (it must be delivered first), while the client's give-up
// timer or its close-by timer is due (each fires at most TimerLag steps
// late), while told work has run for WorkStop steps (it stops first) and
// while the closeBeforeCancel mutant has yet to tell its work.
func (m *clientModel) canTick(s *clientState) bool {
	for _, c := range []*channel{&s.up, &s.down} {
		for i := range c.n {
			if c.f[i].age >= m.cfg.MaxDelay {
				return false
			}
		}
	}
	lag := time.Duration(m.cfg.TimerLag) * clientStep
	switch {
	case s.active() && s.now.Add(-lag).After(s.rule.Deadline()):
		return false
	case s.holding() && !s.now.Add(-lag).Before(s.rule.CloseBy()):
		return false
	case s.work == wTold && s.now.Sub(s.toldAt) >= time.Duration(m.cfg.WorkStop)*clientStep:
		return false
	case s.work == wRunning && s.rule.State() == clientrule.Closed:
		return false
	}
	return true
}

// apply performs act on a copy of s and returns it with a description
// (when describe is set) and the property it breaks, if any.
func (m *clientModel) apply(s clientState, act clientAct, describe bool) (clientState, string, *failure) {
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
		switch act {
		case aTick:
			s.now = s.now.Add(clientStep)
			for _, c := range []*channel{&s.up, &s.down} {
				for i := range c.n {
					c.f[i].age++
				}
			}
			say(tickLine)
		case aSendAcquire:
			s.rule.SentAcquire(s.now)
			s.sentAt = s.now
			s.up.push(fAcquire)
			say("client sends ACQUIRE; gives up after t=%s unless answered", m.ts(s.rule.Deadline()))
		case aSendHeartbeat:
			s.rule.SentHeartbeat(s.now)
			s.sentAt = s.now
			s.up.push(fHeartbeat)
			say("client sends HEARTBEAT")
		case aGiveUp:
			if !s.rule.Expire(s.now) {
				f = fail(PropClientPresent, "the rule refused to give up at t=%d, after its deadline t=%s", m.t(s.now), m.ts(s.rule.Deadline()))
			}
			say("client's give-up timer fires (deadline t=%s): lock treated as lost, %s", m.ts(s.rule.Deadline()), m.giveUp(&s))
		case aRelease:
			s.rule.Close()
			if s.work == wRunning {
				s.work = wStopped
			}
			m.clientClose(&s)
			say("client is done (its work returned) and releases: closes the connection")
		case aWorkStops:
			s.work = wStopped
			say("the work returns, %d steps after it was told to stop", m.t(s.now)-m.t(s.toldAt))
		case aCloseHeld:
			why := "its work has stopped"
			if s.running() {
				why = fmt.Sprintf("close-by time t=%s (anchor + lease) has come, work still %v", m.ts(s.rule.CloseBy()), s.work)
			}
			m.clientClose(&s)
			say("client closes the connection it kept open: %s", why)
		case aTellWork:
			m.tell(&s)
			say("client tells its work to stop, after the close")
		case aClientRecv:
			k := s.down.pop()
			before := s.rule.State()
			switch k {
			case fEOF:
				s.rule.Close()
				s.closed = true
				m.tell(&s)
				say("client reads EOF: lock treated as lost, work told to stop")
			default:
				fr := protocol.ServerFrame{Type: protocol.TypeWaiting}
				if k == fAcquired {
					fr = protocol.ServerFrame{Type: protocol.TypeAcquired, Token: serverToken}
				}
				err := s.rule.Received(fr, s.now)
				var then string
				switch {
				case errors.Is(err, clientrule.ErrViolation):
					f = fail(PropClientProto, "the client took %v from a correct server as a protocol violation: %v", k, err)
				case err != nil: // ErrExpired: a reply too late is a give-up
					then = "; " + m.giveUp(&s)
				case s.rule.State() == clientrule.Owner && s.work == wNone:
					s.work = wRunning
					then = "; work starts"
				}
				if a, ok := s.rule.Anchor(); ok && describe {
					say("client reads %v: %v → %v (anchor t=%s, gives up after t=%s)%s%s", k, before, s.rule.State(),
						m.ts(a), m.ts(s.rule.Deadline()), errSuffix(err), then)
				} else {
					say("client reads %v: %v → %v%s%s", k, before, s.rule.State(), errSuffix(err), then)
				}
			}
		case aServerFree, aServerHeld:
			s.up.pop()
			s.lastSeen = s.now
			if act == aServerFree {
				s.sess = sOwner
				s.down.push(fAcquired)
				say("server reads ACQUIRE, the lock is free: owner, replies ACQUIRED(1)")
			} else {
				s.sess = sWaiting
				s.down.push(fWaiting)
				say("server reads ACQUIRE, another session owns the lock: queued, replies WAITING")
			}
		case aServerRecv:
			k := s.up.pop()
			switch {
			case s.sess == sEnded:
				say("server ignores %v: the session has ended", k)
			case k == fFIN:
				f = m.overlap(&s)
				s.sess = sEnded
				say("server reads the client's close: session ended, lock released (the next waiter would be promoted)")
			default:
				s.lastSeen = s.now
				if s.sess == sOwner {
					s.down.push(fAcquired)
				} else {
					s.down.push(fWaiting)
				}
				say("server reads HEARTBEAT: last seen t=%d, replies %v", m.t(s.now), s.down.f[s.down.n-1].kind)
			}
		case aOtherEnds:
			s.sess = sOwner
			s.down.push(fAcquired)
			say("the other owner ends: server promotes the session and pushes ACQUIRED(1)")
		case aServerExpire:
			f = m.overlap(&s)
			s.sess = sEnded
			s.down.push(fEOF)
			say("server expires the session (last seen t=%d, %d steps ago > lease %d): lock moves on, connection closed",
				m.t(s.lastSeen), m.t(s.now)-m.t(s.lastSeen), m.cfg.Lease)
		}
	}()
	if f == nil && s.rule.State() == clientrule.Owner && s.sess != sOwner {
		f = fail(PropClientOwner, "at t=%d the client considers itself owner (anchor t=%s, gives up after t=%s) but the server session is %v",
			m.t(s.now), m.anchor(&s), m.ts(s.rule.Deadline()), s.sess)
	}
	return s, line, f
}

// giveUp acts out a give-up (deadline passed: Expire, or a reply after
// it) by the client's close rule and describes it.
func (m *clientModel) giveUp(s *clientState) string {
	switch m.cfg.close {
	case closeAtGiveUp:
		m.tell(s)
		m.clientClose(s)
		return "work told to stop, connection closed"
	case closeBeforeCancel:
		m.clientClose(s)
		return "connection closed (the work is not told yet)"
	}
	m.tell(s)
	if !s.running() {
		m.clientClose(s)
		return "no work started: connection closed"
	}
	return fmt.Sprintf("work told to stop, connection kept open until it stops or t=%s (anchor + lease)", m.ts(s.rule.CloseBy()))
}

// tell tells running work to stop.
func (m *clientModel) tell(s *clientState) {
	if s.work == wRunning {
		s.work, s.toldAt = wTold, s.now
	}
}

// overlap checks PropClientWork when the server is about to end the
// session in s: an owner session must not end while the client's work
// runs, unless anchor + lease has passed (then the claim ends under work
// that ignored its cancellation, by design).
func (m *clientModel) overlap(s *clientState) *failure {
	if s.sess != sOwner || !s.running() {
		return nil
	}
	a, ok := s.rule.Anchor()
	if !ok || !s.now.Before(a.Add(m.lease)) {
		return nil
	}
	return fail(PropClientWork, "at t=%d the server ends the owner session while the client's work is %v, before anchor t=%s + lease = t=%s",
		m.t(s.now), s.work, m.ts(a), m.ts(a.Add(m.lease)))
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// clientClose closes the client's side of the connection once.
func (m *clientModel) clientClose(s *clientState) {
	if !s.closed {
		s.closed = true
		s.up.push(fFIN)
	}
}

func (m *clientModel) t(at time.Time) int { return int(at.Sub(epoch) / clientStep) }

func (m *clientModel) ts(at time.Time) string {
	d := at.Sub(epoch)
	if d%clientStep == 0 {
		return fmt.Sprint(int(d / clientStep))
	}
	return fmt.Sprintf("%.2f", d.Seconds()/clientStep.Seconds())
}

func (m *clientModel) anchor(s *clientState) string {
	if a, ok := s.rule.Anchor(); ok {
		return m.ts(a)
	}
	return "none"
}

// key is the canonical encoding of s: every time relative to now, and
// clamped where the future cannot tell values apart. The rule's smoothed
// RTT and last reply time are left out: they only set the earliest time
// of the next heartbeat, which the model does not constrain.
func (m *clientModel) key(s *clientState) string {
	b := make([]byte, 0, 48)
	rel := func(t time.Time) { b = binary.AppendVarint(b, int64(s.now.Sub(t))) }
	st := s.rule.State()
	b = append(b, byte(st), byte(s.sess))
	if s.closed {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	if s.active() {
		rel(s.rule.Deadline())
		if s.rule.InFlight() {
			b = append(b, 1)
			rel(s.sentAt)
		} else {
			b = append(b, 0)
		}
	}
	b = append(b, byte(s.work))
	if s.work == wTold {
		b = binary.AppendVarint(b, int64(min(s.now.Sub(s.toldAt), time.Duration(m.cfg.WorkStop)*clientStep)))
	}
	if s.running() || s.holding() {
		// The close-by time of the client and the property's anchor +
		// lease: once both have passed, how long ago does not matter.
		late := time.Duration(m.cfg.TimerLag+1) * clientStep
		b = binary.AppendVarint(b, int64(min(s.now.Sub(s.rule.CloseBy()), late)))
		if a, ok := s.rule.Anchor(); ok {
			b = binary.AppendVarint(b, int64(min(s.now.Sub(a.Add(m.lease)), late)))
		}
	}
	if s.sess == sWaiting || s.sess == sOwner {
		// Only whether the lease has passed matters, and it stays passed.
		age := min(s.now.Sub(s.lastSeen), m.lease+clientStep)
		b = binary.AppendVarint(b, int64(age))
	}
	for _, c := range []*channel{&s.up, &s.down} {
		b = append(b, byte(c.n))
		for i := range c.n {
			b = append(b, byte(c.f[i].kind), byte(c.f[i].age))
		}
	}
	return string(b)
}

// CheckClient explores every behaviour of the client-rule model breadth
// first and checks, in every state, that a client that considers itself
// owner is owner at the server, and that the server never ends the claim
// while the client's work runs unless anchor + lease has passed.
func CheckClient(cfg ClientConfig) Report {
	m := &clientModel{cfg: cfg, lease: time.Duration(cfg.Lease) * clientStep}
	m.scaled = time.Duration(float64(m.lease) * cfg.GiveUp / 0.8)
	return exploreSteps(Report{Model: "client", Config: cfg.String()}, stepModel[clientState, clientAct](m))
}
