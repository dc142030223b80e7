package baton

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/batonlock/baton/protocol"
)

// The fields of a resumable session on the wire (docs/protocol.md):
// HELLO flags bit 0 asks for a resumable session; WELCOME flags bit 0
// carries the session's secret and node, bit 1 the ring version of a
// cluster node; CLAIM flags bit 1 is a re-assertion, followed by the
// claim's token, the ring, the prior session, its secret and its node.
const (
	helloResumable   uint8 = 0x01
	welcomeResumable uint8 = 0x01
	welcomeRing      uint8 = 0x02
	claimReassert    uint8 = 0x02

	// Claim-level codes of a re-assertion's REFUSED.
	codeReassertRefused protocol.Code = 0x04
	codeStaleRing       protocol.Code = 0x05
)

// secretLen is the size of a resumable session's secret.
const secretLen = 16

// resumeIdent names a resumable session: what a re-assertion gives as
// its prior session.
type resumeIdent struct {
	session uint64
	secret  [secretLen]byte
	node    string
}

// welcomeInfo is a WELCOME with its optional fields.
type welcomeInfo struct {
	frame   protocol.Frame // Flags cleared: the rule checks the plain frame
	flags   uint8
	ident   *resumeIdent // nil unless bit 0
	ring    uint64       // bit 1
	hasRing bool
}

// appendHelloFlags appends a HELLO with flags.
func appendHelloFlags(b []byte, leaseMS uint32, flags uint8, label string) []byte {
	return protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeHello, LeaseMS: leaseMS, Flags: flags, Label: label})
}

// appendReassert appends a CLAIM with the re-assertion flag and its
// fields after the name.
func appendReassert(b []byte, id uint32, m Mode, noWait bool, name string, token, ring uint64, prior *resumeIdent) []byte {
	flags := claimReassert
	if noWait {
		flags |= protocol.ClaimNoWait
	}
	start := len(b)
	b = protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: flags, Mode: m.kind, Limit: m.limit, Name: name})
	be := binary.BigEndian
	b = be.AppendUint64(b, token)
	b = be.AppendUint64(b, ring)
	b = be.AppendUint64(b, prior.session)
	b = append(b, prior.secret[:]...)
	b = append(b, byte(len(prior.node)))
	b = append(b, prior.node...)
	be.PutUint16(b[start:], uint16(len(b)-start-protocol.FrameHeaderLen))
	return b
}

// readHelloAnswerFlags is protocol.ReadHelloAnswer that also decodes the
// optional fields of a WELCOME whose flags the client asked for (allowed:
// the bits it may accept). A set bit it did not allow is a violation.
func readHelloAnswerFlags(r io.Reader, allowed uint8) (welcomeInfo, error) {
	var first [protocol.FrameHeaderLen]byte
	if _, err := io.ReadFull(r, first[:1]); err != nil {
		return welcomeInfo{}, err
	}
	if protocol.Type(first[0]) == protocol.TypeError {
		f, err := protocol.ReadHelloAnswer(io.MultiReader(bytes.NewReader(first[:1]), r))
		return welcomeInfo{frame: f}, err
	}
	if _, err := io.ReadFull(r, first[1:]); err != nil {
		return welcomeInfo{}, eofUnexpected(err)
	}
	n := int(binary.BigEndian.Uint16(first[:]))
	if n == 0 || n > protocol.MaxFrameLen {
		_, _, err := protocol.ParseServerFrameV2(first[:])
		return welcomeInfo{}, err
	}
	buf := make([]byte, protocol.FrameHeaderLen+n)
	copy(buf, first[:])
	if _, err := io.ReadFull(r, buf[protocol.FrameHeaderLen:]); err != nil {
		return welcomeInfo{}, eofUnexpected(err)
	}
	return parseWelcomeFlags(buf, allowed)
}

// parseWelcomeFlags decodes one whole server frame; a WELCOME with flags
// is decoded here, anything else by the protocol package.
func parseWelcomeFlags(buf []byte, allowed uint8) (welcomeInfo, error) {
	body := buf[protocol.FrameHeaderLen:]
	const fixed = 1 + 8 + 1 // type, session, flags
	if protocol.Type(body[0]) != protocol.TypeWelcome || len(body) < fixed || body[9] == 0 {
		f, _, err := protocol.ParseServerFrameV2(buf)
		return welcomeInfo{frame: f}, err
	}
	be := binary.BigEndian
	w := welcomeInfo{frame: protocol.Frame{Type: protocol.TypeWelcome, Session: be.Uint64(body[1:])}, flags: body[9]}
	if w.flags&^allowed != 0 {
		return w, fmt.Errorf("%w: WELCOME flags 0x%02x, asked for 0x%02x", protocol.ErrUnsupportedFeature, w.flags, allowed)
	}
	p := body[fixed:]
	bad := func() (welcomeInfo, error) {
		return w, fmt.Errorf("%w: WELCOME with flags 0x%02x: payload of %d bytes does not fit them", protocol.ErrInvalidFrame, w.flags, len(body)-1)
	}
	if w.flags&welcomeResumable != 0 {
		if len(p) < secretLen+1 || len(p) < secretLen+1+int(p[secretLen]) {
			return bad()
		}
		id := &resumeIdent{session: w.frame.Session}
		copy(id.secret[:], p)
		nl := int(p[secretLen])
		id.node = string(p[secretLen+1 : secretLen+1+nl])
		w.ident = id
		p = p[secretLen+1+nl:]
	}
	if w.flags&welcomeRing != 0 {
		if len(p) < 8 {
			return bad()
		}
		w.ring, w.hasRing = be.Uint64(p), true
		p = p[8:]
	}
	if len(p) != 0 {
		return bad()
	}
	return w, nil
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
