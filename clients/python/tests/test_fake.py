"""Protocol checks against a scripted server (no baton process)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import baton


def frame(t: int, payload: bytes) -> bytes:
    return struct.pack(">HB", len(payload) + 1, t) + payload


def read_frame(c: socket.socket) -> bytes:
    head = c.recv(2, socket.MSG_WAITALL)
    if len(head) < 2:
        return b""
    n = struct.unpack(">H", head)[0]
    return c.recv(n, socket.MSG_WAITALL)


def serve_once(script):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    result = {}

    def run():
        c, _ = ls.accept()
        c.settimeout(10)
        try:
            assert c.recv(8, socket.MSG_WAITALL) == b"\x01\x02" + b"\x00" * 6
            read_frame(c)  # HELLO
            c.sendall(frame(0x31, struct.pack(">QB", 7, 0)))
            script(c, result)
        finally:
            c.close()
            ls.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return "127.0.0.1:%d" % ls.getsockname()[1], t, result


def test_unexpected_answer_is_a_violation_that_loses_the_claim():
    def script(c, result):
        f = read_frame(c)  # CLAIM 1
        assert f[0] == 0x23
        c.sendall(frame(0x33, struct.pack(">IQ", 1, 42)))  # GRANTED
        time.sleep(0.1)
        c.sendall(frame(0x37, struct.pack(">I", 9)))  # RELEASED, nothing asked
        t0 = time.monotonic()
        while True:  # the client closes: EOF (PINGs may come first)
            if not read_frame(c):
                break
        result["closed_after"] = time.monotonic() - t0

    addr, t, result = serve_once(script)
    s = baton.Client(addr, lease=5).session()
    cl = s.claim("job")
    assert cl.token == 42
    assert cl.lost.wait(5)
    assert isinstance(cl.error, baton.ConnectionLost) and isinstance(cl.error.cause, baton.ProtocolViolation)
    t.join(10)
    assert result["closed_after"] < 2
    s.close()


def test_promoted_without_queued_is_a_violation():
    def script(c, result):
        read_frame(c)
        c.sendall(frame(0x34, struct.pack(">I", 1)))  # QUEUED 1
        c.sendall(frame(0x36, struct.pack(">IQ", 2, 5)))  # PROMOTED of a claim never made
        while read_frame(c):
            pass

    addr, t, _ = serve_once(script)
    s = baton.Client(addr, lease=5).session()
    try:
        s.claim("job")
        raise AssertionError("claim returned")
    except baton.LockLost as e:
        assert isinstance(e.cause, baton.ProtocolViolation)
    t.join(10)
    s.close()


def test_claim_ids_wrap_and_skip_ids_in_use():
    def script(c, result):
        ids = []
        for tok in (1, 2, 3):
            f = read_frame(c)
            cid = struct.unpack(">I", f[1:5])[0]
            ids.append(cid)
            c.sendall(frame(0x33, struct.pack(">IQ", cid, tok)))
        result["ids"] = ids
        while read_frame(c):
            pass

    addr, t, result = serve_once(script)
    s = baton.Client(addr, lease=5).session()
    s._next_id = 0xFFFFFFFF
    a = s.claim("a")
    b = s.claim("b")
    assert (a.id, b.id) == (0xFFFFFFFF, 1)
    s._next_id = 1  # 1 is held: the next id skips it
    assert s.claim("c").id == 2
    s.close()
    t.join(10)
    assert result["ids"] == [0xFFFFFFFF, 1, 2]
