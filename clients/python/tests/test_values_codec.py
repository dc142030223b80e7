"""The values and watches frames against the examples of
docs/protocol-v2-watches.md ("v2 values and watches"): each hex line below must appear there as is."""

from __future__ import annotations

import os
import re
import socket
import struct
import threading

import pytest

import baton
from baton import _protocol as P

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "protocol-v2-watches.md")


def section() -> str:
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    start = doc.index("## v2 values and watches")
    end = doc.find("\n## ", start + 1)
    return doc[start:] if end < 0 else doc[start:end]


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def hexs(b: bytes) -> str:
    return " ".join("%02x" % x for x in b)


CLIENT = [
    (P.hello(2.0, "w", P.HELLO_VALUES), "00 08 21 00 00 07 d0 08 01 77"),
    (P.claim(1, 0, P.MODE_EXCLUSIVE, 0, b"db", b"10.0.0.5:5432"),
     "00 1d 23 00 00 00 01 08 01 00 00 00 00 02 64 62 00 0d 31 30 2e 30 2e 30 2e 35 3a 35 34 33 32"),
    (P.watch(2, b"db"), "00 08 2a 00 00 00 02 02 64 62"),
    (P.proclaim(1, b"10.0.0.6:5432"), "00 14 29 00 00 00 01 00 0d 31 30 2e 30 2e 30 2e 36 3a 35 34 33 32"),
    (P.release(1), "00 05 24 00 00 00 01"),
    (P.proclaim(1, b"x"), "00 08 29 00 00 00 01 00 01 78"),
    (P.watch(4, b""), "00 06 2a 00 00 00 04 00"),
]

# (hex, type, fields the decoder must give)
SERVER = [
    ("00 21 40 00 00 00 02 01 01 00 00 00 00 00 00 00 2a 00 0d 31 30 2e 30 2e 30 2e 35 3a 35 34 33 32 01 77 00",
     dict(claim=2, kind=1, mode=1, value=42, data=b"10.0.0.5:5432", label="w", identity="")),
    ("00 13 40 00 00 00 02 04 00 00 00 00 00 00 00 00 00 00 00 00 00",
     dict(claim=2, kind=4, mode=0, value=0, data=b"", label="", identity="")),
    ("00 20 40 00 00 00 02 02 01 00 00 00 00 00 00 00 2a 00 0d 31 30 2e 30 2e 30 2e 36 3a 35 34 33 32 00 00",
     dict(claim=2, kind=2, mode=1, value=42, data=b"10.0.0.6:5432")),
    ("00 06 3f 00 00 00 01 00", dict(claim=1, status=0)),
    ("00 13 40 00 00 00 02 03 01 00 00 00 00 00 00 00 2a 00 00 00 00", dict(claim=2, kind=3, value=42, data=b"")),
    ("00 06 3f 00 00 00 01 01", dict(claim=1, status=1)),
    ("00 0d 33 00 00 00 01 00 00 00 00 00 00 00 2a", dict(claim=1, value=42)),
    ("00 32 39 00 00 00 03 08 2b 77 61 74 63 68 65 72 20 74 6f 6f 20 73 6c 6f 77 3a 20 69 74 73 20 63 68 61 6e"
     " 67 65 73 20 77 65 72 65 20 6e 6f 74 20 72 65 61 64",
     dict(claim=3, code=0x08, reason="watcher too slow: its changes were not read")),
]


def test_client_frames_match_the_document():
    doc = section()
    for frame, want in CLIENT:
        assert want in doc, "example %s is not in docs/protocol-v2-watches.md" % want
        assert hexs(frame) == want


def test_server_frames_decode_as_the_document_says():
    doc = section()
    for want, fields in SERVER:
        assert re.sub(r"\s+", " ", want) in doc, "example %s is not in docs/protocol-v2-watches.md" % want
        b = h(want)
        assert struct.unpack(">H", b[:2])[0] == len(b) - 2
        f = P.parse(b[2], b[3:])
        for k, v in fields.items():
            assert getattr(f, k) == v, (want, k, getattr(f, k), v)


