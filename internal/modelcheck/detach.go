package modelcheck

import "fmt"

// The detach model: how a resumable session's claim ends with its
// connection (docs/protocol-v2-resume.md, "v2 detach"; server/session2.go,
// the Go client's detach.go): which ends of a connection release the
// claim at once and which keep it for the lease so the client can
// re-assert it. It checks that the holder never believes while the waiter
// holds, and that a waiter is granted promptly after a killed holder's
// connection ends.
// Design: "How a resumable session's claim ends with its connection" and
// #internalmodelcheckdetachgo in docs/design/2026-12-07-verification-models-cluster.md.

// Properties of the detach model.
const (
	PropDetachOneBeliever = "one-believer"
	PropDetachSuccessor   = "successor-granted"
)

// Mutations of the detach model.
const (
	// MutDetachReleases has the node release the claim at the FIN after
	// a DETACH too: the client's move loses the lock.
	MutDetachReleases = "detach-releases"
	// MutDetachFinKeeps has the node keep the claim at a FIN without a
	// DETACH (the rule before DETACH): a killed holder's successor waits
	// a lease.
	MutDetachFinKeeps = "fin-keeps"
	// MutDetachHopReleases, with Relay, has O release the claim when R's
	// upstream ends (R died): the client's re-assertion finds it gone.
	MutDetachHopReleases = "hop-break-releases"
	// MutDetachCloseSilent has h close a silent connection at once,
	// without DETACH (the Go client's retire keeps it open instead): the
	// FIN reaches the node when the link comes back, while h believes.
	MutDetachCloseSilent = "close-silent-at-once"
)

// DetachMutations lists the mutations of the detach model;
// MutDetachHopReleases needs DetachConfig.Relay.
var DetachMutations = []string{MutDetachReleases, MutDetachFinKeeps, MutDetachHopReleases, MutDetachCloseSilent}

// DetachConfig bounds the detach model. Durations are in ticks.
type DetachConfig struct {
	Lease     int  // L: O ends a kept claim L after it last heard from h
	GiveUp    int  // G < L: h believes while less than G has passed since its anchor
	Successor int  // the bound of PropDetachSuccessor
	Relay     bool // h's session lives on node R, which relays the claim to O
	Mutation  string
}

// DefaultDetachConfig is the configuration always checked: lease 5
// ticks, give-up 4 (0.8 × L), the successor granted within 1 tick, with
// the relay.
func DefaultDetachConfig() DetachConfig {
	return DetachConfig{Lease: 5, GiveUp: 4, Successor: 1, Relay: true}
}

