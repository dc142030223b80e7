#!/usr/bin/env python3
"""Lock + unlock of one Redis lock with redis-py's Lock (SET NX PX, then a
Lua compare-and-delete): two round trips, as a baton claim + release that
awaits RELEASED. Prints one JSON line, as the other clients here do.

    python3 bench/clients/redislock.py 127.0.0.1:6379 [cycles]
"""

import json
import os
import sys
import time

import redis

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:6379"
cycles = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
host, port = addr.rsplit(":", 1)
r = redis.Redis(host=host, port=int(port))
name = f"bench-redis-py-{os.getpid()}"


def cycle() -> float:
    a = time.perf_counter()
    lock = r.lock(name, timeout=10)
    if not lock.acquire(blocking=True):
        raise SystemExit("redislock: not acquired")
    lock.release()
    return time.perf_counter() - a


for _ in range(200):
    cycle()
t0 = time.perf_counter()
d = sorted(cycle() for _ in range(cycles))
total = time.perf_counter() - t0
q = lambda p: round(d[min(cycles - 1, int(p * cycles))] * 1e6)  # noqa: E731
answered = {"p50_us": q(0.5), "p99_us": q(0.99), "per_sec": round(cycles / total)}
print(json.dumps({"client": "redis-py", "cycles": cycles, "release_answered": answered}))
