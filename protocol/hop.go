package protocol

import (
	"encoding/binary"
	"errors"
	"io"
)

// Hop headers: a cluster node that relays a client's connection to the
// name's owner sends one before the client's opening. It starts with
// HopMarker (0x7e, which no frame type starts with) and a version, then
// the client's address and TLS identity; versions 2 and 3 add the relaying
// node's id and the client session's id, and version 3 a flags byte and,
// for a resumable session, the SHA-256 of its secret, so the owner keeps
// its claims when the hop breaks. The byte layout:
// docs/design/2026-12-07-cluster-relay.md#protocolhopgo.

// HopMarker is the first byte of a hop header. On a version 1 hop it is
// also the relaying node's "the client hung up" and the owner's answer to
// it (docs/cluster.md).
const HopMarker = 0x7e

// Hop header versions.
const (
	HopVersion1 = 1 // the client's address and TLS identity
	HopVersion2 = 2 // version 1's fields, the relaying node's id and the client session's id there
	HopVersion3 = 3 // version 2's fields, flags and the hash of a resumable session's secret
)

// HopResumable is the version 3 flag of a resumable client session.
const HopResumable = 0x01

// SecretHashLen is the size of the hash of a session secret (SHA-256)
// that a version 3 hop header carries.
const SecretHashLen = 32

// Longest fields of a hop header; the encoders cut longer ones.
const (
	MaxHopAddrLen     = 255
	MaxHopIdentityLen = 65535
	MaxHopOriginLen   = 255
)

// hopFollows is the least that follows a valid hop header: the version 2
// preamble (a version 1 ACQUIRE is longer).
const hopFollows = PreambleLen

// ErrBadHop is returned for a hop header of an unknown version or with
// unknown flags.
var ErrBadHop = errors.New("baton: malformed hop header")

// Hop is what a hop header carries.
type Hop struct {
	Version  byte
	Addr     string // the client's address, as the relaying node saw it
	Identity string // the client's TLS identity; empty without one
	// Origin and Session (version 2 and 3): the relaying node's id and
	// the client session's id there.
	Origin  string
	Session uint64
	// Resume (version 3): the hash of the client session's secret when
	// the session is resumable; nil without HopResumable.
	Resume *[SecretHashLen]byte
}

// AppendHop appends a version 1 hop header carrying the client's address
// and TLS identity to b. Longer fields than MaxHopAddrLen and
// MaxHopIdentityLen are cut.
func AppendHop(b []byte, addr, identity string) []byte {
	addr = addr[:min(len(addr), MaxHopAddrLen)]
	identity = identity[:min(len(identity), MaxHopIdentityLen)]
	b = append(b, HopMarker, HopVersion1, byte(len(addr)))
	b = append(b, addr...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(identity)))
	return append(b, identity...)
}

// AppendHopV2 appends a version 2 hop header to b: the client's address
// and TLS identity (as AppendHop), then the relaying node's id origin and
// the client session's id there. An origin longer than MaxHopOriginLen is
// cut.
func AppendHopV2(b []byte, addr, identity, origin string, session uint64) []byte {
	start := len(b)
	b = AppendHop(b, addr, identity)
	b[start+1] = HopVersion2
	origin = origin[:min(len(origin), MaxHopOriginLen)]
	b = append(b, byte(len(origin)))
	b = append(b, origin...)
	return binary.BigEndian.AppendUint64(b, session)
}

// AppendHopV3 appends a version 3 hop header to b: AppendHopV2's fields,
// then the flags, HopResumable with the secret hash resume, or none when
// resume is nil.
func AppendHopV3(b []byte, addr, identity, origin string, session uint64, resume *[SecretHashLen]byte) []byte {
	start := len(b)
	b = AppendHopV2(b, addr, identity, origin, session)
	b[start+1] = HopVersion3
	if resume == nil {
		return append(b, 0)
	}
	b = append(b, HopResumable)
	return append(b, resume[:]...)
}

// ReadFullFunc fills p from a stream, as io.ReadFull does. then is how
// many bytes every valid opening still sends after p, so a reader that
// reads ahead may ask for len(p)+then bytes at once without taking any
// that are not the opening's; a reader that does not read ahead ignores
// it.
type ReadFullFunc func(p []byte, then int) error

