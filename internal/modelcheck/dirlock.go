package modelcheck

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The directory-lock models (package dirlock, docs/dirlock.md). Both are
// small enough to keep the whole state graph in memory with its edges, so
// safety is checked in every state and liveness on the graph, under
// fairness, with the Emerson-Lei refinement of strongly connected
// components.
//
// Processes live on hosts: process p is on host p / ProcsPerHost. A
// process that crashes comes back as a new incarnation (the pipeline is
// restarted), so "the record's owner is dead" means "the record names an
// incarnation that has crashed".

// DirlockConfig bounds a directory-lock model.
type DirlockConfig struct {
	Hosts        int // number of hosts (1..3)
	ProcsPerHost int // processes on each host (1..3)
	// Mutation, when not empty, drops or changes one rule so that the
	// checker must fail; see DirlockSeedMutations and
	// DirlockStepsMutations.
	Mutation string
	// ForcedBreak (steps model only) adds an operator who runs
	// 'baton dirlock break --force' once, at any moment: a live holder
	// whose entry it takes no longer counts as a holder (that is what
	// forcing means), and nobody else may lose the lock to it.
	ForcedBreak bool
}

// DefaultDirlockConfig is the configuration CI checks: two hosts with two
// processes each.
func DefaultDirlockConfig() DirlockConfig { return DirlockConfig{Hosts: 2, ProcsPerHost: 2} }

func (c DirlockConfig) String() string {
	s := fmt.Sprintf("%s × %s", plural(c.Hosts, "host"), plural(c.ProcsPerHost, "process"))
	s = strings.Replace(s, "processs", "processes", 1)
	if c.ForcedBreak {
		s += ", a forced break"
	}
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c DirlockConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > 3:
		return fmt.Errorf("hosts must be 1..3, not %d", c.Hosts)
	case c.ProcsPerHost < 1 || c.ProcsPerHost > 3:
		return fmt.Errorf("processes per host must be 1..3, not %d", c.ProcsPerHost)
	case c.ForcedBreak && c.Mutation == "mkdir-lock":
		return fmt.Errorf("the forced break is not modelled with mutation mkdir-lock")
	}
	return nil
}

func (c DirlockConfig) procs() int        { return c.Hosts * c.ProcsPerHost }
func (c DirlockConfig) host(p int) int    { return p / c.ProcsPerHost }
func (c DirlockConfig) name(p int) string { return fmt.Sprintf("p%d@h%d", p+1, c.host(p)+1) }

// Property names reported by the directory-lock models.
const (
	PropDirOneHolder  = "at most one process holds the lock"
	PropDirRecord     = "a holder's own record is the lock's record"
	PropDirNoWedge    = "a crash never wedges the lock: the owner's host takes it back"
	PropDirEventually = "every waiting process eventually holds the lock"
)

// dlStep is one transition: process proc takes a step of kind kind.
type dlStep struct {
	proc int8
	kind uint8
}

// dlSucc is a successor of a state.
type dlSucc struct {
	step dlStep
	to   string
	f    *failure // a safety property the step breaks
}

// dlFairness is one strong-fairness constraint: if a run visits states
// where it is enabled infinitely often, it takes step infinitely often.
type dlFairness struct {
	name    string
	enabled []bool // by state number
	step    dlStep
}

// stepFairness is strong fairness for one step: if it is enabled
// infinitely often, it is taken infinitely often.
func stepFairness(g *graph[dlStep], name string, st dlStep) dlFairness {
	en := make([]bool, len(g.edges))
	for v, es := range g.edges {
		en[v] = slices.ContainsFunc(es, func(e edge[dlStep]) bool { return e.step == st })
	}
	return dlFairness{name: name, enabled: en, step: st}
}

// predFairness is strong fairness for step with "enabled" widened to the
// states where in holds.
func predFairness(states []string, name string, st dlStep, in func(s string) bool) dlFairness {
	en := make([]bool, len(states))
	for v, s := range states {
		en[v] = in(s)
	}
	return dlFairness{name: name, enabled: en, step: st}
}

// dlLiveness is a property "no fair run stays forever in states where
// in holds".
type dlLiveness struct {
	prop   string
	detail string
	in     func(s string) bool
}

