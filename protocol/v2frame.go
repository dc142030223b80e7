package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Frame is one decoded version 2 frame of either direction. Type says
// which fields are meaningful; the others are zero.
type Frame struct {
	Type    Type
	LeaseMS uint32 // HELLO
	Flags   uint8  // HELLO, CLAIM, WELCOME
	Label   string // HELLO
	Seq     uint64 // PING, PONG
	Claim   uint32 // CLAIM, RELEASE and every claim-level server frame
	Mode    Mode   // CLAIM
	Limit   uint32 // CLAIM (semaphore)
	Name    string // CLAIM
	Session uint64 // WELCOME; a re-assertion's prior session
	Token   uint64 // GRANTED, PROMOTED; a re-assertion's token
	// Ticket is a queued claim's queue ticket: in QUEUED to a session
	// that asked for tickets (0: the frame has none), and in a
	// re-assertion with ClaimTicket, in the place of its token.
	Ticket uint64
	// Resumable sessions and re-assertion (docs/protocol-v2-resume.md): a WELCOME
	// with WelcomeResumable and a re-assertion (CLAIM with ClaimReassert)
	// carry the session's secret and node; a WELCOME with WelcomeRing and
	// a re-assertion carry a ring version.
	Secret [SecretLen]byte
	Node   string
	Ring   uint64
	Code   Code   // REFUSED, REVOKED, ERROR (either version's)
	Reason string // REFUSED, REVOKED, ERROR (either version's)

	// Range-lock frames (v2range.go) use Claim as the request id, Name as
	// the key, Flags, Token, Session and Label (the conflicting lock's
	// session) and these:
	Op         RangeOp     // RANGE
	LockType   uint8       // RANGE, ANSWER
	Owner      uint64      // RANGE, ANSWER
	Start, End uint64      // RANGE, ANSWER
	Status     RangeStatus // ANSWER

	// Values and watches (v2watch.go) use Claim as the watch id, Name,
	// Mode, Token and Label, and these:
	Value    string         // CLAIM with ClaimValue, PROCLAIM, CHANGE
	Proclaim ProclaimStatus // PROCLAIMED
	Change   ChangeKind     // CHANGE
	Identity string         // CHANGE
}

// Lease returns a HELLO's session lease as a duration.
func (f Frame) Lease() time.Duration { return time.Duration(f.LeaseMS) * time.Millisecond }

// NoWait reports whether a CLAIM asks for BUSY rather than a queue place.
func (f Frame) NoWait() bool { return f.Flags&ClaimNoWait != 0 }

// Reassert reports whether a CLAIM is a re-assertion.
func (f Frame) Reassert() bool { return f.Flags&ClaimReassert != 0 }

// Resumable reports whether a HELLO asks for, or a WELCOME grants, a
// resumable session.
func (f Frame) Resumable() bool { return f.Flags&HelloResumable != 0 }

// Tickets reports whether a HELLO asks for queue tickets.
func (f Frame) Tickets() bool { return f.Flags&HelloTickets != 0 }

// Detach reports whether a HELLO asks for detach (HelloDetach).
func (f Frame) Detach() bool { return f.Flags&HelloDetach != 0 }

// HasTicket reports whether a CLAIM is a re-assertion with a queue ticket.
func (f Frame) HasTicket() bool {
	return f.Flags&(ClaimReassert|ClaimTicket) == ClaimReassert|ClaimTicket
}

