package protocol

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Values and watches (docs/protocol-v2-watches.md, "v2 values and watches"): a claim
// may carry a small value that its holder sets when it claims (CLAIM with
// ClaimValue) and changes while the claim lives (PROCLAIM); any session
// may watch a name (WATCH) and is pushed every change of its holders
// (CHANGE), starting with the current ones. A session asks for both with
// HelloValues; its frames may then be up to MaxValuesFrameLen long.
const (
	TypeProclaim   Type = 0x29 // C→S: claim u32, value_len u16, value
	TypeWatch      Type = 0x2a // C→S: watch u32, name_len u8, name
	TypeProclaimed Type = 0x3f // S→C: claim u32, status u8
	TypeChange     Type = 0x40 // S→C: see AppendChange
)

// MaxValueLen is the longest claim value in bytes.
const MaxValueLen = 1024

// MaxValuesFrameLen is the largest length field of a frame in either
// direction on a session whose WELCOME carries WelcomeValues: a CLAIM
// with the longest name, a re-assertion's fields and the longest value,
// and a CHANGE with the longest value, label and identity, fit. Other
// sessions keep MaxFrameLen.
const MaxValuesFrameLen = 2048

// MaxIdentityLen is the longest holder identity a CHANGE carries; a
// longer certificate identity is cut at a UTF-8 boundary.
const MaxIdentityLen = 255

// HelloValues is the HELLO flag that asks for values and watches; a
// server that knows them answers WELCOME with WelcomeValues.
const HelloValues uint8 = 0x08

// WelcomeValues answers HelloValues: the session may send PROCLAIM,
// WATCH and CLAIM with ClaimValue, and its frames may be up to
// MaxValuesFrameLen long.
const WelcomeValues uint8 = 0x10

// ClaimValue is the CLAIM flag of a claim that carries a value: the
// frame ends with value_len u16 and the value, after the re-assertion's
// fields when there are any (Frame.Value).
const ClaimValue uint8 = 0x08

// ProclaimStatus is PROCLAIMED's answer.
type ProclaimStatus uint8

const (
	// ProclaimSet: the claim is held or queued, and has the new value.
	ProclaimSet ProclaimStatus = 0x00
	// ProclaimNotInUse: the claim id is not in use (it ended, or never
	// began): nothing changed.
	ProclaimNotInUse ProclaimStatus = 0x01
)

// ChangeKind is what a CHANGE reports.
type ChangeKind uint8

const (
	// ChangeHeld: a holder appeared (its token, mode, value, label and
	// identity).
	ChangeHeld ChangeKind = 0x01
	// ChangeValue: the holder with this token has a new value.
	ChangeValue ChangeKind = 0x02
	// ChangeFreed: the holder with this token no longer holds the name.
	ChangeFreed ChangeKind = 0x03
	// ChangeSynced: the holders reported so far are the name's holders
	// now; later changes follow as they happen.
	ChangeSynced ChangeKind = 0x04
	// ChangeReset: forget every holder reported so far; the current ones
	// follow, then ChangeSynced (a cluster watch that moved to the name's
	// new owner).
	ChangeReset ChangeKind = 0x05
)

func (k ChangeKind) String() string {
	switch k {
	case ChangeHeld:
		return "held"
	case ChangeValue:
		return "value"
	case ChangeFreed:
		return "freed"
	case ChangeSynced:
		return "synced"
	case ChangeReset:
		return "reset"
	}
	return "unknown"
}

// Payload sizes of the watch frames, type byte excluded.
const (
	proclaimFixedLen   = 4 + 2             // claim, value_len
	watchFixedLen      = 4 + 1             // watch, name_len
	proclaimedLen      = 4 + 1             // claim, status
	changeFixedLen     = 4 + 1 + 1 + 8 + 2 // watch, kind, mode, token, value_len
	changeStringsFixed = 1 + 1             // label_len, identity_len
	claimValueFixedLen = 2                 // value_len
	maxChangeLen       = 1 + changeFixedLen + MaxValueLen + changeStringsFixed + 255 + MaxIdentityLen
	maxValueClaimLen   = 1 + claimFixedLen + 255 + reassertFixedLen + 255 + claimValueFixedLen + MaxValueLen
)

// Both largest frames fit the values frame limit.
var _ = [1]struct{}{}[max(maxChangeLen, maxValueClaimLen)/(MaxValuesFrameLen+1)]

// HasValue reports whether a CLAIM carries a value.
func (f Frame) HasValue() bool { return f.Flags&ClaimValue != 0 }

// Values reports whether a HELLO asks for values and watches.
func (f Frame) Values() bool { return f.Flags&HelloValues != 0 }

// AppendClaimValue appends a CLAIM frame that carries value; flags gets
// ClaimValue added.
func AppendClaimValue(b []byte, claim uint32, mode Mode, limit uint32, flags uint8, name, value string) []byte {
	return AppendFrame(b, Frame{Type: TypeClaim, Claim: claim, Flags: flags | ClaimValue, Mode: mode, Limit: limit, Name: name, Value: value})
}

// AppendProclaim appends a PROCLAIM frame: claim's new value.
func AppendProclaim(b []byte, claim uint32, value string) []byte {
	return AppendFrame(b, Frame{Type: TypeProclaim, Claim: claim, Value: value})
}

// AppendWatch appends a WATCH frame: watch the name's holders, with id
// watch from the session's claim ids.
func AppendWatch(b []byte, watch uint32, name string) []byte {
	return AppendFrame(b, Frame{Type: TypeWatch, Claim: watch, Name: name})
}

// AppendProclaimed appends a PROCLAIMED frame, the answer to PROCLAIM.
func AppendProclaimed(b []byte, claim uint32, status ProclaimStatus) []byte {
	return AppendFrame(b, Frame{Type: TypeProclaimed, Claim: claim, Proclaim: status})
}

// Change is one CHANGE frame's report.
type Change struct {
	Kind     ChangeKind
	Mode     Mode // ChangeHeld
	Token    uint64
	Value    string // ChangeHeld, ChangeValue
	Label    string // ChangeHeld: the holder's session label
	Identity string // ChangeHeld: the holder's certificate identity
}

// AppendChange appends a CHANGE frame of watch. The label and identity
// are cut at a UTF-8 boundary to 255 bytes; the value is written whole
// (the server never holds one over MaxValueLen).
func AppendChange(b []byte, watch uint32, c Change) []byte {
	return AppendFrame(b, Frame{Type: TypeChange, Claim: watch, Change: c.Kind, Mode: c.Mode,
		Token: c.Token, Value: c.Value, Label: c.Label, Identity: c.Identity})
}

// ChangeOf returns a decoded CHANGE frame's report.
func (f Frame) ChangeOf() Change {
	return Change{Kind: f.Change, Mode: f.Mode, Token: f.Token, Value: f.Value, Label: f.Label, Identity: f.Identity}
}

func appendValue(b []byte, v string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// appendWatchFields appends the payload of PROCLAIM, WATCH, PROCLAIMED
// and CHANGE.
func appendWatchFields(b []byte, f Frame) []byte {
	be := binary.BigEndian
	b = be.AppendUint32(b, f.Claim)
	switch f.Type {
	case TypeProclaim:
		b = appendValue(b, f.Value)
	case TypeWatch:
		b = appendString8(b, f.Name)
	case TypeProclaimed:
		b = append(b, byte(f.Proclaim))
	case TypeChange:
		b = append(b, byte(f.Change), byte(f.Mode))
		b = be.AppendUint64(b, f.Token)
		b = appendValue(b, f.Value)
		b = appendString8(b, f.Label)
		b = appendString8(b, f.Identity)
	}
	return b
}

// decodeWatch decodes the payload of PROCLAIM, WATCH, PROCLAIMED and
// CHANGE. A WATCH with a bad name and a PROCLAIM with a value over
// MaxValueLen are claim-level faults (*ClaimError): the server answers
// REFUSED or PROCLAIMED and reads on.
func decodeWatch(f Frame, p []byte) (Frame, error) {
	be := binary.BigEndian
	fixed := map[Type]int{TypeProclaim: proclaimFixedLen, TypeWatch: watchFixedLen, TypeProclaimed: proclaimedLen, TypeChange: changeFixedLen + changeStringsFixed}[f.Type]
	if len(p) < fixed {
		return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), fixed)
	}
	f.Claim = be.Uint32(p)
	switch f.Type {
	case TypeProclaim:
		if err := payloadLen(f.Type, p, proclaimFixedLen+int(be.Uint16(p[4:]))); err != nil {
			return f, err
		}
		f.Value = string(p[proclaimFixedLen:])
		if len(f.Value) > MaxValueLen {
			return f, &ClaimError{f.Claim, ErrValueTooLong}
		}
	case TypeWatch:
		if err := payloadLen(f.Type, p, watchFixedLen+int(p[4])); err != nil {
			return f, err
		}
		f.Name = string(p[watchFixedLen:])
		switch {
		case f.Name == "":
			return f, &ClaimError{f.Claim, ErrEmptyName}
		case !utf8.ValidString(f.Name):
			return f, &ClaimError{f.Claim, ErrInvalidName}
		}
	case TypeProclaimed:
		if err := payloadLen(f.Type, p, proclaimedLen); err != nil {
			return f, err
		}
		f.Proclaim = ProclaimStatus(p[4])
		if f.Proclaim > ProclaimNotInUse {
			return f, malformed(f.Type, "status 0x%02x", p[4])
		}
	case TypeChange:
		return decodeChange(f, p)
	}
	return f, nil
}

func decodeChange(f Frame, p []byte) (Frame, error) {
	be := binary.BigEndian
	f.Change = ChangeKind(p[4])
	f.Mode = Mode(p[5])
	f.Token = be.Uint64(p[6:])
	if f.Change < ChangeHeld || f.Change > ChangeReset {
		return f, malformed(f.Type, "kind 0x%02x", p[4])
	}
	r := p[changeFixedLen-2:]
	vlen := int(be.Uint16(r))
	if vlen > MaxValueLen {
		return f, malformed(f.Type, "value of %d bytes, at most %d", vlen, MaxValueLen)
	}
	if len(r) < 2+vlen+1 {
		return f, malformed(f.Type, "payload of %d bytes, cut short in the value", len(p))
	}
	f.Value = string(r[2 : 2+vlen])
	r = r[2+vlen:]
	llen := int(r[0])
	if len(r) < 1+llen+1 {
		return f, malformed(f.Type, "payload of %d bytes, cut short in the label", len(p))
	}
	f.Label = string(r[1 : 1+llen])
	r = r[1+llen:]
	if err := payloadLen(f.Type, r, 1+int(r[0])); err != nil {
		return f, malformed(f.Type, "identity field of %d bytes, want %d", len(r), 1+int(r[0]))
	}
	f.Identity = string(r[1:])
	return f, nil
}

// decodeClaimValue decodes the value at the end of a CLAIM with
// ClaimValue: tail is what follows the name (and the re-assertion's
// fields).
func decodeClaimValue(f Frame, tail []byte) (Frame, error) {
	if len(tail) < claimValueFixedLen {
		return f, malformed(f.Type, "value field of %d bytes, at least %d", len(tail), claimValueFixedLen)
	}
	n := int(binary.BigEndian.Uint16(tail))
	if len(tail) != claimValueFixedLen+n {
		return f, malformed(f.Type, "value field of %d bytes, want %d", len(tail), claimValueFixedLen+n)
	}
	f.Value = string(tail[claimValueFixedLen:])
	return f, nil
}

func watchString(f Frame) string {
	switch f.Type {
	case TypeProclaim:
		return fmt.Sprintf("PROCLAIM(%d value=%q)", f.Claim, f.Value)
	case TypeWatch:
		return fmt.Sprintf("WATCH(%d %q)", f.Claim, f.Name)
	case TypeProclaimed:
		return fmt.Sprintf("PROCLAIMED(%d status=%d)", f.Claim, f.Proclaim)
	}
	return fmt.Sprintf("CHANGE(%d %v %v token=%d value=%q label=%q identity=%q)", f.Claim, f.Change, f.Mode, f.Token, f.Value, f.Label, f.Identity)
}
