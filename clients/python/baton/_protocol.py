"""Wire codecs of baton's protocol version 2 (docs/protocol.md).

Only what the client sends and reads; every decoder checks the payload's
size exactly, as the protocol requires, and raises ProtocolViolation.
"""

from __future__ import annotations

import struct
from typing import List, NamedTuple, Optional, Tuple

from .errors import ProtocolViolation

PREAMBLE = b"\x01\x02\x00\x00\x00\x00\x00\x00"
MAX_FRAME_LEN = 512
MAX_VALUES_FRAME_LEN = 2048  # on a session whose WELCOME has WELCOME_VALUES
MAX_NAME = 255
MAX_VALUE = 1024  # the longest claim value, in bytes

# Client frames.
T_HELLO = 0x21
T_PING = 0x22
T_CLAIM = 0x23
T_RELEASE = 0x24
T_RING = 0x26
T_PROCLAIM = 0x29
T_WATCH = 0x2A
# Server frames.
T_WELCOME = 0x31
T_PONG = 0x32
T_GRANTED = 0x33
T_QUEUED = 0x34
T_BUSY = 0x35
T_PROMOTED = 0x36
T_RELEASED = 0x37
T_REFUSED = 0x38
T_REVOKED = 0x39
T_ERROR = 0x3A
T_MEMBER = 0x3C
T_RINGEND = 0x3D
T_PROCLAIMED = 0x3F
T_CHANGE = 0x40
V1_ERROR = 0x13

HELLO_RESUMABLE = 0x01
HELLO_VALUES = 0x08
WELCOME_RESUMABLE = 0x01
WELCOME_RING = 0x02
WELCOME_VALUES = 0x10
CLAIM_NO_WAIT = 0x01
CLAIM_REASSERT = 0x02
CLAIM_VALUE = 0x08

# CHANGE kinds.
CHANGE_HELD = 1
CHANGE_VALUE = 2
CHANGE_FREED = 3
CHANGE_SYNCED = 4
CHANGE_RESET = 5
RING_WATCH = 0x01
MEMBER_IN_RING = 0x01
RINGEND_PUSHED = 0x01

MODE_EXCLUSIVE = 0x01
MODE_SHARED = 0x02
MODE_SEMAPHORE = 0x03

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_CLAIM_U64 = struct.Struct(">IQ")


def check_name(name: str) -> bytes:
    """Encode a lock name, refusing what the server would refuse."""
    if not isinstance(name, str):
        raise TypeError("lock name must be str")
    b = name.encode("utf-8")  # a str with lone surrogates raises here
    if not b:
        raise ValueError("lock name is empty")
    if len(b) > MAX_NAME:
        raise ValueError("lock name is longer than 255 bytes")
    return b


def check_value(value: "bytes | str") -> bytes:
    """Encode a claim value (bytes, or str as UTF-8), refusing one over
    MAX_VALUE bytes as the server would (REFUSED 0x24)."""
    if isinstance(value, str):
        b = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    else:
        raise TypeError("a claim value must be bytes or str")
    if len(b) > MAX_VALUE:
        raise ValueError("claim value is %d bytes, longer than %d" % (len(b), MAX_VALUE))
    return b


def lease_ms(lease: float) -> int:
    """A lease in seconds as the u32 of milliseconds HELLO carries."""
    ms = int(round(lease * 1000))
    if ms < 1 or ms > 0xFFFFFFFF:
        raise ValueError("lease must be between 1 ms and 2^32-1 ms")
    return ms


def _frame(t: int, payload: bytes) -> bytes:
    return struct.pack(">HB", len(payload) + 1, t) + payload


def hello(lease: float, label: str, flags: int) -> bytes:
    lb = label.encode("utf-8")
    if len(lb) > 255:
        raise ValueError("label is longer than 255 bytes")
    return _frame(T_HELLO, struct.pack(">IBB", lease_ms(lease), flags, len(lb)) + lb)


def ping(seq: int) -> bytes:
    return _frame(T_PING, _U64.pack(seq))


def ring(watch: bool) -> bytes:
    return _frame(T_RING, bytes([RING_WATCH if watch else 0]))


