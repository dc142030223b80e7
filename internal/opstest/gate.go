package opstest

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// PassGate returns once the server at addr grants: a version 1 ACQUIRE
// waits out the token gate of the process's first second, in which a
// version 2 CLAIM would be answered QUEUED. The probe's lock is released.
func PassGate(t testing.TB, addr string) {
	t.Helper()
	c := Dial(t, addr)
	c.Acquire("opstest-gate", time.Second)
	c.Expect(protocol.TypeAcquired, 0)
	c.Close()
}
