package modelcheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/cluster"
)

// The lease-lowering model: an operator lowers the cluster's largest lease
// (cluster.LeaseBound, the bound of every take-over's warm-up) while nodes
// open and end sessions, die, restart, are removed and have their names
// taken over, running the real LeaseBound and AckDue rules. The property
// (warmup-covers): a warm-up gate's lease is at least the longest lease of
// the sessions the dead incarnation had when it died.
// Design: "Model 5c: lowering the cluster's largest lease" and
// #internalmodelcheckleaselowergo in docs/design/2026-12-07-verification-models-cluster.md.

// LeaseLowerConfig bounds the lease-lowering model.
type LeaseLowerConfig struct {
	Nodes    int // nodes (2..3)
	Deaths   int // node deaths (0..3)
	Restarts int // restarts of a dead node (0..2)
	Settings int // ceilings an operator sets, alternately short and none (1..3)
	// Mutation, when not empty, drops one rule; see LeaseLowerMutations.
	Mutation string
}

// DefaultLeaseLowerConfig is the configuration always checked.
func DefaultLeaseLowerConfig() LeaseLowerConfig {
	return LeaseLowerConfig{Nodes: 3, Deaths: 2, Restarts: 1, Settings: 2}
}

// Mutations of the lease-lowering model.
const (
	// MutAckWithSession acknowledges a lowering while a session with a
	// longer lease is open.
	MutAckWithSession = "ack-with-session"
	// MutAckWhileWarming acknowledges while a warm-up gate of the node's
	// own is still open.
	MutAckWhileWarming = "ack-while-warming"
	// MutRemoveCompletes lets the removal of a member that had not
	// acknowledged complete the lowering instead of cancelling it.
	MutRemoveCompletes = "remove-completes"
	// MutNoCeiling lets a node open a session above the ceiling it has
	// applied (the server's check at registration missing).
	MutNoCeiling = "no-ceiling"
	// MutLateCeiling lets a restarted node serve before it has applied
	// the ceiling (from a poll rather than as the log is applied): its
	// earlier incarnation's acknowledgement no longer holds.
	MutLateCeiling = "late-ceiling"
)

// LeaseLowerMutations lists the mutations of the lease-lowering model.
var LeaseLowerMutations = []string{MutAckWithSession, MutAckWhileWarming, MutRemoveCompletes, MutNoCeiling, MutLateCeiling}

func (c LeaseLowerConfig) String() string {
	s := fmt.Sprintf("%s, %s, %s, %s", plural(c.Nodes, "node"), plural(c.Deaths, "death"),
		plural(c.Restarts, "restart"), plural(c.Settings, "ceiling setting"))
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

// Validate checks the bounds.
func (c LeaseLowerConfig) Validate() error {
	switch {
	case c.Nodes < 2 || c.Nodes > 3:
		return fmt.Errorf("nodes must be 2 or 3, not %d", c.Nodes)
	case c.Deaths < 0 || c.Deaths > 3:
		return fmt.Errorf("deaths must be 0..3, not %d", c.Deaths)
	case c.Restarts < 0 || c.Restarts > 2:
		return fmt.Errorf("restarts must be 0..2, not %d", c.Restarts)
	case c.Settings < 1 || c.Settings > 3:
		return fmt.Errorf("settings must be 1..3, not %d", c.Settings)
	case c.Mutation != "" && !slices.Contains(LeaseLowerMutations, c.Mutation):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(LeaseLowerMutations, ", "), c.Mutation)
	}
	return nil
}

const (
	llShort = time.Second     // the ceiling's target
	llLong  = 2 * time.Second // a lease above it
)

// llGate is a warm-up gate of a node: it protects the names of a dead
// incarnation whose longest session lease was protects. A take-over's
// gate keeps lease; a restart's reads the current largest lease.
type llGate struct {
	restart  bool
	lease    time.Duration
	protects time.Duration
}