def release(claim: int) -> bytes:
    return _frame(T_RELEASE, _U32.pack(claim))


def _value_field(value: bytes) -> bytes:
    return struct.pack(">H", len(value)) + value


def claim(cid: int, flags: int, mode: int, limit: int, name: bytes, value: Optional[bytes] = None) -> bytes:
    """A CLAIM; with a value (even empty) it sets CLAIM_VALUE and carries it."""
    if value is not None:
        flags |= CLAIM_VALUE
    p = struct.pack(">IBBIB", cid, flags, mode, limit, len(name)) + name
    if value is not None:
        p += _value_field(value)
    return _frame(T_CLAIM, p)


def reassert(cid: int, mode: int, limit: int, name: bytes, token: int, ring_version: int,
             session: int, secret: bytes, node: bytes, value: Optional[bytes] = None) -> bytes:
    flags = CLAIM_REASSERT | (CLAIM_VALUE if value is not None else 0)
    p = struct.pack(">IBBIB", cid, flags, mode, limit, len(name)) + name
    p += struct.pack(">QQQ", token, ring_version, session) + secret + bytes([len(node)]) + node
    if value is not None:
        p += _value_field(value)
    return _frame(T_CLAIM, p)


def proclaim(cid: int, value: bytes) -> bytes:
    return _frame(T_PROCLAIM, _U32.pack(cid) + _value_field(value))


def watch(wid: int, name: bytes) -> bytes:
    return _frame(T_WATCH, struct.pack(">IB", wid, len(name)) + name)


class Welcome(NamedTuple):
    session: int
    flags: int
    secret: bytes
    node: str
    ring: int


class Frame(NamedTuple):
    type: int
    claim: int = 0
    value: int = 0  # token, seq or ring version
    code: int = 0
    reason: str = ""
    flags: int = 0
    member_id: str = ""
    member_addr: str = ""
    count: int = 0
    kind: int = 0  # CHANGE
    mode: int = 0  # CHANGE
    data: bytes = b""  # CHANGE: the holder's value
    label: str = ""  # CHANGE
    identity: str = ""  # CHANGE
    status: int = 0  # PROCLAIMED


def _string(p: bytes, off: int) -> Tuple[str, int]:
    if off >= len(p):
        raise ProtocolViolation("malformed frame: string length missing")
    n = p[off]
    end = off + 1 + n
    if end > len(p):
        raise ProtocolViolation("malformed frame: string runs past the end")
    return p[off + 1:end].decode("utf-8", "replace"), end


def parse_welcome(p: bytes, asked_flags: int) -> Welcome:
    if len(p) < 9:
        raise ProtocolViolation("malformed WELCOME")
    session = _U64.unpack_from(p, 0)[0]
    flags = p[8]
    allowed = (WELCOME_RESUMABLE | WELCOME_RING) if asked_flags & HELLO_RESUMABLE else 0
    if asked_flags & HELLO_VALUES:
        allowed |= WELCOME_VALUES
    if flags & ~allowed:
        raise ProtocolViolation("WELCOME has a flag the client did not ask for: %#x" % flags)
    off, secret, node, ring_v = 9, b"", "", 0
    if flags & WELCOME_RESUMABLE:
        if len(p) < off + 17:
            raise ProtocolViolation("malformed WELCOME")
        secret = bytes(p[off:off + 16])
        node, off = _string(p, off + 16)
    if flags & WELCOME_RING:
        if len(p) < off + 8:
            raise ProtocolViolation("malformed WELCOME")
        ring_v = _U64.unpack_from(p, off)[0]
        off += 8
    if off != len(p):
        raise ProtocolViolation("malformed WELCOME: bytes left over")
    return Welcome(session, flags, secret, node, ring_v)


