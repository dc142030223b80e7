#!/usr/bin/env python3
"""Claim + release on an open session with the Python client, as
claim-release.mjs and goclaim do: the cycle that releases without waiting
for RELEASED (one round trip and a write) and the one that waits (two
round trips). Prints one JSON line.

    python3 bench/clients/claim_release.py 127.0.0.1:7070 [cycles]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import baton  # noqa: E402

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7070"
cycles = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
name = f"bench-python-{os.getpid()}"


def run(s, wait: bool) -> dict:
    def cycle() -> float:
        a = time.perf_counter()
        s.claim(name).release(wait=wait)
        return time.perf_counter() - a

    for _ in range(200):
        cycle()
    t0 = time.perf_counter()
    d = sorted(cycle() for _ in range(cycles))
    total = time.perf_counter() - t0
    q = lambda p: round(d[min(cycles - 1, int(p * cycles))] * 1e6)  # noqa: E731
    return {"p50_us": q(0.5), "p99_us": q(0.99), "per_sec": round(cycles / total)}


with baton.Client(addr, lease=10).session() as s:
    out = {"client": "python", "cycles": cycles, "release_written": run(s, False), "release_answered": run(s, True)}
print(json.dumps(out))
