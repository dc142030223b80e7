package protocol

// Version is the protocol version carried in every ACQUIRE.
const Version = 1

// MaxNameLen is the longest lock name in bytes. It is a protocol constant,
// not a server setting: the u16 length field can carry more.
const MaxNameLen = 255

// MaxReasonLen is the longest reason text of an ERROR frame in bytes.
const MaxReasonLen = 255

// Type is the first byte of every frame.
type Type uint8

// Client-to-server frame types.
const (
	TypeAcquire   Type = 0x01
	TypeHeartbeat Type = 0x02
)

// Server-to-client frame types.
const (
	TypeWaiting  Type = 0x11
	TypeAcquired Type = 0x12
	TypeError    Type = 0x13
)

func (t Type) String() string {
	switch t {
	case TypeAcquire:
		return "ACQUIRE"
	case TypeHeartbeat:
		return "HEARTBEAT"
	case TypeWaiting:
		return "WAITING"
	case TypeAcquired:
		return "ACQUIRED"
	case TypeError:
		return "ERROR"
	case TypeRange:
		return "RANGE"
	case TypeRangeAnswer:
		return "ANSWER"
	case TypeRing:
		return "RING"
	case TypeRingMember:
		return "MEMBER"
	case TypeRingEnd:
		return "RINGEND"
	case TypeDetach:
		return "DETACH"
	case TypeDetached:
		return "DETACHED"
	case TypeProclaim:
		return "PROCLAIM"
	case TypeWatch:
		return "WATCH"
	case TypeProclaimed:
		return "PROCLAIMED"
	case TypeChange:
		return "CHANGE"
	case TypeHello:
		return "HELLO"
	case TypePing:
		return "PING"
	case TypeClaim:
		return "CLAIM"
	case TypeRelease:
		return "RELEASE"
	case TypeWelcome:
		return "WELCOME"
	case TypePong:
		return "PONG"
	case TypeGranted:
		return "GRANTED"
	case TypeQueued:
		return "QUEUED"
	case TypeBusy:
		return "BUSY"
	case TypePromoted:
		return "PROMOTED"
	case TypeReleased:
		return "RELEASED"
	case TypeRefused:
		return "REFUSED"
	case TypeRevoked:
		return "REVOKED"
	case TypeSessionError:
		return "ERROR"
	}
	return "UNKNOWN"
}

// Fixed frame sizes in bytes.
const (
	// AcquireHeaderLen is type, version, lease_ms and name_len.
	AcquireHeaderLen = 1 + 1 + 4 + 2
	HeartbeatLen     = 1
	WaitingLen       = 1
	AcquiredLen      = 1 + 8
	// MaxAcquireLen is the largest valid ACQUIRE frame.
	MaxAcquireLen = AcquireHeaderLen + MaxNameLen
	// MaxErrorLen is the largest ERROR frame.
	MaxErrorLen = 1 + 1 + 1 + MaxReasonLen
)
