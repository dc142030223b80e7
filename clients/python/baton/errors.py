"""Exceptions of the baton client and the protocol's error codes.

Branch on the exception class or on ``code``, never on the reason text,
which is human-readable and may change (docs/protocol-v2-client.md, "v2 error
codes"). Codes below 0x10 are server conditions (retry, with backoff);
0x10 and above are client errors (report, do not retry).
"""

from __future__ import annotations

import enum
from typing import Optional


class Code(enum.IntEnum):
    """The protocol's error codes (ERROR, REFUSED and REVOKED frames)."""

    SHUTTING_DOWN = 0x01
    ADMIN = 0x02  # force-release or kick by an administrator
    NOT_OWNER = 0x03  # a cluster node cannot serve this lock now
    REASSERT_REFUSED = 0x04
    STALE_RING = 0x05
    LIMIT = 0x07  # a server limit was reached
    SLOW_WATCHER = 0x08  # a watch whose changes were not read was ended
    UNSUPPORTED_VERSION = 0x10
    UNKNOWN_TYPE = 0x13
    EMPTY_NAME = 0x14
    NAME_TOO_LONG = 0x15
    INVALID_NAME = 0x16
    INVALID_LEASE = 0x17
    NOT_AUTHORIZED = 0x18
    MALFORMED = 0x19
    FRAME_TOO_LONG = 0x1A
    FIRST_NOT_HELLO = 0x1B
    DUPLICATE_HELLO = 0x1C
    INVALID_LABEL = 0x1D
    UNSUPPORTED_FEATURE = 0x1E
    CLAIM_ID_IN_USE = 0x1F
    UNKNOWN_MODE = 0x20
    INVALID_LIMIT = 0x21
    LIMIT_MISMATCH = 0x22
    MODE_MISMATCH = 0x23
    VALUE_TOO_LONG = 0x24


def code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return "0x%02x" % code


class BatonError(Exception):
    """Base class of every error the client raises."""


class ProtocolViolation(BatonError):
    """The server sent something the protocol does not allow; the session
    was closed and every claim on it is lost."""


class ConnectError(BatonError, ConnectionError):
    """No configured node could be reached (or the TLS handshake failed)."""


class SessionClosed(BatonError):
    """The session has ended (closed, or lost); open a new one."""


class ServerError(BatonError):
    """An error the server sent, with its protocol code."""

    def __init__(self, code: int, reason: str = "") -> None:
        self.code = int(code)
        self.reason = reason
        super().__init__("%s (%s): %s" % (type(self).__name__, code_name(self.code), reason))

    @property
    def temporary(self) -> bool:
        """True for a server condition (code below 0x10): retry with backoff."""
        return self.code < 0x10


class SessionError(ServerError):
    """A session-level ERROR: the server ended the session (for example
    0x01 shutting down, 0x17 lease out of range, 0x07 too many sessions)."""


class UnsupportedVersion(SessionError):
    """The server does not speak protocol version 2."""


class ClaimRefused(ServerError):
    """REFUSED: the server refused this claim; the session lives on."""


class NotSupported(BatonError):
    """The server does not offer what was asked (values, watches and
    elections need a server that answered HELLO's values flag); nothing
    was sent."""


class NotLeader(BatonError):
    """The election's candidate does not lead (it never won, resigned, or
    lost its claim)."""


class Busy(BatonError):
    """A no-wait claim could not be granted at once."""


class LockTimeout(BatonError, TimeoutError):
    """A waiting claim was not granted within its timeout; it left the queue."""


class ClaimCancelled(BatonError):
    """A waiting claim's ``cancel`` event was set; it left the queue."""


class LockLost(BatonError):
    """A claim that was held or queued has ended without a release asked
    for. Stop the work it guarded. ``cause`` is the underlying error."""

    def __init__(self, message: str, cause: Optional[BaseException] = None) -> None:
        super().__init__(message)
        self.cause = cause


class HeartbeatTimeout(LockLost):
    """No confirmation for 0.8 of the lease: the client gave up (the client rule)."""


class ConnectionLost(LockLost):
    """The connection ended (EOF, reset, a failed write, or a session ERROR)."""


class Revoked(LockLost):
    """REVOKED: the server ended this claim (0x02 administrator, 0x18
    access revoked, 0x03 owner gone); the session lives on."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__("claim revoked (%s): %s" % (code_name(code), reason))
        self.code = int(code)
        self.reason = reason


class ReassertRefused(LockLost):
    """After a broken connection, the claim's re-assertion was refused."""


class NotResumed(LockLost):
    """A resumable session could not be resumed before the give-up deadline."""