// dlSpec is one directory-lock model, explored by exploreDirlock.
type dlSpec struct {
	model, config string
	init          string
	next          func(s string) []dlSucc
	describe      func(s string, st dlStep) string // the step taken from s
	show          func(s string) string            // the state, for a trace's end
	fairness      func(states []string, g *graph[dlStep]) []dlFairness
	crash         func(st dlStep) bool // a step that happens only finitely often
	liveness      []dlLiveness
}

// exploreDirlock explores spec breadth first, checks safety in every
// transition and then liveness on the whole graph.
func exploreDirlock(spec *dlSpec) Report {
	start := time.Now()
	rep := Report{Model: spec.model, Config: spec.config}
	g := newGraph[dlStep](true)
	g.add(spec.init, -1, dlStep{})
	states := []string{spec.init}
	for id := int32(0); id < int32(len(states)); id++ {
		for _, sc := range spec.next(states[id]) {
			if sc.f != nil {
				rep.Violation = dlTrace(spec, g.path(id), sc.step, nil, sc.f.prop, sc.f.detail)
				return finish(&rep, g, start)
			}
			if _, isNew := g.add(sc.to, id, sc.step); isNew {
				states = append(states, sc.to)
			}
		}
	}
	// Liveness is judged on runs with finitely many crashes (a host that
	// crashes for ever starves everyone) and in which a state with no
	// step at all stays as it is for ever.
	lg := &graph[dlStep]{parent: g.parent, via: g.via, depth: g.depth, edges: make([][]edge[dlStep], len(g.edges))}
	for v, es := range g.edges {
		for _, e := range es {
			if !spec.crash(e.step) {
				lg.edges[v] = append(lg.edges[v], e)
			}
		}
		if len(es) == 0 {
			lg.edges[v] = []edge[dlStep]{{to: int32(v), step: dlStep{proc: -1}}}
		}
	}
	fair := spec.fairness(states, lg)
	for _, lv := range spec.liveness {
		if v := dlFairCycle(spec, states, lg, fair, lv); v != nil {
			rep.Violation = v
			break
		}
	}
	return finish(&rep, g, start)
}

// dlFairCycle looks for a reachable cycle that stays in states where
// lv.in holds and satisfies every fairness constraint (Emerson-Lei: a
// component in which a constraint is enabled but never taken is pruned
// of the states where it is enabled, and split again).
func dlFairCycle(spec *dlSpec, states []string, g *graph[dlStep], fair []dlFairness, lv dlLiveness) *Violation {
	byStep := map[dlStep][]int{}
	for i, fc := range fair {
		byStep[fc.step] = append(byStep[fc.step], i)
	}
	// comp[v] is the number of the component v is in, -1 outside.
	comp := make([]int32, len(states))
	for v, s := range states {
		comp[v] = -1
		if lv.in(s) {
			comp[v] = 0
		}
	}
	nextComp := int32(1)
	var work [][]int32
	split := func(roots []int32, cands func(v int32) bool) {
		for _, c := range sccsOf(g, roots, cands) {
			for _, v := range c {
				comp[v] = nextComp
			}
			nextComp++
			work = append(work, c)
		}
	}
	var all []int32
	for v := range comp {
		if comp[v] == 0 {
			all = append(all, int32(v))
		}
	}
	split(all, func(v int32) bool { return comp[v] == 0 })
	var found []int32
	taken := make([]bool, len(fair))
	for len(work) > 0 && found == nil {
		c := work[len(work)-1]
		work = work[:len(work)-1]
		id := comp[c[0]]
		clear(taken)
		for _, v := range c {
			for _, e := range g.edges[v] {
				if comp[e.to] == id {
					for _, i := range byStep[e.step] {
						taken[i] = true
					}
				}
			}
		}
		pruned := false
		for i, fc := range fair {
			if taken[i] {
				continue
			}
			for _, v := range c {
				if fc.enabled[v] {
					comp[v] = -1
					pruned = true
				}
			}
		}
		if !pruned {
			found = c
			break
		}
		for _, v := range c {
			if comp[v] == id {
				comp[v] = 0
			}
		}
		split(c, func(v int32) bool { return comp[v] == 0 })
	}
	if found == nil {
		return nil
	}
	id := comp[found[0]]
	entry := found[0]
	for _, v := range found {
		if g.depth[v] < g.depth[entry] {
			entry = v
		}
	}
	in := func(v int32) bool { return comp[v] == id }
	// The printed loop takes, for every constraint enabled somewhere in the
	// component, a step that satisfies it, so it is fair as printed.
	var loop []dlStep
	at := entry
	for _, fc := range fair {
		if !slices.ContainsFunc(found, func(v int32) bool { return fc.enabled[v] }) {
			continue
		}
		for _, v := range found {
			i := slices.IndexFunc(g.edges[v], func(e edge[dlStep]) bool { return in(e.to) && e.step == fc.step })
			if i < 0 {
				continue
			}
			if v != at {
				steps, _ := g.route(at, v, in)
				loop = append(loop, steps...)
			}
			loop = append(loop, g.edges[v][i].step)
			at = g.edges[v][i].to
			break
		}
	}
	if at != entry || len(loop) == 0 {
		steps, _ := g.route(at, entry, in)
		loop = append(loop, steps...)
	}
	stem := g.path(entry)
	return dlTrace(spec, stem, dlStep{proc: -1}, loop, lv.prop, lv.detail)
}