type llNode struct {
	alive, member bool
	ceiling       time.Duration // the ceiling this node has applied
	session       time.Duration // lease of its open session, 0 for none
	lost          time.Duration // longest session lease of its last dead incarnation
	gates         []llGate
}

type llState struct {
	bound                      cluster.LeaseBound
	nodes                      []llNode
	deaths, restarts, settings int
}

func (s *llState) clone() llState {
	c := *s
	c.bound = cloneBound(s.bound)
	c.nodes = slices.Clone(s.nodes)
	for i := range c.nodes {
		c.nodes[i].gates = slices.Clone(s.nodes[i].gates)
	}
	return c
}

func cloneBound(b cluster.LeaseBound) cluster.LeaseBound {
	if b.Lowering != nil {
		l := *b.Lowering
		l.Acked = slices.Clone(l.Acked)
		b.Lowering = &l
	}
	return b
}

func llKey(s *llState) string {
	sec := func(d time.Duration) byte { return byte('0' + d/time.Second) }
	flag := func(b bool) byte {
		if b {
			return '1'
		}
		return '0'
	}
	b := []byte{sec(s.bound.MaxLease), sec(s.bound.Ceiling)}
	if l := s.bound.Lowering; l != nil {
		b = append(b, 'L', sec(l.Target))
		for _, id := range l.Acked {
			b = append(b, id...)
		}
	}
	b = append(b, '|', byte('0'+s.deaths), byte('0'+s.restarts), byte('0'+s.settings))
	for _, n := range s.nodes {
		b = append(b, '|', flag(n.alive), flag(n.member), sec(n.ceiling), sec(n.session), sec(n.lost))
		// Gates in a canonical order: which one ends first is a step.
		gs := make([]string, len(n.gates))
		for i, g := range n.gates {
			gs[i] = string([]byte{flag(g.restart), sec(g.lease), sec(g.protects)})
		}
		slices.Sort(gs)
		for _, g := range gs {
			b = append(b, g...)
		}
	}
	return string(b)
}

type llStep string

func (s llStep) String() string { return string(s) }

func llID(i int) string { return fmt.Sprintf("n%d", i+1) }

func (s *llState) members() []string {
	var ids []string
	for i, n := range s.nodes {
		if n.member {
			ids = append(ids, llID(i))
		}
	}
	return ids
}

// check is warmup-covers over every open gate.
func (s *llState) check() *failure {
	for i, n := range s.nodes {
		for _, g := range n.gates {
			lease := g.lease
			if g.restart {
				lease = s.bound.MaxLease
			}
			if lease < g.protects {
				return fail("warmup-covers", "%s's warm-up is computed from a lease of %v, below the %v lease of a session of the dead incarnation it protects",
					llID(i), lease, g.protects)
			}
		}
	}
	return nil
}