def parse(t: int, p: bytes) -> Frame:
    """Decode one server frame (after WELCOME) of type t with payload p."""
    n = len(p)
    if t in (T_GRANTED, T_PROMOTED):
        if n != 12:
            raise ProtocolViolation("malformed frame %#x" % t)
        c, v = _CLAIM_U64.unpack(p)
        return Frame(t, claim=c, value=v)
    if t in (T_QUEUED, T_BUSY, T_RELEASED):
        if n != 4:  # a QUEUED with a ticket comes only to a session that asked
            raise ProtocolViolation("malformed frame %#x" % t)
        return Frame(t, claim=_U32.unpack(p)[0])
    if t == T_PONG:
        if n != 8:
            raise ProtocolViolation("malformed PONG")
        return Frame(t, value=_U64.unpack(p)[0])
    if t in (T_REFUSED, T_REVOKED):
        if n < 6 or n != 6 + p[5]:
            raise ProtocolViolation("malformed frame %#x" % t)
        return Frame(t, claim=_U32.unpack_from(p)[0], code=p[4], reason=p[6:].decode("utf-8", "replace"))
    if t == T_ERROR:
        if n < 2 or n != 2 + p[1]:
            raise ProtocolViolation("malformed ERROR")
        return Frame(t, code=p[0], reason=p[2:].decode("utf-8", "replace"))
    if t == T_MEMBER:
        if n < 1:
            raise ProtocolViolation("malformed MEMBER")
        mid, off = _string(p, 1)
        addr, off = _string(p, off)
        if off != n or not mid or p[0] & ~MEMBER_IN_RING:
            raise ProtocolViolation("malformed MEMBER")
        return Frame(t, flags=p[0], member_id=mid, member_addr=addr)
    if t == T_RINGEND:
        if n != 11 or p[10] & ~RINGEND_PUSHED:
            raise ProtocolViolation("malformed RINGEND")
        v, cnt, fl = struct.unpack(">QHB", p)
        return Frame(t, value=v, count=cnt, flags=fl)
    if t == T_PROCLAIMED:
        if n != 5 or p[4] > 1:
            raise ProtocolViolation("malformed PROCLAIMED")
        return Frame(t, claim=_U32.unpack_from(p)[0], status=p[4])
    if t == T_CHANGE:
        return _parse_change(p)
    raise ProtocolViolation("unexpected frame type %#x" % t)


def _parse_change(p: bytes) -> Frame:
    # watch u32, kind u8, mode u8, token u64, value_len u16, value,
    # label_len u8, label, identity_len u8, identity
    if len(p) < 18:
        raise ProtocolViolation("malformed CHANGE: %d bytes" % len(p))
    wid, kind, mode, token, vlen = struct.unpack_from(">IBBQH", p)
    if kind < CHANGE_HELD or kind > CHANGE_RESET:
        raise ProtocolViolation("malformed CHANGE: kind %#x" % kind)
    if vlen > MAX_VALUE or 16 + vlen + 2 > len(p):
        raise ProtocolViolation("malformed CHANGE: value of %d bytes" % vlen)
    data = bytes(p[16:16 + vlen])
    label, off = _string(p, 16 + vlen)
    identity, off = _string(p, off)
    if off != len(p):
        raise ProtocolViolation("malformed CHANGE: bytes left over")
    return Frame(T_CHANGE, claim=wid, value=token, kind=kind, mode=mode, data=data, label=label, identity=identity)


def split(buf: bytearray, max_len: int = MAX_FRAME_LEN) -> Optional[Tuple[int, bytes]]:
    """Take one whole frame off the front of buf: (type, payload), or None.
    max_len is MAX_VALUES_FRAME_LEN on a session with values."""
    if len(buf) < 2:
        return None
    ln = (buf[0] << 8) | buf[1]
    if ln == 0 or ln > max_len:
        raise ProtocolViolation("frame length %d out of range" % ln)
    if len(buf) < 2 + ln:
        return None
    t = buf[2]
    p = bytes(buf[3:2 + ln])
    del buf[:2 + ln]
    return t, p


def split_v1_error(buf: bytearray) -> Optional[Tuple[int, str]]:
    """A version 1 ERROR (the answer of a server without version 2)."""
    if len(buf) < 3 or len(buf) < 3 + buf[2]:
        return None
    return buf[1], bytes(buf[3:3 + buf[2]]).decode("utf-8", "replace")


def members_list(frames: List[Frame]) -> List[Tuple[str, str, bool]]:
    return [(f.member_id, f.member_addr, bool(f.flags & MEMBER_IN_RING)) for f in frames]