// dlTrace describes the path stem (then last, when its proc is not -1,
// and then loop) by replaying it from the initial state.
func dlTrace(spec *dlSpec, stem []dlStep, last dlStep, loop []dlStep, prop, detail string) *Violation {
	steps := slices.Clone(stem)
	if last.proc >= 0 {
		steps = append(steps, last)
	}
	all := append(slices.Clone(steps), loop...)
	s := spec.init
	lines := make([]string, 0, len(all))
	for i, st := range all {
		if st.proc < 0 {
			lines = append(lines, "nothing can happen any more\n      state: "+spec.show(s))
			continue
		}
		line := spec.describe(s, st)
		var f *failure
		found := false
		for _, sc := range spec.next(s) {
			if sc.step == st {
				s, f, found = sc.to, sc.f, true
				break
			}
		}
		if !found {
			line += " (step not enabled: a checker bug)"
		}
		if f != nil {
			line += "\n      ✗ " + f.detail
		}
		if i == len(steps)-1 || i == len(all)-1 {
			line += "\n      state after: " + spec.show(s)
		}
		lines = append(lines, line)
	}
	return &Violation{Property: prop, Detail: detail, Trace: lines[:len(steps)], Loop: lines[len(steps):]}
}

// --- The seed's model: an atomic acquire with the guard ---------------

// Seed model state, one byte each: the record (seedNone, seedLive,
// seedStale), the record's owner (the process for a live record, the
// host for a stale one), then each process's status.
const (
	seedNone = iota
	seedLive
	seedStale
)

const (
	seedIdle = iota
	seedWaiting
	seedHolding
)

// Step kinds of the seed model.
const (
	seedRequest = iota + 1 // an idle process wants the lock
	seedAcquire            // atomic: take the lock if the guard allows
	seedRelease            // the holder removes the record
	seedCrash              // the holder dies; its record stays, stale
)

// DirlockSeedMutations are the variants of the seed model that must
// fail: "tempting" lets a remote host take over a lock that looks dead
// (from another host a live holder and a dead one look the same);
// "no-takeover" drops the owner's host's takeover of a stale record;
// "local-live" lets the owner's host take over a record whose holder is
// alive (a timeout on the same host).
var DirlockSeedMutations = []string{"tempting", "no-takeover", "local-live"}

