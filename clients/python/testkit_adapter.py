#!/usr/bin/env python3
"""Adapter between `baton testkit -- ADAPTER_CMD` and this Python client.

Environment: BATON_TESTKIT_ADDR (host:port), BATON_TESTKIT_NAME,
BATON_TESTKIT_LEASE_MS, BATON_TESTKIT_RESUMABLE ("1" or "0").

It opens a session with that lease (resumable when asked), claims NAME
exclusively, waiting, and prints one JSON line per event, flushed at
once: {"event":"held","token":N}, {"event":"lost","reason":"..."} (the
moment the library tells the work of a loss, before it closes the
connection), {"event":"released"}, {"event":"error","message":"..."},
and {"event":"unsupported","feature":"resumable"} when a resumable
session was asked for and the server opened a plain one.
Standard input: "release" releases the claim (then "released"), "close"
closes the session and exits 0; the end of standard input does the same.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import baton  # noqa: E402

_out = threading.Lock()


def emit(**ev: Any) -> None:
    with _out:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()


def main() -> int:
    try:
        addr = os.environ["BATON_TESTKIT_ADDR"]
        name = os.environ["BATON_TESTKIT_NAME"]
        lease = int(os.environ["BATON_TESTKIT_LEASE_MS"]) / 1000.0
        resumable = os.environ.get("BATON_TESTKIT_RESUMABLE", "0") == "1"
    except (KeyError, ValueError) as e:
        emit(event="error", message="bad environment: %s" % e)
        return 2

    state: dict = {"session": None, "claim": None, "closing": False}
    ready = threading.Event()

    def on_lost(claim: baton.Claim, err: baton.LockLost) -> None:
        emit(event="lost", reason="%s: %s" % (type(err).__name__, err))

    def work() -> None:
        try:
            client = baton.Client(addr, lease=lease, routing="off", label="testkit-python")
            s = client.session(resumable=resumable)
            state["session"] = s
            if resumable and not s.resumable:
                # The server refused a resumable session (an earlier
                # revision): the claim goes on, on a plain session.
                emit(event="unsupported", feature="resumable")
            if state["closing"]:
                s.close()
                return
            cl = s.claim(name, on_lost=on_lost)
            state["claim"] = cl
            emit(event="held", token=cl.token)
        except baton.LockLost:
            pass  # told already through on_lost
        except Exception as e:
            if not state["closing"]:
                emit(event="error", message="%s: %s" % (type(e).__name__, e))
        finally:
            ready.set()

    threading.Thread(target=work, daemon=True).start()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "release":
            ready.wait()
            cl: Optional[baton.Claim] = state["claim"]
            if cl is None:
                emit(event="error", message="nothing to release")
                continue
            cl.release()
            emit(event="released")
        elif cmd == "close":
            break
        elif cmd:
            emit(event="error", message="unknown command %r" % cmd)
    state["closing"] = True
    s = state["session"]
    if s is not None:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
