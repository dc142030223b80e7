package locktable

import "time"

// SetGate makes the table grant nothing before notBefore, typically the
// NotBefore of its token source (a Gate), so that no grant waits for a
// token: until then a claim that would be granted joins its queue (or,
// with NoWait, is answered Busy), and a claim that ends promotes nobody.
// The claims that waited are granted, in queue order, by OpenGate or by
// the first Claim or Acquire at or after notBefore, whichever comes
// first. A zero notBefore means no gate. Call it before the first claim.
func (t *Table) SetGate(notBefore time.Time) {
	t.gate, t.gated = notBefore, !notBefore.IsZero()
}

// OpenGate grants, once now is at or after the gate, the claims that
// waited for it: lock by lock in name order, each queue from its head as
// far as its holders admit, exactly as a promotion (their sessions are
// sent ACQUIRED). Before the gate, or once it is open, it does nothing.
func (t *Table) OpenGate(now time.Time) Result {
	var res Result
	t.openGate(now, &res)
	return res
}

// Gated reports whether a claim at now would wait for the gate.
func (t *Table) Gated(now time.Time) bool { return t.closed(now) }

func (t *Table) openGate(now time.Time, res *Result) {
	if !t.gated || now.Before(t.gate) {
		return
	}
	t.gated = false
	for _, name := range t.lockNames() {
		t.promote(now, t.locks[name], res)
	}
}

// closed reports whether a grant at now must wait for the gate.
func (t *Table) closed(now time.Time) bool {
	return t.gated && now.Before(t.gate)
}
