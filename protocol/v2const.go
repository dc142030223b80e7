package protocol

// Version2 is the version byte of a version 2 opening (docs/protocol-v2.md,
// "Version 2").
const Version2 = 2

// PreambleLen is the size of the version 2 preamble, 01 02 00 00 00 00 00
// 00: the shape of a version 1 ACQUIRE header with version 2, lease 0 and
// an empty name, so that every version 1 server refuses it with ERROR 0x10
// without waiting for more bytes.
const PreambleLen = 8

// Frame sizes of version 2. Every frame after the preamble, in both
// directions, is a u16 length followed by that many bytes: the type byte
// and the type's payload.
const (
	// FrameHeaderLen is the size of the length field.
	FrameHeaderLen = 2
	// MaxFrameLen is the largest value of the length field, a protocol
	// constant. A larger value is refused with CodeFrameTooLong before
	// any of the frame is read.
	MaxFrameLen = 512
	// MaxFrameSize is the most bytes one version 2 frame occupies.
	MaxFrameSize = FrameHeaderLen + MaxFrameLen
	// MaxLabelLen is the longest session label in bytes (its length
	// field is a u8).
	MaxLabelLen = 255
)

// Version 2 client-to-server frame types.
const (
	TypeHello   Type = 0x21
	TypePing    Type = 0x22
	TypeClaim   Type = 0x23
	TypeRelease Type = 0x24
)

// Version 2 server-to-client frame types. TypeSessionError is the frame
// docs/protocol-v2.md calls ERROR in version 2; it is not version 1's
// TypeError.
const (
	TypeWelcome      Type = 0x31
	TypePong         Type = 0x32
	TypeGranted      Type = 0x33
	TypeQueued       Type = 0x34
	TypeBusy         Type = 0x35
	TypePromoted     Type = 0x36
	TypeReleased     Type = 0x37
	TypeRefused      Type = 0x38
	TypeRevoked      Type = 0x39
	TypeSessionError Type = 0x3a
)

// Payload sizes of the fixed version 2 frames, type byte excluded.
const (
	helloFixedLen   = 4 + 1 + 1         // lease_ms, flags, label_len
	pingLen         = 8                 // seq
	claimFixedLen   = 4 + 1 + 1 + 4 + 1 // claim, flags, mode, limit, name_len
	claimIDLen      = 4                 // claim
	welcomeLen      = 8 + 1             // session, flags
	grantLen        = 4 + 8             // claim, token
	queuedTicketLen = 4 + 8             // claim, ticket
	claimErrFixed   = 4 + 1 + 1         // claim, code, reason_len
	sessionErrFixed = 1 + 1             // code, reason_len
)

// Mode is the kind of a claim: how it shares its lock with other claims.
type Mode uint8

// The claim modes of version 2.
const (
	// ModeExclusive conflicts with every other claim: version 1's only
	// mode.
	ModeExclusive Mode = 0x01
	// ModeShared conflicts with exclusive claims only.
	ModeShared Mode = 0x02
	// ModeSemaphore admits at most Limit holders of the lock.
	ModeSemaphore Mode = 0x03
)

func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	case ModeSemaphore:
		return "semaphore"
	}
	return "unknown"
}

// ClaimNoWait is the CLAIM flag that asks for BUSY instead of a place in
// the queue when the claim cannot be granted at once.
const ClaimNoWait uint8 = 0x01

// ClaimReassert is the CLAIM flag of a re-assertion: the claim continues
// one of a prior session (its id there is the CLAIM's claim id), and the
// name is followed by its token (0 for a queued claim), the ring version
// of the WELCOME of the session that sends it, the prior session's id and
// secret, and the node it lived on (Frame.Token, Ring, Session, Secret,
// Node). docs/protocol-v2-resume.md, "v2 resumable sessions and re-assertion".
const ClaimReassert uint8 = 0x02

// ClaimTicket is the CLAIM flag, valid only with ClaimReassert, of a
// re-assertion of a claim the client knows as queued with a queue ticket:
// the field that carries a held claim's token carries the ticket instead
// (Frame.Ticket). docs/protocol-v2-tickets.md, "v2 queue tickets".
const ClaimTicket uint8 = 0x04

// HelloResumable is the HELLO flag that asks for a resumable session:
// when its connection breaks, the server keeps its claims for the
// session's lease, and a new session may re-assert them.
const HelloResumable uint8 = 0x01

// HelloTickets is the HELLO flag that asks for queue tickets: a server
// that knows them answers WELCOME with WelcomeTickets and gives every
// claim it queues for the session a ticket in QUEUED (Frame.Ticket).
const HelloTickets uint8 = 0x02

// HelloDetach is the HELLO flag, valid only with HelloResumable, of a
// client that sends DETACH before it closes a connection on purpose: a
// server that knows it answers WELCOME with WelcomeDetach, and then ends
// the session, and its claims, at once when the client's side of the
// connection closes (FIN or reset) without a DETACH before it, as it
// ends a plain session. docs/protocol-v2-resume.md, "v2 detach".
const HelloDetach uint8 = 0x04

// WELCOME flags. WelcomeResumable: the session is resumable, and the
// session id is followed by its secret and the id of the node it lives
// on (Frame.Secret, Frame.Node). WelcomeRing: the server is a cluster
// node, and the frame ends with the ring version it had applied
// (Frame.Ring). WelcomeTickets: the answer to a HELLO with HelloTickets;
// the session's QUEUED frames carry queue tickets, and its re-assertions
// may carry them (ClaimTicket).
const (
	WelcomeResumable uint8 = 0x01
	WelcomeRing      uint8 = 0x02
	WelcomeTickets   uint8 = 0x04
	// WelcomeDetach: the answer to a HELLO with HelloDetach.
	WelcomeDetach uint8 = 0x08
)

// SecretLen is the size of a resumable session's secret.
const SecretLen = 16

// reassertFixedLen is the size of a re-assertion's fields after the name,
// the node excluded: token, ring, session, secret, node_len.
const reassertFixedLen = 8 + 8 + 8 + SecretLen + 1

// MaxReassertText is the most bytes a re-assertion's name and node may
// take together: a CLAIM with both fits the 512-byte frame.
const MaxReassertText = MaxFrameLen - 1 - claimFixedLen - reassertFixedLen

// Reserved flag bits: set in a frame of this revision, they are refused
// with CodeUnsupportedFeature (docs/protocol-v2.md).
const (
	helloReservedFlags   uint8 = ^(HelloResumable | HelloTickets | HelloDetach | HelloValues)
	claimReservedFlags   uint8 = ^(ClaimNoWait | ClaimReassert | ClaimTicket | ClaimValue)
	welcomeReservedFlags uint8 = ^(WelcomeResumable | WelcomeRing | WelcomeTickets | WelcomeDetach | WelcomeValues)
)
