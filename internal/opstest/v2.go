package opstest

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// DialV2 opens a version 2 session with lease and label and reads its
// WELCOME. The connection is closed when the test ends.
func DialV2(t testing.TB, addr string, lease time.Duration, label string) *Conn {
	t.Helper()
	c := Dial(t, addr)
	c.Send(protocol.AppendHello(protocol.AppendPreamble(nil), uint32(lease/time.Millisecond), label))
	if f := c.ReadV2(); f.Type != protocol.TypeWelcome {
		t.Fatalf("opening answered %v, want WELCOME", f)
	}
	return c
}

// Claim sends a version 2 CLAIM (limit 0 unless mode is semaphore).
func (c *Conn) Claim(id uint32, mode protocol.Mode, limit uint32, name string) {
	c.t.Helper()
	c.Send(protocol.AppendClaim(nil, id, mode, limit, 0, name))
}

// ReadV2 reads one version 2 server frame within Timeout.
func (c *Conn) ReadV2() protocol.Frame {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(Timeout))
	f, err := protocol.ReadServerFrameV2(c.Conn)
	if err != nil {
		c.t.Fatalf("read from server: %v", err)
	}
	return f
}

// ExpectV2 reads one version 2 frame and fails unless it has type typ and
// claim id claim (and, for REFUSED and REVOKED, code, when code is not 0).
func (c *Conn) ExpectV2(typ protocol.Type, claim uint32, code protocol.Code) protocol.Frame {
	c.t.Helper()
	f := c.ReadV2()
	if f.Type != typ || f.Claim != claim || code != 0 && f.Code != code {
		c.t.Fatalf("got %v, want %v for claim %d (code 0x%02x)", f, typ, claim, uint8(code))
	}
	return f
}