// ReadHopBody reads a hop header whose HopMarker has been read, then
// len(next) bytes more, the start of what follows the header, into next.
// A relaying node writes the header and what follows in one write, so
// each call of readFull asks for what is known to follow up to the next
// length field (with next after the last field), and for the rest as
// then. It returns readFull's errors as they are, and ErrBadHop for an
// unknown version or unknown flags.
func ReadHopBody(readFull ReadFullFunc, next []byte) (Hop, error) {
	// After every field: at least what follows the header.
	const after = hopFollows
	var h [2]byte
	if err := readFull(h[:], 2+after); err != nil {
		return Hop{}, err
	}
	if h[0] < HopVersion1 || h[0] > HopVersion3 {
		return Hop{}, ErrBadHop
	}
	hop := Hop{Version: h[0]}
	// The address, and the identity's length.
	a := make([]byte, int(h[1])+2)
	if err := readFull(a, after); err != nil {
		return Hop{}, err
	}
	m := int(binary.BigEndian.Uint16(a[len(a)-2:]))
	hop.Addr = string(a[:len(a)-2])
	// The identity, and then next (version 1) or the origin's length.
	tail := len(next)
	if hop.Version >= HopVersion2 {
		tail = 1
	}
	id := make([]byte, m+tail)
	if err := readFull(id, after-tail); err != nil {
		return Hop{}, err
	}
	hop.Identity = string(id[:m])
	if hop.Version == HopVersion1 {
		copy(next, id[m:])
		return hop, nil
	}
	// The origin and the session id, and next (version 2).
	tail = 0
	if hop.Version == HopVersion2 {
		tail = len(next)
	}
	origin := make([]byte, int(id[m])+8+tail)
	if err := readFull(origin, after-tail); err != nil {
		return Hop{}, err
	}
	k := int(id[m])
	hop.Origin, hop.Session = string(origin[:k]), binary.BigEndian.Uint64(origin[k:k+8])
	if hop.Version == HopVersion2 {
		copy(next, origin[k+8:])
		return hop, nil
	}
	if err := readHopResume(readFull, &hop); err != nil {
		return Hop{}, err
	}
	if err := readFull(next, after-len(next)); err != nil {
		return Hop{}, err
	}
	return hop, nil
}

// readHopResume reads the fields that hop header version 3 adds.
func readHopResume(readFull ReadFullFunc, hop *Hop) error {
	var f [1]byte
	if err := readFull(f[:], hopFollows); err != nil {
		return err
	}
	switch f[0] {
	case 0:
		return nil
	case HopResumable:
		var h [SecretHashLen]byte
		if err := readFull(h[:], hopFollows); err != nil {
			return err
		}
		hop.Resume = &h
		return nil
	}
	return ErrBadHop
}

// ParseHop is ReadHopBody on a buffer that starts with the HopMarker: it
// decodes the hop header at the start of b and returns it with the
// number of bytes it occupies. When b does not hold the whole header yet
// it returns n == 0 and a nil error: read more and call again. A first
// byte other than HopMarker, an unknown version or unknown flags are
// refused with ErrBadHop once the bytes that show it are in.
func ParseHop(b []byte) (h Hop, n int, err error) {
	if len(b) == 0 {
		return Hop{}, 0, nil
	}
	if b[0] != HopMarker {
		return Hop{}, 0, ErrBadHop
	}
	rest := b[1:]
	h, err = ReadHopBody(func(p []byte, _ int) error {
		if len(p) > len(rest) {
			return io.ErrUnexpectedEOF
		}
		rest = rest[copy(p, rest):]
		return nil
	}, nil)
	switch {
	case err == io.ErrUnexpectedEOF:
		return Hop{}, 0, nil
	case err != nil:
		return Hop{}, 0, err
	}
	return h, len(b) - len(rest), nil
}

// HopClientGone is the byte a relaying node sends on a version 1 hop
// when the client hung up: the owner ends the claim at once. A hop that
// closes without it (the relaying node died, shut down, or was cut off)
// leaves the claim until the client's lease has passed.
const HopClientGone = HopMarker

// HopAck is the owner's answer to HopClientGone on a version 1 hop: the
// claim has ended, this is the last byte the owner writes for it, and the
// connection now waits for the next hop header as a fresh one would
// (within the owner's io-timeout). A relaying node puts a hop back in its
// pool only after reading it, as the last byte of the owner's stream at a
// frame boundary; an owner of an earlier version closes the hop instead,
// or answers ERROR 0x13, and the relaying node closes it as before.
const HopAck = HopMarker

// HopScan follows the frame boundaries of what an owner sends on a
// version 1 hop (WAITING, ACQUIRED, ERROR), to find HopAck: a byte that
// no frame type starts with, seen where a frame would start. Its zero
// value is at the start of the stream; feed it the stream's bytes in
// order, in chunks of any size.
type HopScan struct {
	rem    int  // bytes of the current frame still to come
	errHdr int  // an ERROR's code and reason length still to come
	lost   bool // a byte no frame starts with: no ack is recognised
}

// Scan follows b and returns the index of HopAck in it, or -1. After a
// byte that starts no frame, it finds none: the stream is not the
// protocol.
func (f *HopScan) Scan(b []byte) int {
	for i := 0; i < len(b) && !f.lost; i++ {
		switch {
		case f.errHdr == 2:
			f.errHdr = 1
		case f.errHdr == 1:
			f.errHdr, f.rem = 0, int(b[i])
		case f.rem > 0:
			k := min(f.rem, len(b)-i)
			f.rem -= k
			i += k - 1
		default:
			switch Type(b[i]) {
			case TypeWaiting:
			case TypeAcquired:
				f.rem = AcquiredLen - 1
			case TypeError:
				f.errHdr = 2
			case HopAck:
				return i
			default:
				f.lost = true
			}
		}
	}
	return -1
}
