package rangelock

import (
	"slices"
	"time"
)

// The token gate, as internal/locktable has it: a server's token source
// may not issue before an instant (a process's first second,
// locktable.Gate), and a grant takes a token. Until the gate opens the
// table grants nothing: a request that would be granted waits in its
// file's queue in arrival order (answered Conflict without Wait), and
// OpenGate grants the queues in that order. So requests that arrive on
// different connections before the gate keep their order.

// SetGate makes the table grant nothing before notBefore; the zero time
// removes the gate.
func (t *Table) SetGate(notBefore time.Time) {
	t.gate, t.gated = notBefore, !notBefore.IsZero()
}

// OpenGate grants, once now is at or after the gate, the waiting
// requests that fit, file by file in key order, each queue in arrival
// order, exactly as promotions. Before the gate, or once it is open, it
// does nothing.
func (t *Table) OpenGate(now time.Time) Result {
	var res Result
	if !t.gated || now.Before(t.gate) {
		return res
	}
	t.gated = false
	keys := make([]fileKey, 0, len(t.files))
	for fk, f := range t.files {
		if len(f.queue) > 0 {
			keys = append(keys, fk)
		}
	}
	slices.SortFunc(keys, fileKey.compare)
	for _, fk := range keys {
		t.promote(now, t.files[fk], &res)
	}
	return res
}

// closed reports whether a grant at now must wait for the gate.
func (t *Table) closed(now time.Time) bool { return t.gated && now.Before(t.gate) }