func (f Frame) String() string {
	switch f.Type {
	case TypeHello:
		return fmt.Sprintf("HELLO(%dms flags=0x%02x %q)", f.LeaseMS, f.Flags, f.Label)
	case TypePing, TypePong:
		return fmt.Sprintf("%v(%d)", f.Type, f.Seq)
	case TypeClaim:
		if f.HasTicket() {
			return fmt.Sprintf("CLAIM(%d %v limit=%d flags=0x%02x %q ticket=%d ring=%d session=%d node=%q)",
				f.Claim, f.Mode, f.Limit, f.Flags, f.Name, f.Ticket, f.Ring, f.Session, f.Node)
		}
		if f.Reassert() {
			return fmt.Sprintf("CLAIM(%d %v limit=%d flags=0x%02x %q token=%d ring=%d session=%d node=%q)",
				f.Claim, f.Mode, f.Limit, f.Flags, f.Name, f.Token, f.Ring, f.Session, f.Node)
		}
		return fmt.Sprintf("CLAIM(%d %v limit=%d flags=0x%02x %q)", f.Claim, f.Mode, f.Limit, f.Flags, f.Name)
	case TypeQueued:
		if f.Ticket != 0 {
			return fmt.Sprintf("%v(%d ticket=%d)", f.Type, f.Claim, f.Ticket)
		}
		return fmt.Sprintf("%v(%d)", f.Type, f.Claim)
	case TypeRelease, TypeBusy, TypeReleased:
		return fmt.Sprintf("%v(%d)", f.Type, f.Claim)
	case TypeWelcome:
		return fmt.Sprintf("WELCOME(session=%d flags=0x%02x node=%q ring=%d)", f.Session, f.Flags, f.Node, f.Ring)
	case TypeGranted, TypePromoted:
		return fmt.Sprintf("%v(%d token=%d)", f.Type, f.Claim, f.Token)
	case TypeRefused, TypeRevoked:
		return fmt.Sprintf("%v(%d 0x%02x %q)", f.Type, f.Claim, uint8(f.Code), f.Reason)
	case TypeRange, TypeRangeAnswer:
		return rangeString(f)
	case TypeRing, TypeRingMember, TypeRingEnd:
		return ringString(f)
	case TypeDetach, TypeDetached:
		return f.Type.String()
	case TypeProclaim, TypeWatch, TypeProclaimed, TypeChange:
		return watchString(f)
	case TypeSessionError, TypeError:
		return fmt.Sprintf("ERROR(0x%02x %q)", uint8(f.Code), f.Reason)
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", uint8(f.Type))
}

// ClaimError is a claim-level fault of a well-formed CLAIM frame: the
// server answers REFUSED with the code of Err and the session lives on.
// CodeOf finds the code through it.
type ClaimError struct {
	Claim uint32
	Err   error // a sentinel: ErrUnsupportedFeature, ErrUnknownMode, …
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("baton: claim %d: %s", e.Claim, strings.TrimPrefix(e.Err.Error(), "baton: "))
}

func (e *ClaimError) Unwrap() error { return e.Err }

// AppendPreamble appends the version 2 preamble, 01 02 00 00 00 00 00 00.
func AppendPreamble(b []byte) []byte {
	return append(b, byte(TypeAcquire), Version2, 0, 0, 0, 0, 0, 0)
}

// AppendFrame appends f as one version 2 frame: the u16 length, the type
// byte and the fields that f.Type defines. It encodes the fields as given,
// valid or not, so tests can produce every bad input; a label, name or
// reason longer than 255 bytes is cut at a UTF-8 boundary to fit its u8
// length field. A type that version 2 does not define gets no fields.
func AppendFrame(b []byte, f Frame) []byte {
	start := len(b)
	b = append(b, 0, 0, byte(f.Type))
	be := binary.BigEndian
	switch f.Type {
	case TypeHello:
		b = be.AppendUint32(b, f.LeaseMS)
		b = append(b, f.Flags)
		b = appendString8(b, f.Label)
	case TypePing, TypePong:
		b = be.AppendUint64(b, f.Seq)
	case TypeClaim:
		b = be.AppendUint32(b, f.Claim)
		b = append(b, f.Flags, byte(f.Mode))
		b = be.AppendUint32(b, f.Limit)
		b = appendString8(b, f.Name)
		if f.Flags&ClaimReassert != 0 {
			if f.Flags&ClaimTicket != 0 {
				b = be.AppendUint64(b, f.Ticket)
			} else {
				b = be.AppendUint64(b, f.Token)
			}
			b = be.AppendUint64(b, f.Ring)
			b = be.AppendUint64(b, f.Session)
			b = append(b, f.Secret[:]...)
			b = appendString8(b, f.Node)
		}
		if f.Flags&ClaimValue != 0 {
			b = appendValue(b, f.Value)
		}
	case TypeRelease, TypeBusy, TypeReleased:
		b = be.AppendUint32(b, f.Claim)
	case TypeQueued:
		b = be.AppendUint32(b, f.Claim)
		if f.Ticket != 0 {
			b = be.AppendUint64(b, f.Ticket)
		}
	case TypeWelcome:
		b = be.AppendUint64(b, f.Session)
		b = append(b, f.Flags)
		if f.Flags&WelcomeResumable != 0 {
			b = append(b, f.Secret[:]...)
			b = appendString8(b, f.Node)
		}
		if f.Flags&WelcomeRing != 0 {
			b = be.AppendUint64(b, f.Ring)
		}
	case TypeGranted, TypePromoted:
		b = be.AppendUint32(b, f.Claim)
		b = be.AppendUint64(b, f.Token)
	case TypeRefused, TypeRevoked:
		b = be.AppendUint32(b, f.Claim)
		b = append(b, byte(f.Code))
		b = appendString8(b, f.Reason)
	case TypeSessionError:
		b = append(b, byte(f.Code))
		b = appendString8(b, f.Reason)
	case TypeRange, TypeRangeAnswer:
		b = appendRangeFields(b, f)
	case TypeRing, TypeRingMember, TypeRingEnd:
		b = appendRingFields(b, f)
	case TypeProclaim, TypeWatch, TypeProclaimed, TypeChange:
		b = appendWatchFields(b, f)
	}
	be.PutUint16(b[start:], uint16(len(b)-start-FrameHeaderLen))
	return b
}

func appendString8(b []byte, s string) []byte {
	s = truncateUTF8(s, 255)
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// AppendHello appends a HELLO frame with no flags: the session's lease in
// milliseconds and its label (shown by the admin API and the audit log).
func AppendHello(b []byte, leaseMS uint32, label string) []byte {
	return AppendFrame(b, Frame{Type: TypeHello, LeaseMS: leaseMS, Label: label})
}

// AppendPing appends a PING frame, the session heartbeat.
func AppendPing(b []byte, seq uint64) []byte {
	return AppendFrame(b, Frame{Type: TypePing, Seq: seq})
}

// AppendClaim appends a CLAIM frame. limit is the semaphore limit (0 for
// the other modes); flags is 0 or ClaimNoWait.
func AppendClaim(b []byte, claim uint32, mode Mode, limit uint32, flags uint8, name string) []byte {
	return AppendFrame(b, Frame{Type: TypeClaim, Claim: claim, Flags: flags, Mode: mode, Limit: limit, Name: name})
}

// AppendRelease appends a RELEASE frame.
func AppendRelease(b []byte, claim uint32) []byte {
	return AppendFrame(b, Frame{Type: TypeRelease, Claim: claim})
}

// AppendWelcome appends a WELCOME frame, the answer to HELLO, with no
// flags (AppendFrame writes the others).
func AppendWelcome(b []byte, session uint64) []byte {
	return AppendFrame(b, Frame{Type: TypeWelcome, Session: session})
}

// AppendPong appends a PONG frame, the answer to PING(seq).
func AppendPong(b []byte, seq uint64) []byte {
	return AppendFrame(b, Frame{Type: TypePong, Seq: seq})
}

// AppendGranted appends a GRANTED frame: the answer to a CLAIM granted at
// once.
func AppendGranted(b []byte, claim uint32, token uint64) []byte {
	return AppendFrame(b, Frame{Type: TypeGranted, Claim: claim, Token: token})
}

// AppendQueued appends a QUEUED frame: the answer to a CLAIM that waits.
func AppendQueued(b []byte, claim uint32) []byte {
	return AppendFrame(b, Frame{Type: TypeQueued, Claim: claim})
}

// AppendQueuedTicket appends a QUEUED frame with the claim's queue
// ticket, for a session that asked for tickets; a ticket of 0 gives the
// frame without one.
func AppendQueuedTicket(b []byte, claim uint32, ticket uint64) []byte {
	return AppendFrame(b, Frame{Type: TypeQueued, Claim: claim, Ticket: ticket})
}

// AppendBusy appends a BUSY frame: the answer to a no-wait CLAIM that
// could not be granted at once.
func AppendBusy(b []byte, claim uint32) []byte {
	return AppendFrame(b, Frame{Type: TypeBusy, Claim: claim})
}

// AppendPromoted appends a PROMOTED frame: the push that grants a queued
// claim.
func AppendPromoted(b []byte, claim uint32, token uint64) []byte {
	return AppendFrame(b, Frame{Type: TypePromoted, Claim: claim, Token: token})
}

// AppendReleased appends a RELEASED frame, the answer to RELEASE.
func AppendReleased(b []byte, claim uint32) []byte {
	return AppendFrame(b, Frame{Type: TypeReleased, Claim: claim})
}

// AppendRefused appends a REFUSED frame: a claim-level error answering a
// CLAIM. An empty reason is replaced by the code's canonical text, as
// AppendError does.
func AppendRefused(b []byte, claim uint32, code Code, reason string) []byte {
	return AppendFrame(b, Frame{Type: TypeRefused, Claim: claim, Code: code, Reason: reasonOr(code, reason)})
}

// AppendRevoked appends a REVOKED frame: the push that ends a held or
// queued claim (force-release, kick, access revoked). An empty reason is
// replaced by the code's canonical text.
func AppendRevoked(b []byte, claim uint32, code Code, reason string) []byte {
	return AppendFrame(b, Frame{Type: TypeRevoked, Claim: claim, Code: code, Reason: reasonOr(code, reason)})
}

// AppendSessionError appends a version 2 ERROR frame, the last frame of a
// session. An empty reason is replaced by the code's canonical text.
func AppendSessionError(b []byte, code Code, reason string) []byte {
	return AppendFrame(b, Frame{Type: TypeSessionError, Code: code, Reason: reasonOr(code, reason)})
}

func reasonOr(code Code, reason string) string {
	if reason == "" {
		return code.Reason()
	}
	return reason
}

// ReadPreambleTail reads the six bytes that follow 01 02 in a version 2
// preamble. The server has read 01 as a version 1 type byte and 02 as the
// version (ReadAcquireBody returns ErrUnsupportedVersion with Version 2).
// Bytes other than zero give ErrUnsupportedVersion, answered with the
// version 1 ERROR frame. It reads exactly six bytes.
func ReadPreambleTail(r io.Reader) error {
	var b [PreambleLen - 2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return eofIsUnexpected(err)
	}
	if b != [PreambleLen - 2]byte{} {
		return fmt.Errorf("%w: preamble bytes % x after 01 02, want zeros", ErrUnsupportedVersion, b[:])
	}
	return nil
}

// reader says which frames a decoder accepts.
type reader uint8

const (
	firstFromClient reader = iota // HELLO, the first frame after the preamble
	fromClient                    // every later client frame
	fromServer                    // every server frame
)

// ReadHello reads the first frame after the preamble, which must be
// HELLO, and checks it in the order of docs/protocol-v2-server.md. Every error it
// returns carries the code of the session-level ERROR to send (CodeOf),
// except I/O errors (io.ErrUnexpectedEOF for a frame cut short). It
// reads exactly one frame, or only its length field when that is 0 or
// over MaxFrameLen, and allocates at most MaxFrameLen bytes plus the label.
func ReadHello(r io.Reader) (Frame, error) { return readFrame(r, firstFromClient, -1, MaxFrameLen) }

// ReadClientFrame reads one client frame after HELLO: PING, CLAIM or
// RELEASE (HELLO again is ErrDuplicateHello). A claim-level fault of a
// CLAIM is returned as a *ClaimError together with the fields decoded so
// far: the server checks that the claim id is not in use (else
// ErrClaimInUse, session level), answers REFUSED and reads on. Every
// other error ends the session as ReadHello's do. It reads exactly one
// frame, or only its length field when that is 0 or over MaxFrameLen.
func ReadClientFrame(r io.Reader) (Frame, error) { return readFrame(r, fromClient, -1, MaxFrameLen) }

// ReadServerFrameV2 reads one version 2 server frame, for a client. A
// frame that is not a well-formed server frame gives an error carrying the
// code that names the fault (CodeOf); the client closes the connection. A
// clean EOF before the frame gives io.EOF, a frame cut short
// io.ErrUnexpectedEOF.
func ReadServerFrameV2(r io.Reader) (Frame, error) { return readFrame(r, fromServer, -1, MaxFrameLen) }

// ReadServerFrameV2Max is ReadServerFrameV2 with another frame limit:
// MaxValuesFrameLen on a session whose WELCOME carries WelcomeValues.
func ReadServerFrameV2Max(r io.Reader, maxLen int) (Frame, error) {
	return readFrame(r, fromServer, -1, maxLen)
}

// ReadHelloAnswer reads the server's first frame after a version 2
// opening. A server that does not speak version 2 answers with a version
// 1 ERROR frame, whose first byte 0x13 no version 2 frame can start with
// (a length's high byte is at most 0x02): that frame is returned with Type
// TypeError, and Code CodeUnsupportedVersion means "fall back to version
// 1". Anything else is read as ReadServerFrameV2 reads it; the client
// checks that it is WELCOME or ERROR.
func ReadHelloAnswer(r io.Reader) (Frame, error) {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Frame{}, err
	}
	if Type(b[0]) == TypeError {
		sf, err := ReadServerFrame(io.MultiReader(bytes.NewReader(b[:]), r))
		if err != nil {
			return Frame{}, err
		}
		return Frame{Type: sf.Type, Code: sf.Code, Reason: sf.Reason}, nil
	}
	return readFrame(r, fromServer, int(b[0]), MaxFrameLen)
}

// readFrame reads one frame; first, when not -1, is the length's high
// byte, already read.
func readFrame(r io.Reader, kind reader, first, maxLen int) (Frame, error) {
	var hdr [FrameHeaderLen]byte
	h := hdr[:]
	if first >= 0 {
		hdr[0] = byte(first)
		h = hdr[1:]
	}
	if n, err := io.ReadFull(r, h); err != nil {
		if n > 0 || first >= 0 {
			err = eofIsUnexpected(err)
		}
		return Frame{}, err
	}
	n, err := frameLen(hdr, maxLen)
	if err != nil {
		return Frame{}, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Frame{}, eofIsUnexpected(err)
	}
	return decodeBody(body, kind)
}

func frameLen(hdr [FrameHeaderLen]byte, maxLen int) (int, error) {
	n := int(binary.BigEndian.Uint16(hdr[:]))
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: length 0, a frame holds at least its type byte", ErrInvalidFrame)
	case n > maxLen && maxLen == MaxFrameLen:
		return 0, fmt.Errorf("%w: length %d", ErrFrameTooLong, n)
	case n > maxLen:
		return 0, fmt.Errorf("%w: length %d, over this session's %d", ErrFrameTooLong, n, maxLen)
	}
	return n, nil
}

