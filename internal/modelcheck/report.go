package modelcheck

import (
	"fmt"
	"strings"
	"time"
)

// Report is the outcome of one exhaustive exploration.
type Report struct {
	Model       string        // "table" or "client"
	Config      string        // the bounds, human-readable
	States      int           // distinct states after deduplication
	Transitions int           // transitions explored, self-loops included
	Depth       int           // length of the longest shortest path
	Elapsed     time.Duration // wall time of the exploration
	Violation   *Violation    // nil when every property holds
}

func (r Report) String() string {
	s := fmt.Sprintf("%s model %s: %d states, %d transitions, depth %d, %v",
		r.Model, r.Config, r.States, r.Transitions, r.Depth, r.Elapsed.Round(time.Millisecond))
	if r.Violation != nil {
		s += "\n" + strings.TrimRight(r.Violation.Error(), "\n")
	}
	return s
}

// Violation is a property that fails, with the shortest counterexample.
type Violation struct {
	Property string   // which property, for example "fifo"
	Detail   string   // what went wrong, in words
	Trace    []string // steps from the initial state, one line each
	// Loop, for a liveness violation, is a cycle that returns to the state
	// Trace ends in and can repeat forever.
	Loop []string
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION of %s: %s\n", v.Property, v.Detail)
	fmt.Fprintf(&b, "counterexample, %d steps from the initial state:\n", len(v.Trace))
	writeSteps(&b, v.Trace)
	if len(v.Loop) > 0 {
		fmt.Fprintf(&b, "then forever, a fair cycle (%d steps) back to that state:\n", len(v.Loop))
		writeSteps(&b, v.Loop)
	}
	return b.String()
}

// tickLine ends the description of a step in which only time advances;
// runs of them are printed as one line.
const tickLine = "time advances one step"

func writeSteps(b *strings.Builder, steps []string) {
	for i := 0; i < len(steps); i++ {
		j := i
		for j+1 < len(steps) && strings.HasSuffix(steps[i], tickLine) && strings.HasSuffix(steps[j+1], tickLine) {
			j++
		}
		if j-i >= 2 {
			fmt.Fprintf(b, "  %2d-%d. time advances %d steps, to %s\n", i+1, j+1, j-i+1,
				strings.TrimSpace(strings.TrimSuffix(steps[j], tickLine)))
			i = j
			continue
		}
		fmt.Fprintf(b, "  %2d. %s\n", i+1, steps[i])
	}
}

// Steps returns the number of steps of the counterexample, loop included.
func (v *Violation) Steps() int { return len(v.Trace) + len(v.Loop) }