func (c DetachConfig) String() string {
	s := fmt.Sprintf("lease %d, give-up %d, successor within %d", c.Lease, c.GiveUp, c.Successor)
	if c.Relay {
		s += ", relayed through R"
	}
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

// h's connection.
const (
	dcOpen     int8 = iota // open: heartbeats reach the node
	dcDetached             // h said DETACH and closed
	dcSilent               // nothing reaches the node any more
	dcBroken               // h saw it end (R died)
	dcGone                 // h was killed
)

// The claim's record at O.
const (
	drHeld int8 = iota // held for h (open or kept)
	drNone             // released or ended: w is granted
)

type dtState struct {
	conn     int8 // h's connection
	believes bool // h believes it holds the claim
	age      int8 // ticks since h's anchor (clamped)
	rec      int8 // the claim's record at O
	heard    int8 // ticks since O last heard from h (clamped)
	viaR     bool // h's session is on R (Relay, until a re-assertion)
	rDead    bool // R died
	killed   int8 // ticks since h was killed with an open, undetached connection; -1: not so
}

type dtStep struct {
	kind byte
	ok   bool // a re-assertion: accepted
}

const (
	dsTick     = 't'
	dsBeat     = 'b'
	dsKill     = 'k'
	dsDetach   = 'd'
	dsSilent   = 's'
	dsRDies    = 'r'
	dsReassert = 'a'
	dsExpire   = 'x'
	dsHeal     = 'h'
)

func (st dtStep) String() string {
	switch st.kind {
	case dsTick:
		return tickLine
	case dsBeat:
		return "h heartbeats: its anchor and O's record of it move to now"
	case dsKill:
		return "h is killed: its kernel closes the connection"
	case dsDetach:
		return "h says DETACH and closes its connection"
	case dsSilent:
		return "h's link goes silent"
	case dsRDies:
		return "R dies: h's connection and R's upstream to O end"
	case dsReassert:
		if st.ok {
			return "h re-asserts at O: accepted, h's anchor moves to now"
		}
		return "h re-asserts at O: refused, h has lost the claim"
	case dsExpire:
		return "O ends the claim a lease after it last heard from h"
	case dsHeal:
		return "h's silent link comes back: the FIN h sent when it closed reaches the node"
	}
	return "?"
}

func (s *dtState) key() string { return fmt.Sprint(*s) }

// release ends the claim at O: w is granted.
func (s *dtState) release() { s.rec = drNone }

func (m DetachConfig) next(s dtState) []succ[dtState, dtStep] {
	var out []succ[dtState, dtStep]
	add := func(t dtState, st dtStep) {
		out = append(out, succ[dtState, dtStep]{step: st, to: t, f: m.check(&t)})
	}
	alive := s.conn != dcGone
	// A tick, once what is due has happened.
	if !(s.rec == drHeld && int(s.heard) >= m.Lease) {
		t := s
		t.age = min(t.age+1, int8(m.Lease+1))
		t.heard = min(t.heard+1, int8(m.Lease+1))
		if t.believes && int(t.age) >= m.GiveUp {
			t.believes = false
		}
		if t.killed >= 0 {
			t.killed = min(t.killed+1, int8(m.Successor+1))
		}
		add(t, dtStep{kind: dsTick})
	}
	if s.rec == drHeld && int(s.heard) >= m.Lease {
		t := s
		t.release()
		add(t, dtStep{kind: dsExpire})
	}
	open := s.conn == dcOpen && !(s.viaR && s.rDead)
	if open && s.believes {
		t := s
		t.age, t.heard = 0, 0
		add(t, dtStep{kind: dsBeat})
	}
	if alive {
		t := s
		t.conn, t.believes = dcGone, false
		if open {
			// The FIN or reset reaches h's node, with no DETACH before it.
			t.killed = 0
			if m.Mutation != MutDetachFinKeeps {
				t.release() // R relays a RELEASE to O first
			}
		}
		add(t, dtStep{kind: dsKill})
	}
	if open && s.believes {
		t := s
		t.conn = dcDetached
		if m.Mutation == MutDetachReleases {
			t.release()
		}
		add(t, dtStep{kind: dsDetach})
		t = s
		t.conn = dcSilent
		add(t, dtStep{kind: dsSilent})
	}
	if m.Mutation == MutDetachCloseSilent && s.conn == dcSilent && !(s.viaR && s.rDead) {
		// Under the rule h wrote DETACH before its FIN (both arrive: the
		// claim is kept), or kept the connection open until its give-up
		// when it could not: only the mutation has a step here.
		t := s
		t.conn = dcDetached
		t.release()
		add(t, dtStep{kind: dsHeal})
	}
	if m.Relay && s.viaR && !s.rDead {
		t := s
		t.rDead = true
		if s.conn == dcOpen {
			t.conn = dcBroken
		}
		if m.Mutation == MutDetachHopReleases {
			t.release()
		}
		add(t, dtStep{kind: dsRDies})
	}
	if s.believes && (s.conn == dcDetached || s.conn == dcSilent || s.conn == dcBroken) {
		t := s
		if s.rec == drHeld {
			t.conn, t.viaR, t.age, t.heard = dcOpen, false, 0, 0
			add(t, dtStep{kind: dsReassert, ok: true})
		} else {
			t.believes = false
			add(t, dtStep{kind: dsReassert})
		}
	}
	return out
}

// check reports the property that state s breaks, if any.
func (m DetachConfig) check(s *dtState) *failure {
	if s.rec == drNone && s.believes {
		return fail(PropDetachOneBeliever, "h still believes it holds the claim while O has granted w")
	}
	if s.rec == drHeld && s.killed > int8(m.Successor) {
		return fail(PropDetachSuccessor, "h was killed %d ticks ago with its connection open and w is not granted (successor bound %d)", s.killed, m.Successor)
	}
	return nil
}

// CheckDetach explores the detach model exhaustively.
func CheckDetach(cfg DetachConfig) Report { return checkDetach(cfg, nil) }

func checkDetach(cfg DetachConfig, seen func(*dtState, dtStep)) Report {
	if cfg.Lease < 2 || cfg.GiveUp < 1 || cfg.GiveUp >= cfg.Lease || cfg.Lease > 100 || cfg.Successor < 0 {
		panic(fmt.Sprintf("modelcheck: bad detach configuration %v", cfg))
	}
	init := dtState{conn: dcOpen, believes: true, rec: drHeld, viaR: cfg.Relay, killed: -1}
	return exploreSucc(Report{Model: "detach", Config: cfg.String()}, init, (*dtState).key, cfg.next, seen)
}