def test_welcome_with_values_only_when_asked():
    w = h("00 0a 31 00 00 00 00 00 00 00 07 10")
    assert "00 0a 31 00 00 00 00 00 00 00 07 10" in section()
    assert P.parse_welcome(w[3:], P.HELLO_VALUES).flags == P.WELCOME_VALUES
    with pytest.raises(baton.ProtocolViolation):
        P.parse_welcome(w[3:], 0)


def test_bad_frames_are_violations():
    ok = h("00 13 40 00 00 00 02 04 00 00 00 00 00 00 00 00 00 00 00 00 00")[3:]
    for bad in (ok[:-1], ok + b"\x00", ok[:4] + b"\x06" + ok[5:], ok[:4] + b"\x00" + ok[5:],
                ok[:14] + b"\x04\x01" + ok[16:]):  # kinds 6 and 0, a value over 1024 bytes
        with pytest.raises(baton.ProtocolViolation):
            P.parse(P.T_CHANGE, bad)
    with pytest.raises(baton.ProtocolViolation):
        P.parse(P.T_PROCLAIMED, b"\x00\x00\x00\x01\x02")
    # A frame over 512 bytes is taken only on a session with values.
    big = bytearray(struct.pack(">HB", 1000, P.T_CHANGE) + b"\x00" * 999)
    with pytest.raises(baton.ProtocolViolation):
        P.split(bytearray(big))
    assert P.split(big, P.MAX_VALUES_FRAME_LEN)[0] == P.T_CHANGE
    with pytest.raises(baton.ProtocolViolation):
        P.split(bytearray(struct.pack(">HB", 2049, P.T_CHANGE)), P.MAX_VALUES_FRAME_LEN)


def test_values_are_checked_before_sending():
    assert P.check_value("é" * 512) == "é".encode() * 512
    assert P.check_value(b"x" * 1024) == b"x" * 1024
    with pytest.raises(ValueError):
        P.check_value(b"x" * 1025)
    with pytest.raises(ValueError):
        P.check_value("é" * 513)
    with pytest.raises(TypeError):
        P.check_value(5)  # type: ignore[arg-type]