// ParseHello is ReadHello on a buffer: it decodes the frame at the start
// of b and returns it with the number of bytes it occupies. When b does
// not hold the whole frame yet it returns n == 0 and a nil error: read
// more and call again. A length of 0 or over MaxFrameLen is refused as
// soon as the length field is in, with n == FrameHeaderLen.
func ParseHello(b []byte) (f Frame, n int, err error) {
	return parseFrame(b, firstFromClient, MaxFrameLen)
}

// ParseClientFrame is ReadClientFrame on a buffer, as ParseHello is
// ReadHello. With a *ClaimError, n is the frame's size: skip it and go on.
func ParseClientFrame(b []byte) (f Frame, n int, err error) {
	return parseFrame(b, fromClient, MaxFrameLen)
}

// ParseClientFrameMax is ParseClientFrame with another frame limit:
// MaxValuesFrameLen on a session whose WELCOME carries WelcomeValues.
func ParseClientFrameMax(b []byte, maxLen int) (f Frame, n int, err error) {
	return parseFrame(b, fromClient, maxLen)
}

// ParseServerFrameV2 is ReadServerFrameV2 on a buffer, as ParseHello is
// ReadHello.
func ParseServerFrameV2(b []byte) (f Frame, n int, err error) {
	return parseFrame(b, fromServer, MaxFrameLen)
}

