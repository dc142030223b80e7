package modelcheck

import (
	"fmt"
	"time"
)

// succ is one transition of a model whose next function lists them: the
// step taken, the state it leads to, and the property it breaks, if any.
type succ[S any, T fmt.Stringer] struct {
	step T
	to   S
	f    *failure
}

// exploreSucc explores a model breadth first from init, following next,
// with states deduplicated by key, and fills rep: the first failure found
// is its Violation, with the shortest trace to it. seen, if not nil, is
// called with every transition explored.
func exploreSucc[S any, T fmt.Stringer](rep Report, init S, key func(*S) string, next func(S) []succ[S, T], seen func(from *S, st T)) Report {
	start := time.Now()
	var none T
	g := newGraph[T](false)
	g.add(key(&init), -1, none)
	states := []S{init}
	for id := int32(0); id < int32(len(states)); id++ {
		for _, sc := range next(states[id]) {
			if seen != nil {
				seen(&states[id], sc.step)
			}
			if sc.f != nil {
				var trace []string
				for _, st := range g.path(id) {
					trace = append(trace, st.String())
				}
				trace = append(trace, sc.step.String())
				rep.Violation = &Violation{Property: sc.f.prop, Detail: sc.f.detail, Trace: trace}
				return finish(&rep, g, start)
			}
			if _, isNew := g.add(key(&sc.to), id, sc.step); isNew {
				states = append(states, sc.to)
			}
		}
	}
	return finish(&rep, g, start)
}

// replayTrace replays a violation's path of encoded steps from init,
// following next, and describes each step with describe, given the ticks
// of real time so far (tick says which steps are ticks); the last line
// gets detail. model names the model in the panic of a path that does
// not replay.
func replayTrace[S any, T fmt.Stringer](model string, init S, next func(*S) []succ[S, T], tick func(T) bool,
	describe func(*S, T, int) string, path []string, detail string) []string {
	s := init
	t := 0
	lines := make([]string, 0, len(path))
	for i, enc := range path {
		found := false
		for _, sc := range next(&s) {
			if sc.step.String() == enc {
				found = true
				if tick(sc.step) {
					t++
				}
				lines = append(lines, describe(&s, sc.step, t))
				s = sc.to
				break
			}
		}
		if !found {
			panic("modelcheck: " + model + " trace does not replay")
		}
		if i == len(path)-1 {
			lines[i] += "\n      ✗ " + detail
		}
	}
	return lines
}