def _old_server(result):
    """A server of the revision before values: refuses HELLO flag 0x08
    with ERROR 0x1e, accepts a HELLO without it."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)

    def run():
        hellos = []
        try:
            for _ in range(2):
                c, _ = ls.accept()
                c.settimeout(10)
                c.recv(8, socket.MSG_WAITALL)
                n = struct.unpack(">H", c.recv(2, socket.MSG_WAITALL))[0]
                hello = c.recv(n, socket.MSG_WAITALL)
                hellos.append(hello[5])
                if hello[5] & P.HELLO_VALUES:
                    reason = b"reserved flag"
                    c.sendall(struct.pack(">HBBB", 3 + len(reason), P.T_ERROR, 0x1E, len(reason)) + reason)
                    c.close()
                    continue
                c.sendall(struct.pack(">HBQB", 10, P.T_WELCOME, 7, 0))
                result["conn"] = c
                while c.recv(4096):
                    pass
                c.close()
        finally:
            result["hellos"] = hellos
            ls.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return "127.0.0.1:%d" % ls.getsockname()[1], t


def test_an_older_server_is_asked_again_without_values_and_says_not_supported():
    result = {}
    addr, t = _old_server(result)
    s = baton.Client(addr, lease=5).session()
    try:
        assert not s.values
        with pytest.raises(baton.NotSupported, match="not supported by this server"):
            s.watch("db")
        with pytest.raises(baton.NotSupported):
            s.claim("db", value="10.0.0.5:5432")
        e = s.election("db")
        with pytest.raises(baton.NotSupported):
            e.campaign("10.0.0.5:5432")
        with pytest.raises(baton.NotSupported):
            e.leader()
        with pytest.raises(baton.NotSupported):
            next(iter(e.observe()))
    finally:
        s.close()
    t.join(10)
    assert result["hellos"] == [P.HELLO_VALUES, 0]


def _change(wid, kind, token=0, value=b"", label=b"", mode=1):
    p = struct.pack(">IBBQH", wid, kind, mode if kind < 4 else 0, token, len(value)) + value
    p += bytes([len(label)]) + label + b"\x00"
    return struct.pack(">HB", len(p) + 1, P.T_CHANGE) + p


def _read_frame(c):
    n = struct.unpack(">H", c.recv(2, socket.MSG_WAITALL))[0]
    return c.recv(n, socket.MSG_WAITALL)


@pytest.mark.parametrize("code", [0x08, 0x03, 0x18])
def test_observer_watches_again_after_a_revoke_and_never_goes_back(code):
    """A scripted server: the watch is revoked (0x08 too slow, 0x03 the
    name moved), and the new watch shows an older leader (as a stale node
    might): the observer drops it, and goes on with what is newer. A
    client error (0x18 access revoked) ends the observer."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    seen = {}

    def run():
        c, _ = ls.accept()
        c.settimeout(10)
        try:
            c.recv(8, socket.MSG_WAITALL)
            seen["hello_flags"] = _read_frame(c)[5]
            c.sendall(struct.pack(">HBQB", 10, P.T_WELCOME, 7, P.WELCOME_VALUES))
            f = _read_frame(c)
            assert f[0] == P.T_WATCH, f
            w1 = struct.unpack(">I", f[1:5])[0]
            c.sendall(_change(w1, 1, 10, b"a") + _change(w1, 4))
            c.sendall(_change(w1, 3, 10) + _change(w1, 1, 20, b"b"))
            reason = b"revoked"
            c.sendall(struct.pack(">HBIBB", 7 + len(reason), P.T_REVOKED, w1, code, len(reason)) + reason)
            while True:  # PINGs may come first
                try:
                    f = _read_frame(c)
                except (struct.error, OSError):
                    return  # closed: the observer ended
                if f[0] == P.T_WATCH:
                    break
                c.sendall(struct.pack(">HB", 9, P.T_PONG) + f[1:9])
            w2 = struct.unpack(">I", f[1:5])[0]
            seen["ids"] = (w1, w2)
            c.sendall(_change(w2, 1, 10, b"a") + _change(w2, 4))  # older than 20: dropped
            c.sendall(_change(w2, 3, 10))  # nobody leads
            c.sendall(_change(w2, 1, 30, b"c"))
            while c.recv(4096):
                pass
        finally:
            c.close()
            ls.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    s = baton.Client("127.0.0.1:%d" % ls.getsockname()[1], lease=5).session()
    got = []
    try:
        with s.election("db").observe() as obs:
            for leader in obs:
                got.append(None if leader is None else (leader.token, leader.value))
                if leader is not None and leader.token == 30:
                    break
    except baton.Revoked as e:
        assert code == 0x18 and e.code == code
        assert got == [(10, b"a"), (20, b"b")], got
        return
    finally:
        s.close()
    t.join(10)
    assert seen["hello_flags"] & P.HELLO_VALUES
    assert seen["ids"][0] != seen["ids"][1]
    leaders = [g for g in got if g is not None]
    assert leaders == [(10, b"a"), (20, b"b"), (30, b"c")], got


def test_a_reset_clears_the_holders_until_synced():
    """A scripted server sends a reset (kind 5) and a new whole state:
    the watch gives [10], then [20, 30], never a state in between."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)

    def run():
        c, _ = ls.accept()
        c.settimeout(10)
        try:
            c.recv(8, socket.MSG_WAITALL)
            _read_frame(c)
            c.sendall(struct.pack(">HBQB", 10, P.T_WELCOME, 7, P.WELCOME_VALUES))
            wid = struct.unpack(">I", _read_frame(c)[1:5])[0]
            c.sendall(_change(wid, 1, 10, b"a") + _change(wid, 4))
            c.sendall(_change(wid, 5))
            c.sendall(_change(wid, 1, 20, b"b", b"x"))
            c.sendall(_change(wid, 1, 30, b"c"))
            c.sendall(_change(wid, 4))
            c.sendall(_change(wid, 2, 30, b"c2"))
            while c.recv(4096):
                pass
        finally:
            c.close()
            ls.close()

    threading.Thread(target=run, daemon=True).start()
    s = baton.Client("127.0.0.1:%d" % ls.getsockname()[1], lease=5).session()
    try:
        w = s.watch("db")
        states = [[(h.token, h.value) for h in w.get(5)] for _ in range(3)]
        assert states == [[(10, b"a")], [(20, b"b"), (30, b"c")], [(20, b"b"), (30, b"c2")]], states
        assert w.holders[0].label == "x"
    finally:
        s.close()