// ParseServerFrameV2Max is ParseServerFrameV2 with another frame limit,
// as ParseClientFrameMax is ParseClientFrame.
func ParseServerFrameV2Max(b []byte, maxLen int) (f Frame, n int, err error) {
	return parseFrame(b, fromServer, maxLen)
}

// ParseHelloAnswer is ReadHelloAnswer on a buffer, as ParseHello is
// ReadHello.
func ParseHelloAnswer(b []byte) (f Frame, n int, err error) {
	if len(b) == 0 || Type(b[0]) != TypeError {
		return parseFrame(b, fromServer, MaxFrameLen)
	}
	if len(b) < 3 || len(b) < 3+int(b[2]) {
		return Frame{}, 0, nil
	}
	n = 3 + int(b[2])
	return Frame{Type: TypeError, Code: Code(b[1]), Reason: string(b[3:n])}, n, nil
}

func parseFrame(b []byte, kind reader, maxLen int) (Frame, int, error) {
	if len(b) < FrameHeaderLen {
		return Frame{}, 0, nil
	}
	n, err := frameLen([FrameHeaderLen]byte(b), maxLen)
	if err != nil {
		return Frame{}, FrameHeaderLen, err
	}
	if len(b) < FrameHeaderLen+n {
		return Frame{}, 0, nil
	}
	f, err := decodeBody(b[FrameHeaderLen:FrameHeaderLen+n], kind)
	return f, FrameHeaderLen + n, err
}

