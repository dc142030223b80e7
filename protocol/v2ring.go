package protocol

import (
	"encoding/binary"
	"fmt"
)

// Ring frames of version 2 (docs/protocol-v2-ring.md, "v2 ring"): a session asks
// the node it is connected to for the cluster's ring (its members, their
// lock protocol addresses, and which of them own names), so that a client
// can send each claim to its name's owner. One request, RING, is answered
// by one MEMBER frame per member and a closing RINGEND; with the watch
// flag the node also pushes the ring again (MEMBER frames and a RINGEND
// marked pushed) whenever it applies a new one.
//
// The frames reuse Frame's fields, as the range frames do: RING and
// MEMBER use Flags; MEMBER carries the node id in Name and its address in
// Label; RINGEND carries the ring version in Seq and the number of MEMBER
// frames before it in Claim. MemberID, MemberAddr, RingVersion and
// RingCount name them.
const (
	TypeRing       Type = 0x26 // C→S: flags u8
	TypeRingMember Type = 0x3c // S→C: flags u8, id_len u8, id, addr_len u8, addr
	TypeRingEnd    Type = 0x3d // S→C: version u64, count u16, flags u8
)

// RING flags.
const (
	// RingWatch asks the node to push the ring again, for the rest of the
	// session, whenever it applies a new one.
	RingWatch uint8 = 0x01
	// ringReservedFlags must be zero in this revision.
	ringReservedFlags uint8 = ^RingWatch
)

// MEMBER flags.
const (
	// MemberInRing says the member is in the ring: it owns names (it is
	// serving, or leaving and has not handed its names over yet). The
	// owner of a name is computed over the members that have it.
	MemberInRing        uint8 = 0x01
	memberReservedFlags uint8 = ^MemberInRing
)

// RINGEND flags.
const (
	// RingPushed marks a RINGEND (and the MEMBER frames before it) that a
	// watching session receives unprompted, not as the answer to a RING.
	RingPushed           uint8 = 0x01
	ringEndReservedFlags uint8 = ^RingPushed
)

// Payload sizes of the ring frames, type byte and strings excluded.
const (
	ringLen          = 1         // flags
	memberFixedLen   = 1 + 1 + 1 // flags, id_len, addr_len
	ringEndLen       = 8 + 2 + 1 // version, count, flags
	maxMemberStrings = MaxFrameLen - 1 - memberFixedLen
)

// MemberID is a MEMBER frame's node id.
func (f Frame) MemberID() string { return f.Name }

// MemberAddr is a MEMBER frame's lock protocol address (host:port), empty
// when the node has none to give.
func (f Frame) MemberAddr() string { return f.Label }

// RingVersion is a RINGEND frame's ring version: 0 from a server that is
// not a cluster node.
func (f Frame) RingVersion() uint64 { return f.Seq }

// RingCount is the number of MEMBER frames a RINGEND closes.
func (f Frame) RingCount() int { return int(f.Claim) }

// AppendRing appends a RING request with flags (RingWatch or 0).
func AppendRing(b []byte, flags uint8) []byte {
	return AppendFrame(b, Frame{Type: TypeRing, Flags: flags})
}

// AppendRingMember appends a MEMBER frame. The id and address are cut to
// 255 bytes each; when both would not fit in one frame (more than 508
// bytes together) the address is left out: a client cannot dial the
// member and sends its claims through another node, which relays them.
func AppendRingMember(b []byte, id, addr string, inRing bool) []byte {
	var flags uint8
	if inRing {
		flags = MemberInRing
	}
	id = truncateUTF8(id, 255)
	if len(id)+len(truncateUTF8(addr, 255)) > maxMemberStrings {
		addr = ""
	}
	return AppendFrame(b, Frame{Type: TypeRingMember, Flags: flags, Name: id, Label: addr})
}

// AppendRingEnd appends the RINGEND that closes count MEMBER frames of
// ring version (flags: RingPushed or 0).
func AppendRingEnd(b []byte, version uint64, count int, flags uint8) []byte {
	return AppendFrame(b, Frame{Type: TypeRingEnd, Seq: version, Claim: uint32(min(count, 1<<16-1)), Flags: flags})
}

func appendRingFields(b []byte, f Frame) []byte {
	switch f.Type {
	case TypeRing:
		return append(b, f.Flags)
	case TypeRingMember:
		b = append(b, f.Flags)
		b = appendString8(b, f.Name)
		return appendString8(b, f.Label)
	}
	b = binary.BigEndian.AppendUint64(b, f.Seq)
	b = binary.BigEndian.AppendUint16(b, uint16(f.Claim))
	return append(b, f.Flags)
}

// decodeRing decodes the payload p of a ring frame f (its Type set).
func decodeRing(f Frame, p []byte) (Frame, error) {
	switch f.Type {
	case TypeRing:
		if err := payloadLen(f.Type, p, ringLen); err != nil {
			return f, err
		}
		f.Flags = p[0]
		if f.Flags&ringReservedFlags != 0 {
			return f, fmt.Errorf("%w: RING flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
	case TypeRingMember:
		if len(p) < memberFixedLen {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), memberFixedLen)
		}
		f.Flags = p[0]
		if f.Flags&memberReservedFlags != 0 {
			return f, fmt.Errorf("%w: MEMBER flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
		idEnd := 2 + int(p[1])
		if idEnd >= len(p) {
			return f, malformed(f.Type, "id of %d bytes in a payload of %d", p[1], len(p))
		}
		if err := payloadLen(f.Type, p, idEnd+1+int(p[idEnd])); err != nil {
			return f, err
		}
		if idEnd == 2 {
			return f, malformed(f.Type, "empty node id")
		}
		f.Name = string(p[2:idEnd])
		f.Label = string(p[idEnd+1:])
	case TypeRingEnd:
		if err := payloadLen(f.Type, p, ringEndLen); err != nil {
			return f, err
		}
		f.Seq = binary.BigEndian.Uint64(p)
		f.Claim = uint32(binary.BigEndian.Uint16(p[8:]))
		f.Flags = p[10]
		if f.Flags&ringEndReservedFlags != 0 {
			return f, fmt.Errorf("%w: RINGEND flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
	}
	return f, nil
}

func ringString(f Frame) string {
	switch f.Type {
	case TypeRing:
		return fmt.Sprintf("RING(flags=0x%02x)", f.Flags)
	case TypeRingMember:
		return fmt.Sprintf("MEMBER(%q %q flags=0x%02x)", f.Name, f.Label, f.Flags)
	}
	return fmt.Sprintf("RINGEND(version=%d count=%d flags=0x%02x)", f.Seq, f.Claim, f.Flags)
}
