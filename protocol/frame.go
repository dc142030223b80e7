package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
	"unicode/utf8"
)

// ErrMalformedFrame reports bytes from a server that do not form a valid
// frame: an unknown frame type. A frame cut short by EOF is reported as
// io.ErrUnexpectedEOF instead, like any stream that ends mid-record.
var ErrMalformedFrame = errors.New("baton: malformed frame")

// Acquire is the first frame of every connection: a claim on one lock.
type Acquire struct {
	Version uint8
	LeaseMS uint32
	Name    string
}

// Lease returns the lease as a duration.
func (a Acquire) Lease() time.Duration { return time.Duration(a.LeaseMS) * time.Millisecond }

// Validate checks the frame in the order docs/protocol.md prescribes and returns
// the sentinel of the first rule broken. The access-control check (0x18) is
// the server's and is not part of it.
func (a Acquire) Validate() error {
	if a.Version != Version {
		return ErrUnsupportedVersion
	}
	if a.LeaseMS == 0 {
		return ErrInvalidLease
	}
	return ValidateName(a.Name)
}

// ValidateName checks a lock name: non-empty, at most MaxNameLen bytes,
// valid UTF-8. Names are case sensitive and never trimmed or normalized.
func ValidateName(name string) error {
	switch {
	case len(name) == 0:
		return ErrEmptyName
	case len(name) > MaxNameLen:
		return ErrNameTooLong
	case !utf8.ValidString(name):
		return ErrInvalidName
	}
	return nil
}

// ValidateLease checks that a lease is positive and fits the wire's u32 of
// milliseconds. The wire carries whole milliseconds, so a lease below 1 ms
// is not positive on the wire.
func ValidateLease(lease time.Duration) error {
	if lease < time.Millisecond || lease/time.Millisecond > math.MaxUint32 {
		return ErrInvalidLease
	}
	return nil
}

// LeaseMS converts a lease that passed ValidateLease to its wire value.
func LeaseMS(lease time.Duration) uint32 { return uint32(lease / time.Millisecond) }

// AppendAcquire appends the ACQUIRE frame to b. It encodes a as given,
// valid or not, so tests can produce every bad input; a name longer than
// 65535 bytes is cut to fit the length field.
func AppendAcquire(b []byte, a Acquire) []byte {
	name := a.Name
	if len(name) > math.MaxUint16 {
		name = name[:math.MaxUint16]
	}
	b = append(b, byte(TypeAcquire), a.Version)
	b = binary.BigEndian.AppendUint32(b, a.LeaseMS)
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	return append(b, name...)
}

// AppendHeartbeat appends a HEARTBEAT frame to b.
func AppendHeartbeat(b []byte) []byte { return append(b, byte(TypeHeartbeat)) }

// AppendWaiting appends a WAITING frame to b.
func AppendWaiting(b []byte) []byte { return append(b, byte(TypeWaiting)) }

// AppendAcquired appends an ACQUIRED frame carrying token to b.
func AppendAcquired(b []byte, token uint64) []byte {
	b = append(b, byte(TypeAcquired))
	return binary.BigEndian.AppendUint64(b, token)
}

// AppendError appends an ERROR frame to b. An empty reason is replaced by
// the code's canonical text; a reason longer than MaxReasonLen bytes is cut
// at a UTF-8 boundary.
func AppendError(b []byte, code Code, reason string) []byte {
	if reason == "" {
		reason = code.Reason()
	}
	reason = truncateUTF8(reason, MaxReasonLen)
	b = append(b, byte(TypeError), byte(code), byte(len(reason)))
	return append(b, reason...)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ReadAcquireBody reads the rest of an ACQUIRE frame whose type byte has
// already been read, checking each field as soon as it arrives in the
// order of docs/protocol.md. On a rule broken it returns the sentinel together
// with the fields read so far and stops reading: a name is read only when
// its declared length is valid, so it never allocates more than MaxNameLen
// bytes. I/O errors are returned as they come (io.ErrUnexpectedEOF for a
// frame cut short).
func ReadAcquireBody(r io.Reader) (Acquire, error) {
	var a Acquire
	var hdr [AcquireHeaderLen - 1]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return a, eofIsUnexpected(err)
	}
	a.Version = hdr[0]
	if a.Version != Version {
		return a, ErrUnsupportedVersion
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return a, eofIsUnexpected(err)
	}
	a.LeaseMS = binary.BigEndian.Uint32(hdr[1:5])
	n := int(binary.BigEndian.Uint16(hdr[5:7]))
	switch {
	case a.LeaseMS == 0:
		return a, ErrInvalidLease
	case n == 0:
		return a, ErrEmptyName
	case n > MaxNameLen:
		return a, ErrNameTooLong
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(r, name); err != nil {
		return a, eofIsUnexpected(err)
	}
	a.Name = string(name)
	if !utf8.Valid(name) {
		return a, ErrInvalidName
	}
	return a, nil
}

// ServerFrame is a decoded server-to-client frame.
type ServerFrame struct {
	Type   Type
	Token  uint64 // ACQUIRED
	Code   Code   // ERROR
	Reason string // ERROR
}

func (f ServerFrame) String() string {
	switch f.Type {
	case TypeAcquired:
		return fmt.Sprintf("ACQUIRED(%d)", f.Token)
	case TypeError:
		return fmt.Sprintf("ERROR(0x%02x %q)", uint8(f.Code), f.Reason)
	}
	return f.Type.String()
}

// ReadServerFrame reads one server-to-client frame. An unknown type byte
// gives ErrMalformedFrame; a frame cut short gives io.ErrUnexpectedEOF and
// a clean EOF before the type byte gives io.EOF.
func ReadServerFrame(r io.Reader) (ServerFrame, error) {
	var f ServerFrame
	var buf [8]byte
	if _, err := io.ReadFull(r, buf[:1]); err != nil {
		return f, err
	}
	f.Type = Type(buf[0])
	switch f.Type {
	case TypeWaiting:
		return f, nil
	case TypeAcquired:
		if _, err := io.ReadFull(r, buf[:8]); err != nil {
			return f, eofIsUnexpected(err)
		}
		f.Token = binary.BigEndian.Uint64(buf[:8])
		return f, nil
	case TypeError:
		if _, err := io.ReadFull(r, buf[:2]); err != nil {
			return f, eofIsUnexpected(err)
		}
		f.Code = Code(buf[0])
		reason := make([]byte, buf[1])
		if _, err := io.ReadFull(r, reason); err != nil {
			return f, eofIsUnexpected(err)
		}
		f.Reason = string(reason)
		return f, nil
	}
	return f, fmt.Errorf("%w: unknown frame type 0x%02x", ErrMalformedFrame, buf[0])
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
