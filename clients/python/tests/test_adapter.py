"""The test kit adapter, driven by hand against a real server."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

from conftest import TIMEOUT, wait_for

ADAPTER = os.path.join(os.path.dirname(__file__), "..", "testkit_adapter.py")


def start(server, name, lease_ms=2000, resumable="0"):
    env = dict(os.environ, BATON_TESTKIT_ADDR=server.addr, BATON_TESTKIT_NAME=name,
               BATON_TESTKIT_LEASE_MS=str(lease_ms), BATON_TESTKIT_RESUMABLE=resumable)
    p = subprocess.Popen([sys.executable, ADAPTER], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    p.lines = queue.Queue()
    threading.Thread(target=lambda: [p.lines.put(x) for x in p.stdout] + [p.lines.put("")], daemon=True).start()
    return p


def event(p):
    line = p.lines.get(timeout=TIMEOUT)
    assert line, "adapter exited (rc %s)" % p.poll()
    return json.loads(line)


def test_adapter_held_released_close(server, name):
    a = start(server, name)
    b = None
    try:
        ea = event(a)
        assert ea["event"] == "held" and ea["token"] > 0
        b = start(server, name, resumable="1")  # queued behind a
        wait_for(lambda: server.admin_get("/api/locks/" + name).get("waiters"), "b queued")
        a.stdin.write("release\n")
        assert event(a) == {"event": "released"}
        eb = event(b)  # b waited and is promoted
        assert eb["event"] == "held" and eb["token"] > ea["token"]
        assert server.force_release(name) == 200
        lost = event(b)
        assert lost["event"] == "lost" and "Revoked" in lost["reason"]
        for p in (a, b):
            p.stdin.write("close\n")
            p.stdin.flush()
            assert p.wait(TIMEOUT) == 0
    finally:
        for p in (a, b):
            if p is None:
                continue
            if p.poll() is None:
                p.kill()
            p.wait(TIMEOUT)


def test_adapter_error_and_eof(server):
    p = start(server, "x", lease_ms=3600 * 1000)  # over -max-lease: ERROR 0x17
    try:
        e = event(p)
        assert e["event"] == "error" and "INVALID_LEASE" in e["message"]
        p.stdin.close()  # the end of stdin ends the adapter
        assert p.wait(TIMEOUT) == 0
    finally:
        if p.poll() is None:
            p.kill()
