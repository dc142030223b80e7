"""baton: a Python client for the baton lock service.

Standard library only, Python 3.9+. Quick start::

    import baton

    client = baton.Client("127.0.0.1:7070")
    lk = client.lock("nightly-import", lease=10)
    with lk as token:            # waits for the lock; token fences writes
        run_import(token, stop=lk.lost)   # lk.lost is set if the lock is lost

See README.md beside this package and docs/clients.md of the project.
"""

from __future__ import annotations

import ssl
from typing import Optional

from .client import Claim, Client, Election, Holder, Lock, Mode, Observer, Session, Watch
from .errors import (
    BatonError,
    Busy,
    ClaimCancelled,
    ClaimRefused,
    Code,
    ConnectError,
    ConnectionLost,
    HeartbeatTimeout,
    LockLost,
    LockTimeout,
    NotLeader,
    NotResumed,
    NotSupported,
    ProtocolViolation,
    ReassertRefused,
    Revoked,
    ServerError,
    SessionClosed,
    SessionError,
    UnsupportedVersion,
)

__version__ = "0.1.0"

__all__ = [
    "BatonError", "Busy", "Claim", "ClaimCancelled", "ClaimRefused", "Client", "Code", "ConnectError",
    "ConnectionLost", "Election", "HeartbeatTimeout", "Holder", "Lock", "LockLost", "LockTimeout", "Mode",
    "NotLeader", "NotResumed", "NotSupported", "Observer", "ProtocolViolation", "ReassertRefused", "Revoked",
    "ServerError", "Session", "SessionClosed", "SessionError", "UnsupportedVersion", "Watch", "tls_context",
]


def tls_context(ca: Optional[str] = None, cert: Optional[str] = None,
                key: Optional[str] = None) -> ssl.SSLContext:
    """An SSLContext for baton: trusts ``ca`` (a PEM file; the system's
    roots when None) and, for mutual TLS, presents ``cert``/``key``."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx
