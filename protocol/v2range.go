package protocol

import (
	"encoding/binary"
	"fmt"
)

// Range-lock frames of version 2 (docs/protocol-v2-ranges.md, "v2 range locks"):
// POSIX fcntl byte-range locks and flock locks on a session. One client
// frame, RANGE, carries every operation; one server frame, ANSWER,
// carries every answer and the push that grants a waiting request.
const (
	TypeRange       Type = 0x25
	TypeRangeAnswer Type = 0x3b
)

// RangeOp is the operation of a RANGE frame.
type RangeOp uint8

// The range operations.
const (
	// RangeSet is F_SETLK, F_SETLKW or flock(LOCK_SH/LOCK_EX): a lock of
	// LockType over Start..End for Owner, waiting when RangeWait is set.
	RangeSet RangeOp = 0x01
	// RangeUnlock is F_UNLCK over Start..End (flock: LOCK_UN).
	RangeUnlock RangeOp = 0x02
	// RangeQuery is F_GETLK: the first lock that would conflict with a
	// lock of LockType over Start..End for Owner.
	RangeQuery RangeOp = 0x03
	// RangeRelease drops every lock and waiting request of Owner on Key
	// in the namespace: what closing a file does.
	RangeRelease RangeOp = 0x04
	// RangeCancel withdraws the session's waiting request whose req is
	// this frame's.
	RangeCancel RangeOp = 0x05
	// RangeAdopt is hop-only (docs/protocol-v2-ring.md, "v2 hop-only
	// frames"): sent by a relaying node on its upstream session
	// to a key's new owner, it takes over the range locks on Key that a
	// planned change handed over for the session the upstream relays.
	// Answers: RangeDone (adopted), RangeUnavailable (the node does not
	// serve the key yet: ask again), RangeFree (nothing is kept for the
	// session there: the locks are lost).
	RangeAdopt RangeOp = 0x06
	// RangeReassert is hop-only: sent by a relaying node on its upstream
	// session to a key's new owner after the key's owner was lost, it
	// installs one range lock the lost owner held for the session (Key,
	// Flags' RangeFlock, Owner, LockType, Start, End). Answers:
	// RangeDone (held), RangeConflict (another session holds a
	// conflicting lock there: the lock is lost), RangeUnavailable (the
	// node does not serve the key, or not yet: ask again).
	RangeReassert RangeOp = 0x07
	// RangeResume is a resumable session's re-assertion of one range
	// lock it held on an earlier session of its own (docs/protocol-v2-resume.md,
	// "v2 resumable sessions and re-assertion"): the lock fields as a set
	// has them, then the earlier session's id, secret and node, as a
	// CLAIM re-assertion names them (Frame.Session, Secret, Node). It
	// goes to the key's owner like any RANGE. Answers: RangeDone (held
	// now by the session that sent it), RangeConflict (another session
	// holds a conflicting lock there: the lock is lost, or is held by
	// another earlier session of the client's, which it names next),
	// RangeUnavailable (not served now: ask again), RangeInvalid.
	RangeResume RangeOp = 0x08
)

func (o RangeOp) String() string {
	switch o {
	case RangeSet:
		return "set"
	case RangeUnlock:
		return "unlock"
	case RangeQuery:
		return "query"
	case RangeRelease:
		return "release"
	case RangeCancel:
		return "cancel"
	case RangeAdopt:
		return "adopt"
	case RangeReassert:
		return "reassert"
	case RangeResume:
		return "resume"
	}
	return fmt.Sprintf("op(0x%02x)", uint8(o))
}

// RANGE flags.
const (
	// RangeWait asks a set to wait in the queue (F_SETLKW, flock without
	// LOCK_NB) instead of answering CONFLICT.
	RangeWait uint8 = 0x01
	// RangeFlock puts the request in the flock namespace; without it the
	// request is in the fcntl (POSIX) namespace.
	RangeFlock uint8 = 0x02
	// rangeReservedFlags must be zero in this revision.
	rangeReservedFlags uint8 = ^(RangeWait | RangeFlock)
)

// Lock types of RANGE and ANSWER: F_RDLCK and F_WRLCK (LOCK_SH and
// LOCK_EX).
const (
	LockRead  uint8 = 0x01
	LockWrite uint8 = 0x02
)

// RangeStatus is what an ANSWER says about the request req.
type RangeStatus uint8

