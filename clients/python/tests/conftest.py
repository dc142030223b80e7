"""Fixtures: real `baton serve` processes started from BATON_BIN.

The Go test clients/python/python_test.go builds baton and sets
BATON_BIN; run by hand with
``BATON_BIN=/path/to/baton python3 -m pytest -q clients/python/tests``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Dict, List, Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

BIN = os.environ.get("BATON_BIN", "")
TIMEOUT = 30.0  # bound on every wait of a test for a server


class Server:
    """One `baton serve` process; its addresses come from its own log."""

    def __init__(self, *args: str) -> None:
        if not BIN:
            pytest.skip("BATON_BIN is not set (go test ./clients/python sets it)")
        cmd = [BIN, "serve", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0",
               "-log-format", "json", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: List[str] = []
        self._listening = threading.Event()
        self.addr = self.admin = ""
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._listening.wait(TIMEOUT):
            self.kill()
            raise RuntimeError("baton serve did not start: %s" % "".join(self.log[-20:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if not self._listening.is_set() and '"baton listening"' in line:
                rec = json.loads(line)
                self.addr, self.admin = rec["addr"], rec.get("admin_addr", "")
                self._listening.set()

    def admin_post(self, path: str) -> int:
        req = urllib.request.Request("http://%s%s" % (self.admin, path), method="POST", data=b"")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def admin_get(self, path: str) -> Dict:
        with urllib.request.urlopen("http://%s%s" % (self.admin, path), timeout=TIMEOUT) as r:
            return json.loads(r.read())

    def force_release(self, name: str) -> int:
        return self.admin_post("/api/locks/%s/release" % urllib.parse.quote(name, safe=""))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def own_server():
    """A server of the test's own, for tests that kill or stop it."""
    started: List[Server] = []

    def start(*args: str) -> Server:
        s = Server(*args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGCONT)
        s.kill()


def wait_for(cond, what: str, timeout: float = TIMEOUT, pause: float = 0.01):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("no %s within %.0fs" % (what, timeout))
        time.sleep(pause)


_counter = [0]


def unique(prefix: str) -> str:
    _counter[0] += 1
    return "%s-%d-%d" % (prefix, os.getpid(), _counter[0])


@pytest.fixture
def name(request) -> str:
    return unique(request.node.name)


def optional(v: Optional[str]) -> str:
    return v or ""
