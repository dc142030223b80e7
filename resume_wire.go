package baton

import (
	"fmt"
	"io"

	"github.com/batonlock/baton/protocol"
)

// resumeIdent names a resumable session: what a re-assertion gives as
// its prior session (docs/protocol-v2-resume.md, "v2 resumable sessions and
// re-assertion").
type resumeIdent struct {
	session uint64
	secret  [protocol.SecretLen]byte
	node    string
}

// welcomeInfo is the answer to HELLO with the fields of a resumable
// session and of a cluster node.
type welcomeInfo struct {
	frame   protocol.Frame // a WELCOME's Flags cleared: the rule checks the plain frame
	ident   *resumeIdent   // nil unless the session is resumable
	ring    uint64         // the ring version of a cluster node's WELCOME, else 0
	tickets bool           // the server gives queue tickets (WelcomeTickets)
	detach  bool           // the server knows DETACH (WelcomeDetach)
	values  bool           // the server gives values and watches (WelcomeValues)
	flags   uint8          // WELCOME's flags
	// flagRefused: the server refused a HELLO flag it does not know
	// (ERROR 0x1e); open again without it.
	flagRefused bool
}

// readHelloAnswer reads the answer to HELLO (protocol.ReadHelloAnswer).
// A WELCOME may say it comes from a cluster node (its ring) and, when
// the client asked for it (resumable), that the session is resumable;
// any other flag is a violation. So is the tickets flag unless the
// client asked for tickets.
func readHelloAnswer(r io.Reader, resumable, tickets, detach, values bool) (welcomeInfo, error) {
	f, err := protocol.ReadHelloAnswer(r)
	if err != nil || f.Type != protocol.TypeWelcome {
		return welcomeInfo{frame: f}, err
	}
	allowed := protocol.WelcomeRing
	if resumable {
		allowed |= protocol.WelcomeResumable
	}
	if tickets {
		allowed |= protocol.WelcomeTickets
	}
	if detach {
		allowed |= protocol.WelcomeDetach
	}
	if values {
		allowed |= protocol.WelcomeValues
	}
	if f.Flags&^allowed != 0 {
		return welcomeInfo{frame: f}, fmt.Errorf("%w: WELCOME flags 0x%02x, the client allows 0x%02x", protocol.ErrUnsupportedFeature, f.Flags, allowed)
	}
	w := welcomeInfo{ring: f.Ring, tickets: f.Flags&protocol.WelcomeTickets != 0, detach: f.Flags&protocol.WelcomeDetach != 0,
		values: f.Flags&protocol.WelcomeValues != 0}
	if f.Flags&protocol.WelcomeResumable != 0 {
		w.ident = &resumeIdent{session: f.Session, secret: f.Secret, node: f.Node}
	}
	// The rule checks the frame as the base protocol has it (no flags);
	// the session keeps them (a cluster node's ring flag, router.go).
	w.frame = protocol.Frame{Type: protocol.TypeWelcome, Session: f.Session}
	w.flags = f.Flags
	return w, nil
}

// appendReassert appends the CLAIM that re-asserts claim id of the
// prior session, with its token (0 unless it was held) or, for a queued
// claim, its queue ticket (0: none; docs/protocol-v2-tickets.md, "v2 queue
// tickets"), and the ring of the session that sends it. A claim made
// with a value carries its latest one (value non-nil).
func appendReassert(b []byte, id uint32, m Mode, noWait bool, name string, token, ticket, ring uint64, prior *resumeIdent, value *string) []byte {
	flags := protocol.ClaimReassert
	var v string
	if value != nil {
		flags |= protocol.ClaimValue
		v = *value
	}
	if noWait {
		flags |= protocol.ClaimNoWait
	}
	if token == 0 && ticket != 0 {
		flags |= protocol.ClaimTicket
	}
	return protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: flags,
		Mode: m.kind, Limit: m.limit, Name: name,
		Token: token, Ticket: ticket, Ring: ring, Session: prior.session, Secret: prior.secret, Node: prior.node, Value: v})
}

// flagRefused reports whether the answer to a HELLO that asked for
// queue tickets, detach or values is the refusal of a server that does not know
// them (ERROR 0x1e): the client then opens again without asking.
func flagRefused(asked bool, w welcomeInfo) bool {
	return asked && w.frame.Type == protocol.TypeSessionError && w.frame.Code == protocol.CodeUnsupportedFeature
}
