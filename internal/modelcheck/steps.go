package modelcheck

import (
	"fmt"
	"time"
)

// stepModel is a model whose states are plain values that apply copies:
// the client-rule models (CheckClient, CheckSession). A is its action
// type; its zero value is no action.
type stepModel[S any, A comparable] interface {
	initial() S
	enabled(s *S) []A
	apply(s S, act A, describe bool) (S, string, *failure)
	key(s *S) string
}

// exploreSteps explores m breadth first from its initial state and fills
// rep: the first failure found (the shortest counterexample), or a state
// where nothing can happen, is its Violation.
func exploreSteps[S any, A comparable](rep Report, m stepModel[S, A]) Report {
	start := time.Now()
	var none A
	g := newGraph[A](false)
	s0 := m.initial()
	g.add(m.key(&s0), -1, none)
	states := []S{s0}
	for id := int32(0); id < int32(len(states)); id++ {
		s := states[id]
		acts := m.enabled(&s)
		if len(acts) == 0 {
			rep.Violation = replaySteps(m, g, id, none, fail(PropTimeAdvances, "no step can happen and time cannot advance"))
			return finish(&rep, g, start)
		}
		for _, act := range acts {
			next, _, f := m.apply(s, act, false)
			if f != nil {
				rep.Violation = replaySteps(m, g, id, act, f)
				return finish(&rep, g, start)
			}
			if _, isNew := g.add(m.key(&next), id, act); isNew {
				states = append(states, next)
			}
		}
	}
	return finish(&rep, g, start)
}

// replaySteps describes the shortest path to state id, followed by act
// when it is not the zero action, by replaying it from the initial state.
func replaySteps[S any, A comparable](m stepModel[S, A], g *graph[A], id int32, act A, f *failure) *Violation {
	path := g.path(id)
	var none A
	if act != none {
		path = append(path, act)
	}
	s := m.initial()
	lines := make([]string, 0, len(path))
	for i, a := range path {
		var line string
		var ff *failure
		s, line, ff = m.apply(s, a, true)
		if ff != nil && i == len(path)-1 {
			line += fmt.Sprintf("\n      ✗ %s", ff.detail)
		}
		lines = append(lines, line)
	}
	return &Violation{Property: f.prop, Detail: f.detail, Trace: lines}
}
