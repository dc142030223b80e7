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
