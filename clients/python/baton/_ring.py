"""The owner of a lock name in a cluster's ring (docs/protocol-v2-ring.md, "v2 ring").

Rendezvous hashing exactly as the Go package cluster/ring computes it.
"""

from __future__ import annotations

from typing import Iterable, Optional

_M = 0xFFFFFFFFFFFFFFFF


def _mix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M
    x ^= x >> 31
    return x


def _h(s: str) -> int:
    h = 14695981039346656037
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 1099511628211) & _M
    return _mix(h)


def owner(name: str, members: Iterable[str]) -> Optional[str]:
    """The member that owns name, or None for an empty ring."""
    hn = _h(name)
    best, best_score = None, -1
    for m in sorted(set(members)):
        sc = _mix(hn ^ _h(m))
        if sc > best_score:  # ties: the id that sorts first keeps it
            best, best_score = m, sc
    return best