func llNext(cfg LeaseLowerConfig) func(llState) []succ[llState, llStep] {
	return func(s llState) []succ[llState, llStep] {
		var out []succ[llState, llStep]
		add := func(step string, t llState) {
			out = append(out, succ[llState, llStep]{step: llStep(step), to: t, f: t.check()})
		}
		if s.settings < cfg.Settings {
			// The operator alternates: a ceiling at the short lease
			// (a lowering), then none.
			t := s.clone()
			target := llShort
			if s.settings%2 == 1 {
				target = 0
			}
			t.bound.SetCeiling(target)
			t.settings++
			add(fmt.Sprintf("operator sets the lease ceiling to %v", target), t)
		}
		for i, n := range s.nodes {
			id := llID(i)
			if n.alive && n.ceiling != s.bound.Ceiling {
				t := s.clone()
				t.nodes[i].ceiling = s.bound.Ceiling
				add(id+" applies the ceiling "+s.bound.Ceiling.String(), t)
			}
			if n.alive && n.member && n.session == 0 {
				for _, l := range []time.Duration{llShort, llLong} {
					if n.ceiling > 0 && l > n.ceiling && cfg.Mutation != MutNoCeiling {
						continue
					}
					t := s.clone()
					t.bound.Raise(l) // before the grant (RecordLease)
					t.nodes[i].session = l
					add(fmt.Sprintf("%s opens a session with lease %v", id, l), t)
				}
			}
			if n.session != 0 {
				t := s.clone()
				t.nodes[i].session = 0
				add(id+"'s session ends", t)
			}
			for g := range n.gates {
				t := s.clone()
				t.nodes[i].gates = slices.Delete(t.nodes[i].gates, g, g+1)
				add(fmt.Sprintf("%s's warm-up gate %d ends", id, g), t)
			}
			if l := s.bound.Lowering; l != nil && n.alive && n.member && n.ceiling == s.bound.Ceiling && !s.bound.Acked(id) {
				longest, warming := n.session, len(n.gates) > 0
				if cfg.Mutation == MutAckWithSession {
					longest = 0
				}
				if cfg.Mutation == MutAckWhileWarming {
					warming = false
				}
				if cluster.AckDue(l.Target, longest, warming) {
					t := s.clone()
					if err := t.bound.Ack(id, l.Target, t.members()); err != nil {
						panic(err)
					}
					add(id+" acknowledges the lowering", t)
				}
			}
			if n.alive && s.deaths < cfg.Deaths && len(s.alive()) > 1 {
				t := s.clone()
				// Its holders, and those of an earlier incarnation its
				// gates still protect, may still believe.
				lost := n.session
				for _, g := range n.gates {
					lost = max(lost, g.protects)
				}
				t.nodes[i] = llNode{member: n.member, lost: lost}
				t.deaths++
				add(id+" dies", t)
			}
			if !n.alive && n.member && s.restarts < cfg.Restarts {
				t := s.clone()
				// A restart warms up every name it owns, for its dead
				// incarnation's holders (route.go: the restart gate).
				// It catches up on the log, the ceiling included, before
				// it serves (cluster: the fsm's onCeiling hook).
				t.nodes[i] = llNode{alive: true, member: true, ceiling: s.bound.Ceiling, gates: []llGate{{restart: true, protects: n.lost}}}
				if cfg.Mutation == MutLateCeiling {
					t.nodes[i].ceiling = 0
				}
				t.restarts++
				add(id+" restarts", t)
			}
			if !n.alive && n.member {
				t := s.clone()
				t.nodes[i].member = false
				acked := s.bound.Acked(id)
				t.bound.MemberRemoved(id, t.members())
				if cfg.Mutation == MutRemoveCompletes && s.bound.Lowering != nil && !acked {
					// As if it had acknowledged: the rest complete it.
					t.bound = cloneBound(s.bound)
					t.bound.Lowering.Acked = append(t.bound.Lowering.Acked, id)
					slices.Sort(t.bound.Lowering.Acked)
					t.bound.MemberRemoved(id, t.members())
				}
				// Its names go to the live members, each warming them
				// up from the lease recorded now (route.go: a take-over).
				for j := range t.nodes {
					if t.nodes[j].alive && t.nodes[j].member {
						t.nodes[j].gates = append(t.nodes[j].gates, llGate{lease: t.bound.MaxLease, protects: n.lost})
					}
				}
				add(id+" is removed; the live members take its names over", t)
			}
		}
		return out
	}
}

func (s *llState) alive() []int {
	var a []int
	for i, n := range s.nodes {
		if n.alive {
			a = append(a, i)
		}
	}
	return a
}

// CheckLeaseLower explores the lease-lowering model exhaustively.
func CheckLeaseLower(cfg LeaseLowerConfig) Report {
	rep := Report{Model: "lease-lower", Config: cfg.String()}
	init := llState{nodes: make([]llNode, cfg.Nodes)}
	for i := range init.nodes {
		init.nodes[i] = llNode{alive: true, member: true}
	}
	return exploreSucc(rep, init, llKey, llNext(cfg), nil)
}