// The range statuses. Every RANGE is answered by exactly one final
// status (a set that waits: QUEUED first, then PROMOTED or CANCELLED),
// except a cancel that finds no waiting request, which has no answer.
const (
	RangeGranted   RangeStatus = 0x01 // set: held now, with token
	RangeQueued    RangeStatus = 0x02 // set with RangeWait: waiting
	RangeConflict  RangeStatus = 0x03 // set without RangeWait: the lock fields name the conflict (EAGAIN)
	RangePromoted  RangeStatus = 0x04 // push: a queued set is held now, with token
	RangeDone      RangeStatus = 0x05 // unlock, release: done
	RangeFree      RangeStatus = 0x06 // query: nothing conflicts (F_UNLCK)
	RangeLocked    RangeStatus = 0x07 // query: the lock fields name the first conflict
	RangeDeadlock  RangeStatus = 0x08 // set with RangeWait: waiting would close a wait-for cycle (EDEADLK)
	RangeCancelled RangeStatus = 0x09 // a queued set ended without a grant (cancel, release)
	RangeInvalid   RangeStatus = 0x0a // bad op, type, range or empty key (EINVAL)
	RangeReqInUse  RangeStatus = 0x0b // set with RangeWait: req names a waiting request already
	// RangeUnavailable: not served now: a cluster node cannot serve
	// the key's range locks (a take-over's warm-up, a key a planned
	// change moved with range locks on it, an owner out of reach); nothing
	// changed, ask again (ENOLCK).
	RangeUnavailable RangeStatus = 0x0c
	// RangeMoved is a hop-only push on an upstream session: with req 0,
	// the range locks of the session on the key in the label were handed
	// over to the key's new owner, where the relaying node adopts them
	// (RangeAdopt); with the req of a waiting set (and its key as the
	// label), that set ended unserved because its key moved, which the
	// relaying node passes on to its client as RangeUnavailable.
	RangeMoved RangeStatus = 0x0d
	// RangeLimit: set: the session or the owner has as many waiting
	// requests, or the session as many lock owners, as the server allows
	// (docs/capacity.md); nothing changed (ENOLCK). Not retried by
	// itself: it lasts until the session's own requests end.
	RangeLimit RangeStatus = 0x0e
	// RangeDenied: set, query, unlock, release: the access-control list
	// refuses the session's identity the key, as it would a CLAIM on a
	// lock of that name; nothing changed (EACCES).
	RangeDenied RangeStatus = 0x0f
)

func (s RangeStatus) String() string {
	names := [...]string{"", "granted", "queued", "conflict", "promoted", "done", "free", "locked",
		"deadlock", "cancelled", "invalid", "req-in-use", "unavailable", "moved", "limit", "denied"}
	if int(s) < len(names) && s != 0 {
		return names[s]
	}
	return fmt.Sprintf("status(0x%02x)", uint8(s))
}

// Payload sizes of the range frames, type byte and strings excluded.
const (
	rangeFixedLen  = 4 + 1 + 1 + 1 + 8 + 8 + 8 + 1     // req, op, flags, type, owner, start, end, key_len
	answerFixedLen = 4 + 1 + 8 + 1 + 8 + 8 + 8 + 8 + 1 // req, status, token, type, owner, session, start, end, label_len
	// resumeTailFixed follows a RangeResume's key: session, secret,
	// node_len.
	resumeTailFixed = 8 + SecretLen + 1
)

// MaxRangeResumeText is the most bytes a RangeResume's key and node may
// take together: the frame fits the 512-byte frame.
const MaxRangeResumeText = MaxFrameLen - 1 - rangeFixedLen - resumeTailFixed

// MaxRangeEnd is the largest end offset of a range: the largest signed
// 64-bit offset (Linux's OFFSET_MAX), which stands for "to the end of the
// file".
const MaxRangeEnd uint64 = 1<<63 - 1

// AppendRange appends a RANGE frame. The request id is f.Claim, the key
// f.Name; Op, Flags, LockType, Owner, Start and End as named.
func AppendRange(b []byte, f Frame) []byte {
	f.Type = TypeRange
	return AppendFrame(b, f)
}

// AppendRangeAnswer appends an ANSWER frame for request req. For
// RangeConflict and RangeLocked, l is the conflicting lock: f.LockType,
// f.Owner, f.Session (its owner's session), f.Start, f.End and f.Label
// (its session's label); token is for RangeGranted and RangePromoted.
func AppendRangeAnswer(b []byte, req uint32, st RangeStatus, token uint64, l Frame) []byte {
	return AppendFrame(b, Frame{Type: TypeRangeAnswer, Claim: req, Status: st, Token: token,
		LockType: l.LockType, Owner: l.Owner, Session: l.Session, Start: l.Start, End: l.End, Label: l.Label})
}