func malformed(t Type, format string, args ...any) error {
	return fmt.Errorf("%w: %v: "+format, append([]any{ErrInvalidFrame, t}, args...)...)
}

// payloadLen checks a payload against the exact size its type defines.
func payloadLen(t Type, p []byte, want int) error {
	if len(p) != want {
		return malformed(t, "payload of %d bytes, want %d", len(p), want)
	}
	return nil
}

// decodeBody decodes a frame's type byte and payload, in the order of
// docs/protocol-v2.md, and returns the fields decoded before any fault.
func decodeBody(body []byte, kind reader) (Frame, error) {
	f := Frame{Type: Type(body[0])}
	p := body[1:]
	be := binary.BigEndian
	switch f.Type {
	case TypeHello, TypePing, TypeClaim, TypeRelease, TypeRange, TypeRing, TypeDetach,
		TypeProclaim, TypeWatch:
		switch {
		case kind == fromServer:
			return f, fmt.Errorf("%w: client frame type 0x%02x from the server", ErrUnknownMessage, uint8(f.Type))
		case kind == firstFromClient && f.Type != TypeHello:
			return f, fmt.Errorf("%w: got %v", ErrFirstNotHello, f.Type)
		case kind == fromClient && f.Type == TypeHello:
			return f, ErrDuplicateHello
		}
	case TypeWelcome, TypePong, TypeGranted, TypeQueued, TypeBusy, TypePromoted,
		TypeReleased, TypeRefused, TypeRevoked, TypeSessionError, TypeRangeAnswer,
		TypeRingMember, TypeRingEnd, TypeDetached, TypeProclaimed, TypeChange:
		if kind != fromServer {
			return f, fmt.Errorf("%w: server frame type 0x%02x from the client", ErrUnknownMessage, uint8(f.Type))
		}
	default:
		return f, fmt.Errorf("%w: type 0x%02x", ErrUnknownMessage, uint8(f.Type))
	}

	switch f.Type {
	case TypeDetach, TypeDetached:
		return f, payloadLen(f.Type, p, 0)
	case TypeRange, TypeRangeAnswer:
		return decodeRange(f, p)
	case TypeRing, TypeRingMember, TypeRingEnd:
		return decodeRing(f, p)
	case TypeProclaim, TypeWatch, TypeProclaimed, TypeChange:
		return decodeWatch(f, p)
	case TypeHello:
		if len(p) < helloFixedLen {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), helloFixedLen)
		}
		f.LeaseMS = be.Uint32(p)
		f.Flags = p[4]
		if f.Flags&helloReservedFlags != 0 || f.Flags&(HelloResumable|HelloDetach) == HelloDetach {
			return f, fmt.Errorf("%w: HELLO flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
		if f.LeaseMS == 0 {
			return f, ErrInvalidLease
		}
		if err := payloadLen(f.Type, p, helloFixedLen+int(p[5])); err != nil {
			return f, err
		}
		f.Label = string(p[helloFixedLen:])
		if !utf8.ValidString(f.Label) {
			return f, ErrInvalidLabel
		}
	case TypePing, TypePong:
		if err := payloadLen(f.Type, p, pingLen); err != nil {
			return f, err
		}
		f.Seq = be.Uint64(p)
	case TypeClaim:
		if len(p) < claimIDLen+1 {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), claimFixedLen)
		}
		f.Claim = be.Uint32(p)
		f.Flags = p[4]
		if f.Flags&claimReservedFlags != 0 || f.Flags&(ClaimReassert|ClaimTicket) == ClaimTicket {
			// The fields after the flags may be laid out by a later
			// revision: they are not judged.
			return f, &ClaimError{f.Claim, ErrUnsupportedFeature}
		}
		if len(p) < claimFixedLen {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), claimFixedLen)
		}
		end := claimFixedLen + int(p[10])
		if len(p) < end {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), end)
		}
		tail := p[end:]
		if f.Flags&ClaimReassert != 0 {
			n, err := decodeReassert(&f, tail)
			if err != nil {
				return f, err
			}
			tail = tail[n:]
		}
		if f.Flags&ClaimValue != 0 {
			var err error
			if f, err = decodeClaimValue(f, tail); err != nil {
				return f, err
			}
		} else if err := payloadLen(f.Type, tail, 0); err != nil {
			return f, malformed(f.Type, "%d bytes after the claim's fields", len(tail))
		}
		f.Mode = Mode(p[5])
		f.Limit = be.Uint32(p[6:])
		f.Name = string(p[claimFixedLen:end])
		if err := validateClaim(f); err != nil {
			return f, &ClaimError{f.Claim, err}
		}
	case TypeRelease, TypeBusy, TypeReleased:
		if err := payloadLen(f.Type, p, claimIDLen); err != nil {
			return f, err
		}
		f.Claim = be.Uint32(p)
	case TypeQueued:
		if len(p) != queuedTicketLen {
			if err := payloadLen(f.Type, p, claimIDLen); err != nil {
				return f, err
			}
		}
		f.Claim = be.Uint32(p)
		if len(p) == queuedTicketLen {
			// A ticket is never 0: 0 means none, sent as the short form.
			if f.Ticket = be.Uint64(p[claimIDLen:]); f.Ticket == 0 {
				return f, malformed(f.Type, "ticket 0")
			}
		}
	case TypeWelcome:
		if len(p) < welcomeLen {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), welcomeLen)
		}
		f.Session = be.Uint64(p)
		f.Flags = p[8]
		if f.Flags&welcomeReservedFlags != 0 {
			return f, fmt.Errorf("%w: WELCOME flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
		want, r := welcomeLen, p[welcomeLen:]
		if f.Flags&WelcomeResumable != 0 {
			if len(r) < SecretLen+1 {
				return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), welcomeLen+SecretLen+1)
			}
			copy(f.Secret[:], r)
			n := int(r[SecretLen])
			want += SecretLen + 1 + n
			if len(r) < SecretLen+1+n {
				return f, malformed(f.Type, "payload of %d bytes, want %d", len(p), want)
			}
			f.Node = string(r[SecretLen+1 : SecretLen+1+n])
			r = r[SecretLen+1+n:]
		}
		if f.Flags&WelcomeRing != 0 {
			want += 8
			if len(r) >= 8 {
				f.Ring = be.Uint64(r)
			}
		}
		if err := payloadLen(f.Type, p, want); err != nil {
			return f, err
		}
	case TypeGranted, TypePromoted:
		if err := payloadLen(f.Type, p, grantLen); err != nil {
			return f, err
		}
		f.Claim = be.Uint32(p)
		f.Token = be.Uint64(p[4:])
	case TypeRefused, TypeRevoked:
		if len(p) < claimErrFixed {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), claimErrFixed)
		}
		if err := payloadLen(f.Type, p, claimErrFixed+int(p[5])); err != nil {
			return f, err
		}
		f.Claim = be.Uint32(p)
		f.Code = Code(p[4])
		f.Reason = string(p[claimErrFixed:])
	case TypeSessionError:
		if len(p) < sessionErrFixed {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), sessionErrFixed)
		}
		if err := payloadLen(f.Type, p, sessionErrFixed+int(p[1])); err != nil {
			return f, err
		}
		f.Code = Code(p[0])
		f.Reason = string(p[sessionErrFixed:])
	}
	return f, nil
}

