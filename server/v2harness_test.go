package server_test

// The version 2 raw client of the harness: it writes frames as given and
// reads version 2 frames under deadlines.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

type v2client struct {
	*client
	session uint64
}

// dialV2Raw connects and writes nothing.
func (ts *testServer) dialV2Raw(t *testing.T) *v2client {
	t.Helper()
	return &v2client{client: ts.dial(t)}
}

// dialV2 opens a version 2 session with lease and label and expects
// WELCOME.
func (ts *testServer) dialV2(t *testing.T, lease time.Duration, label string) *v2client {
	t.Helper()
	c := ts.dialV2Raw(t)
	c.mustWrite(openingV2(lease, label))
	f := c.mustReadV2()
	if f.Type != protocol.TypeWelcome || f.Session == 0 {
		t.Fatalf("%s: opening answered %v, want WELCOME", c, f)
	}
	c.session = f.Session
	return c
}

func openingV2(lease time.Duration, label string) []byte {
	return protocol.AppendHello(protocol.AppendPreamble(nil), protocol.LeaseMS(lease), label)
}

func claimFrame(id uint32, mode protocol.Mode, limit uint32, name string) []byte {
	return protocol.AppendClaim(nil, id, mode, limit, 0, name)
}

func noWaitFrame(id uint32, mode protocol.Mode, limit uint32, name string) []byte {
	return protocol.AppendClaim(nil, id, mode, limit, protocol.ClaimNoWait, name)
}

func releaseFrame(id uint32) []byte { return protocol.AppendRelease(nil, id) }

func (c *v2client) readV2(d time.Duration) (protocol.Frame, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	return protocol.ReadServerFrameV2(c.conn)
}

func (c *v2client) mustReadV2() protocol.Frame {
	c.t.Helper()
	f, err := c.readV2(waitLimit)
	if err != nil {
		c.t.Fatalf("%s: read: %v", c, err)
	}
	return f
}

// expect reads one frame and checks its type, claim id and code (the
// token is returned, not checked).
func (c *v2client) expect(typ protocol.Type, claim uint32) protocol.Frame {
	c.t.Helper()
	f := c.mustReadV2()
	if f.Type != typ || f.Claim != claim {
		c.t.Fatalf("%s: got %v, want %v for claim %d", c, f, typ, claim)
	}
	return f
}

// expectCode reads REFUSED or REVOKED for claim with code.
func (c *v2client) expectCode(typ protocol.Type, claim uint32, code protocol.Code) {
	c.t.Helper()
	f := c.expect(typ, claim)
	if f.Code != code || f.Reason != code.Reason() {
		c.t.Fatalf("%s: got %v, want %v(%d 0x%02x %q)", c, f, typ, claim, uint8(code), code.Reason())
	}
}

// claim sends CLAIM and returns the answer.
func (c *v2client) claim(id uint32, mode protocol.Mode, limit uint32, name string) protocol.Frame {
	c.t.Helper()
	c.mustWrite(claimFrame(id, mode, limit, name))
	f := c.mustReadV2()
	if f.Claim != id {
		c.t.Fatalf("%s: CLAIM %d answered %v", c, id, f)
	}
	return f
}

// mustHold claims and expects GRANTED; it returns the token.
func (c *v2client) mustHold(id uint32, mode protocol.Mode, limit uint32, name string) uint64 {
	c.t.Helper()
	f := c.claim(id, mode, limit, name)
	if f.Type != protocol.TypeGranted || f.Token == 0 {
		c.t.Fatalf("%s: CLAIM %d %q answered %v, want GRANTED", c, id, name, f)
	}
	return f.Token
}

// mustQueue claims and expects QUEUED.
func (c *v2client) mustQueue(id uint32, mode protocol.Mode, limit uint32, name string) {
	c.t.Helper()
	if f := c.claim(id, mode, limit, name); f.Type != protocol.TypeQueued {
		c.t.Fatalf("%s: CLAIM %d %q answered %v, want QUEUED", c, id, name, f)
	}
}

// release sends RELEASE and expects RELEASED.
func (c *v2client) release(id uint32) {
	c.t.Helper()
	c.mustWrite(releaseFrame(id))
	c.expect(protocol.TypeReleased, id)
}

// expectPromoted reads PROMOTED for claim and returns its token.
func (c *v2client) expectPromoted(claim uint32) uint64 {
	c.t.Helper()
	return c.expect(protocol.TypePromoted, claim).Token
}

// expectSessionError reads everything until EOF and expects it to end
// with exactly one version 2 ERROR(code) with the canonical reason.
func (c *v2client) expectSessionError(code protocol.Code) {
	c.t.Helper()
	for range 10000 {
		f, err := c.readV2(waitLimit)
		if err != nil {
			c.t.Fatalf("%s: read: %v, want ERROR(0x%02x)", c, err, uint8(code))
		}
		if f.Type != protocol.TypeSessionError {
			continue // answers to earlier requests may come first
		}
		if f.Code != code || f.Reason != code.Reason() {
			c.t.Fatalf("%s: got %v, want ERROR(0x%02x %q)", c, f, uint8(code), code.Reason())
		}
		c.expectEOFV2()
		return
	}
	c.t.Fatalf("%s: no ERROR", c)
}

// expectEOFV2 expects the server to close with no further frame.
func (c *v2client) expectEOFV2() {
	c.t.Helper()
	f, err := c.readV2(waitLimit)
	switch {
	case err == nil:
		c.t.Fatalf("%s: got %v, want EOF", c, f)
	case !errors.Is(err, io.EOF):
		c.t.Fatalf("%s: read: %v, want EOF", c, err)
	}
	c.close()
}

// expectSilenceV2 expects no frame and no close for d.
func (c *v2client) expectSilenceV2(d time.Duration) {
	c.t.Helper()
	f, err := c.readV2(d)
	if err == nil {
		c.t.Fatalf("%s: got %v, want nothing for %v", c, f, d)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("%s: read: %v, want nothing for %v", c, err, d)
	}
}

func (c *v2client) String() string { return fmt.Sprintf("v2 %s", c.addr()) }