func appendRangeFields(b []byte, f Frame) []byte {
	be := binary.BigEndian
	b = be.AppendUint32(b, f.Claim)
	if f.Type == TypeRange {
		b = append(b, byte(f.Op), f.Flags, f.LockType)
		b = be.AppendUint64(b, f.Owner)
		b = be.AppendUint64(b, f.Start)
		b = be.AppendUint64(b, f.End)
		b = appendString8(b, f.Name)
		if f.Op == RangeResume {
			b = be.AppendUint64(b, f.Session)
			b = append(b, f.Secret[:]...)
			b = appendString8(b, f.Node)
		}
		return b
	}
	b = append(b, byte(f.Status))
	b = be.AppendUint64(b, f.Token)
	b = append(b, f.LockType)
	b = be.AppendUint64(b, f.Owner)
	b = be.AppendUint64(b, f.Session)
	b = be.AppendUint64(b, f.Start)
	b = be.AppendUint64(b, f.End)
	return appendString8(b, f.Label)
}

// decodeRange decodes the payload p of a RANGE or ANSWER frame. Only
// the layout is judged here; the meaning (op, type, range, key) is the
// server's, answered with RangeInvalid, and reserved flags are refused
// with ErrUnsupportedFeature at session level.
func decodeRange(f Frame, p []byte) (Frame, error) {
	be := binary.BigEndian
	fixed, strAt := rangeFixedLen, rangeFixedLen-1
	if f.Type == TypeRangeAnswer {
		fixed, strAt = answerFixedLen, answerFixedLen-1
	}
	if len(p) < fixed {
		return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), fixed)
	}
	want := fixed + int(p[strAt])
	if f.Type == TypeRange && RangeOp(p[4]) == RangeResume {
		// The earlier session: id, secret, node.
		if len(p) < want+resumeTailFixed {
			return f, malformed(f.Type, "payload of %d bytes, at least %d", len(p), want+resumeTailFixed)
		}
		tail := p[want:]
		f.Session = be.Uint64(tail)
		copy(f.Secret[:], tail[8:])
		n := int(tail[8+SecretLen])
		f.Node = string(tail[resumeTailFixed:min(len(tail), resumeTailFixed+n)])
		want += resumeTailFixed + n
	}
	if err := payloadLen(f.Type, p, want); err != nil {
		return f, err
	}
	f.Claim = be.Uint32(p)
	if f.Type == TypeRange {
		f.Op = RangeOp(p[4])
		f.Flags = p[5]
		f.LockType = p[6]
		f.Owner = be.Uint64(p[7:])
		f.Start = be.Uint64(p[15:])
		f.End = be.Uint64(p[23:])
		f.Name = string(p[fixed : fixed+int(p[strAt])])
		if f.Flags&rangeReservedFlags != 0 {
			return f, fmt.Errorf("%w: RANGE flags 0x%02x", ErrUnsupportedFeature, f.Flags)
		}
		return f, nil
	}
	f.Status = RangeStatus(p[4])
	f.Token = be.Uint64(p[5:])
	f.LockType = p[13]
	f.Owner = be.Uint64(p[14:])
	f.Session = be.Uint64(p[22:])
	f.Start = be.Uint64(p[30:])
	f.End = be.Uint64(p[38:])
	f.Label = string(p[fixed:])
	return f, nil
}

func rangeString(f Frame) string {
	if f.Type == TypeRange {
		if f.Op == RangeResume {
			return fmt.Sprintf("RANGE(%d %v flags=0x%02x type=%d owner=%d [%d,%d] %q of session %d on %q)",
				f.Claim, f.Op, f.Flags, f.LockType, f.Owner, f.Start, f.End, f.Name, f.Session, f.Node)
		}
		return fmt.Sprintf("RANGE(%d %v flags=0x%02x type=%d owner=%d [%d,%d] %q)",
			f.Claim, f.Op, f.Flags, f.LockType, f.Owner, f.Start, f.End, f.Name)
	}
	return fmt.Sprintf("ANSWER(%d %v token=%d type=%d owner=%d session=%d [%d,%d] %q)",
		f.Claim, f.Status, f.Token, f.LockType, f.Owner, f.Session, f.Start, f.End, f.Label)
}