// decodeReassert decodes a re-assertion's fields at the start of r, the
// bytes after a CLAIM's name, and returns their size.
func decodeReassert(f *Frame, r []byte) (int, error) {
	if len(r) < reassertFixedLen {
		return 0, malformed(f.Type, "re-assertion fields of %d bytes, at least %d", len(r), reassertFixedLen)
	}
	n := reassertFixedLen + int(r[reassertFixedLen-1])
	if len(r) < n {
		return 0, malformed(f.Type, "re-assertion fields of %d bytes, want %d", len(r), n)
	}
	be := binary.BigEndian
	if f.Flags&ClaimTicket != 0 {
		f.Ticket = be.Uint64(r)
	} else {
		f.Token = be.Uint64(r)
	}
	f.Ring = be.Uint64(r[8:])
	f.Session = be.Uint64(r[16:])
	copy(f.Secret[:], r[24:])
	f.Node = string(r[reassertFixedLen:n])
	return n, nil
}

// ValidateClaim checks the claim-level rules of a CLAIM that the frame
// alone decides, in the order of docs/protocol-v2-server.md: flags, mode, limit,
// name, value. It returns the sentinel of the first rule broken. The access
// check (0x18) and the lock's own rules (0x22, 0x23) are the server's.
func ValidateClaim(f Frame) error {
	if f.Flags&claimReservedFlags != 0 || f.Flags&(ClaimReassert|ClaimTicket) == ClaimTicket {
		return ErrUnsupportedFeature
	}
	return validateClaim(f)
}

func validateClaim(f Frame) error {
	switch f.Mode {
	case ModeExclusive, ModeShared:
		if f.Limit != 0 {
			return ErrInvalidLimit
		}
	case ModeSemaphore:
		if f.Limit == 0 {
			return ErrInvalidLimit
		}
	default:
		return ErrUnknownMode
	}
	switch {
	case len(f.Name) == 0:
		return ErrEmptyName
	case !utf8.ValidString(f.Name):
		return ErrInvalidName
	case len(f.Value) > MaxValueLen:
		return ErrValueTooLong
	}
	return nil
}