// CheckDirlockSeed checks the seed's model of the directory lock: the
// record is none, live or stale with its owner's host; acquire is one
// atomic step allowed only if there is no record, or the record is stale
// and the caller is on the owner's host; release removes the record;
// crash leaves it stale.
func CheckDirlockSeed(cfg DirlockConfig) Report {
	n := cfg.procs()
	init := make([]byte, 2+n)
	spec := &dlSpec{model: "dirlock-seed", config: cfg.String(), init: string(init)}
	holders := func(s string) (hs []int) {
		for p := range n {
			if s[2+p] == seedHolding {
				hs = append(hs, p)
			}
		}
		return hs
	}
	guard := func(s string, p int) bool {
		rec, owner := s[0], int(s[1])
		switch cfg.Mutation {
		case "tempting":
			// A record that looks dead: stale, or owned by another host,
			// from where a live holder looks like a dead one.
			return rec == seedNone || rec == seedStale || (rec == seedLive && cfg.host(owner) != cfg.host(p))
		case "no-takeover":
			return rec == seedNone
		case "local-live":
			return rec == seedNone || (rec == seedStale && owner == cfg.host(p)) ||
				(rec == seedLive && cfg.host(owner) == cfg.host(p) && owner != p)
		}
		return rec == seedNone || (rec == seedStale && owner == cfg.host(p))
	}
	spec.next = func(s string) []dlSucc {
		var out []dlSucc
		for p := range n {
			b := []byte(s)
			st := dlStep{proc: int8(p)}
			switch s[2+p] {
			case seedIdle:
				b[2+p], st.kind = seedWaiting, seedRequest
			case seedWaiting:
				if !guard(s, p) {
					continue
				}
				b[0], b[1], b[2+p], st.kind = seedLive, byte(p), seedHolding, seedAcquire
			case seedHolding:
				for _, k := range []uint8{seedRelease, seedCrash} {
					b := []byte(s)
					b[2+p] = seedIdle
					if s[0] == seedLive && int(s[1]) == p {
						if k == seedRelease {
							b[0], b[1] = seedNone, 0
						} else {
							b[0], b[1] = seedStale, byte(cfg.host(p))
						}
					}
					out = append(out, dlSucc{step: dlStep{int8(p), k}, to: string(b)})
				}
				continue
			}
			sc := dlSucc{step: st, to: string(b)}
			if hs := holders(sc.to); len(hs) > 1 {
				sc.f = fail(PropDirOneHolder, "%s and %s both hold the lock", cfg.name(hs[0]), cfg.name(hs[1]))
			}
			out = append(out, sc)
		}
		return out
	}
	spec.show = func(s string) string {
		var parts []string
		switch s[0] {
		case seedNone:
			parts = append(parts, "no record")
		case seedLive:
			parts = append(parts, "record live, owner "+cfg.name(int(s[1])))
		case seedStale:
			parts = append(parts, fmt.Sprintf("record stale, owner's host h%d", s[1]+1))
		}
		for p := range n {
			parts = append(parts, cfg.name(p)+" "+[...]string{"idle", "waiting", "holding"}[s[2+p]])
		}
		return strings.Join(parts, "; ")
	}
	spec.describe = func(s string, st dlStep) string {
		p := cfg.name(int(st.proc))
		switch st.kind {
		case seedRequest:
			return p + " wants the lock"
		case seedAcquire:
			switch s[0] {
			case seedNone:
				return p + " acquires: no record"
			case seedStale:
				return fmt.Sprintf("%s takes over the stale record of host h%d", p, s[1]+1)
			}
			if cfg.host(int(s[1])) == cfg.host(int(st.proc)) {
				return fmt.Sprintf("%s takes over %s's live record, judged dead by a timeout on their host", p, cfg.name(int(s[1])))
			}
			return fmt.Sprintf("%s takes over %s's record, which looks dead from h%d", p, cfg.name(int(s[1])), cfg.host(int(st.proc))+1)
		case seedRelease:
			return p + " releases: removes the record"
		case seedCrash:
			return p + " crashes holding the lock (comes back idle): the record stays, stale"
		}
		return "?"
	}
	spec.fairness = func(states []string, g *graph[dlStep]) []dlFairness {
		var fs []dlFairness
		for p := range n {
			for _, k := range []uint8{seedRequest, seedAcquire} {
				fs = append(fs, stepFairness(g, cfg.name(p), dlStep{int8(p), k}))
			}
			// A holder eventually releases.
			fs = append(fs, stepFairness(g, cfg.name(p)+" releases", dlStep{int8(p), seedRelease}))
		}
		return fs
	}
	spec.crash = func(st dlStep) bool { return st.kind == seedCrash }
	spec.liveness = []dlLiveness{{
		prop:   PropDirNoWedge,
		detail: "the record stays stale forever on a fair run",
		in:     func(s string) bool { return s[0] == seedStale },
	}}
	for w := range n {
		spec.liveness = append(spec.liveness, dlLiveness{
			prop:   PropDirEventually,
			detail: cfg.name(w) + " waits forever on a fair run",
			in:     func(s string) bool { return s[2+w] == seedWaiting },
		})
	}
	return exploreDirlock(spec)
}
