"""The baton client: sessions, claims, the loss signal, routing, resuming.

One Session is one connection speaking protocol version 2 (docs/protocol.md)
with one background thread that reads every frame, sends the heartbeats
(PING) and enforces the client rule: a claim is believed only until the
send time of the latest request whose answer arrived (the anchor) plus
0.8 of the lease; the connection is closed once the guarded work has
stopped (the claim released) and at the latest at anchor + lease.
"""

from __future__ import annotations

import collections
import enum
import random
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from . import _protocol as P
from ._ring import owner as ring_owner
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
    NotResumed,
    ProtocolViolation,
    ReassertRefused,
    Revoked,
    ServerError,
    SessionClosed,
    SessionError,
    UnsupportedVersion,
)

__all__ = ["Client", "Session", "Claim", "Lock", "Mode"]

_now = time.monotonic
OnLost = Callable[["Claim", LockLost], None]


class Mode(enum.IntEnum):
    """How a claim shares its lock."""

    EXCLUSIVE = P.MODE_EXCLUSIVE  #: conflicts with every other claim on the name
    SHARED = P.MODE_SHARED  #: conflicts with exclusive claims only
    SEMAPHORE = P.MODE_SEMAPHORE  #: at most ``limit`` holders of the name


class _State(enum.Enum):
    PENDING = 0  # CLAIM sent, no answer yet
    QUEUED = 1
    HELD = 2
    ENDED = 3


def _split_addr(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("address %r is not host:port" % addr)
    return host.strip("[]"), int(port)


class _RingCache:
    """A client's view of its cluster's ring (shared by its sessions)."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.version = -1  # -1: never learnt; 0: not a cluster
        self.members: List[str] = []
        self.addrs: Dict[str, str] = {}
        self.down: Dict[str, float] = {}

    def set(self, version: int, members: List[Tuple[str, str, bool]]) -> None:
        with self.mu:
            if version < self.version:
                return  # keep the highest version seen
            self.version = version
            self.members = [m for m, _, in_ring in members if in_ring]
            self.addrs = {m: a for m, a, _ in members if a}

    def owner(self, name: str) -> Tuple[Optional[str], str]:
        with self.mu:
            oid = ring_owner(name, self.members)
            if oid is None or self.down.get(oid, 0) > _now():
                return oid, ""
            return oid, self.addrs.get(oid, "")

    def mark_down(self, oid: str) -> None:
        with self.mu:
            self.down[oid] = _now() + 1.0  # its names go through another node meanwhile

    def known_addrs(self) -> List[str]:
        with self.mu:
            return sorted(self.addrs.values())


class Client:
    """A baton client: the addresses of one server or of a cluster's nodes,
    TLS settings and defaults. It holds no connection and is safe to share
    between threads.

    :param address: ``host:port``, or a list of them (the nodes of a cluster;
        a connection goes to the first that accepts it).
    :param tls: an :class:`ssl.SSLContext` to speak TLS (with a client
        certificate loaded into it for mutual TLS); see :func:`baton.tls_context`.
    :param server_hostname: the name to check the server's certificate
        against; defaults to the host of the address dialled.
    :param lease: the default session lease in seconds.
    :param routing: ``"auto"`` routes claims to their names' owner nodes when
        several addresses are given or the server says it is a cluster
        node; ``"direct"`` always learns the ring; ``"off"`` never routes.
    :param connect_timeout: bound on connecting and opening a session.
    :param label: the session label shown by the admin API.
    """

    def __init__(
        self,
        address: Union[str, Sequence[str]] = "127.0.0.1:7070",
        *,
        tls: Optional[ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
        lease: float = 10.0,
        routing: str = "auto",
        connect_timeout: float = 5.0,
        label: str = "python",
    ) -> None:
        addrs = [address] if isinstance(address, str) else list(address)
        if not addrs:
            raise ValueError("no address")
        for a in addrs:
            _split_addr(a)
        if routing not in ("auto", "direct", "off"):
            raise ValueError("routing must be 'auto', 'direct' or 'off'")
        P.lease_ms(lease)
        self.addresses: List[str] = addrs
        self.tls = tls
        self.server_hostname = server_hostname
        self.lease = lease
        self.routing = routing
        self.connect_timeout = connect_timeout
        self.label = label
        self._ring = _RingCache()

    def session(self, *, lease: Optional[float] = None, resumable: bool = False,
                label: Optional[str] = None, address: Optional[str] = None) -> "Session":
        """Open a session: one connection on which any number of claims are
        made. Close it (or use it as a context manager) to release them all.

        :param resumable: ask for a resumable session: a broken connection
            keeps the claims for the rest of the lease, and the session
            re-asserts them on a new connection (any configured node) with
            their tokens unchanged. On a server without resumable sessions
            the session is opened plain; :attr:`Session.resumable` tells.
        """
        s = Session(self, lease if lease is not None else self.lease, resumable,
                    label if label is not None else self.label, [address] if address else None)
        try:
            s._open()
            if self.routing != "off" and (self.routing == "direct" or len(self.addresses) > 1
                                          or s._welcome_flags & P.WELCOME_RING):
                s._start_routing()
        except BaseException:
            s.close()
            raise
        return s

    def lock(self, name: str, *, lease: Optional[float] = None, mode: Mode = Mode.EXCLUSIVE,
             limit: int = 0, wait: bool = True, timeout: Optional[float] = None,
             resumable: bool = False, on_lost: Optional[OnLost] = None) -> "Lock":
        """A lock on ``name`` for a ``with`` block, on a session of its own::

            lk = client.lock("nightly-import")
            with lk as token:
                while work_left() and not lk.lost.is_set():
                    step(token)

        Entering claims (waiting unless ``wait=False``, at most ``timeout``
        seconds) and returns the fencing token; leaving releases and closes.
        ``lk.lost`` is set, and ``on_lost`` called, the moment the lock is lost.
        """
        return Lock(self, name, lease, mode, limit, wait, timeout, resumable, on_lost)


class Claim:
    """One claim on a lock, made by :meth:`Session.claim`.

    ``token`` is the fencing token of its grant. ``lost`` is a
    :class:`threading.Event` set the moment the claim is lost (revoked, the
    session failed, or the client gave up under the client rule); ``error``
    then says why. A release the caller asked for does not set ``lost``.
    Use it as a context manager to release on exit.
    """

    def __init__(self, session: "Session", cid: int, name: str, bname: bytes, mode: Mode,
                 limit: int, lost: Optional[threading.Event]) -> None:
        self.session = session
        self.id = cid
        self.name = name
        self._bname = bname
        self.mode = mode
        self.limit = limit
        self.token = 0
        self.lost = lost if lost is not None else threading.Event()
        self.error: Optional[LockLost] = None
        self._state = _State.PENDING
        self._result: Optional[BaseException] = None  # BUSY or REFUSED
        self._releasing = False
        self._callbacks: List[OnLost] = []
        # Re-assertion after a break: believed until `_until`; the
        # sessions it may be kept in, to name in turn (latest first).
        self._until: Optional[float] = None
        self._origins: List[Tuple[int, bytes, bytes]] = []
        self._origin_idx = 0
        self._must_stop = False  # lost by give-up: the connection waits for release()

    @property
    def held(self) -> bool:
        """True while the claim is held and believed."""
        return self._state is _State.HELD and not self._releasing

    def on_lost(self, fn: OnLost) -> None:
        """Call ``fn(claim, error)`` when the claim is lost (at once if it is).

        It runs on the session's thread before the connection is closed;
        it must return quickly and must not call the client."""
        with self.session._mu:
            if self.error is None:
                self._callbacks.append(fn)
                return
        fn(self, self.error)

    def release(self, timeout: Optional[float] = None, wait: bool = True) -> None:
        """Release the claim and wait for the server's RELEASED (or the
        session's end, or ``timeout``). With ``wait=False`` it returns once
        RELEASE is written: the claim is no longer held, and the server
        applies the release before any later request of this session
        (another session may find the lock held a round trip longer).
        Releasing a claim that was lost tells the session that its work
        has stopped. Never raises for a lost claim."""
        self.session._release(self, 0.0 if not wait else timeout)

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return "<Claim %d %r %s token=%d>" % (self.id, self.name, self._state.name, self.token)


class _Req:
    __slots__ = ("kind", "key", "sent")

    def __init__(self, kind: str, key: int, sent: float) -> None:
        self.kind, self.key, self.sent = kind, key, sent


class Session:
    """A version 2 session: one connection, any number of claims.

    Made by :meth:`Client.session`; safe to use from several threads.
    Closing it releases every claim on it (use it as a context manager).
    """

    def __init__(self, client: Client, lease: float, resumable: bool, label: str,
                 addrs: Optional[List[str]]) -> None:
        P.lease_ms(lease)
        self.client = client
        self.lease = lease
        self.label = label
        self._want_resumable = resumable
        self._addrs = addrs or list(client.addresses)
        self._addr = ""
        self._mu = threading.Lock()
        self._cond = threading.Condition(self._mu)
        self._sock: Optional[socket.socket] = None
        self._pending: Deque[_Req] = collections.deque()
        self._claims: Dict[int, Claim] = {}
        self._next_id = 1
        self._seq = 0
        self._anchor = 0.0
        self._srtt = 0.0
        self._ping_sent: Optional[float] = None
        self._last_ping = 0.0
        self._pong_at = 0.0
        self._error: Optional[BaseException] = None  # set once the session has ended
        self._gave_up = False
        self._working: "set[Claim]" = set()  # lost by the give-up, work not yet stopped
        self._close_by = 0.0
        self._closing = False
        self._resuming = False
        self._ident: Optional[Tuple[int, bytes, bytes]] = None
        self._ring_version = 0
        self._welcome_flags = 0
        self.id = 0
        self.node = ""
        self._outbox = bytearray()  # TLS: written by the reader thread only
        self._write_err: Optional[BaseException] = None
        self._notify: List[Tuple[Claim, LockLost]] = []
        self._members: List[P.Frame] = []
        self._ring_waiters = 0
        self._ring_answered = threading.Condition(self._mu)
        self._ring_answers = 0
        self._watching = False
        self._router: Optional[_Router] = None
        self._thread: Optional[threading.Thread] = None
        # Wakes the reader thread (a write to send over TLS, a failed write, close).
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closed_ev = threading.Event()

    # -- public ---------------------------------------------------------

    @property
    def resumable(self) -> bool:
        """Whether the server granted a resumable session."""
        return self._ident is not None

    @property
    def address(self) -> str:
        """The address of the node the session is connected to now."""
        return self._addr

    @property
    def error(self) -> Optional[BaseException]:
        """Why the session ended, or None while it is open."""
        return self._error

    def claim(self, name: str, *, mode: Mode = Mode.EXCLUSIVE, limit: int = 0, wait: bool = True,
              timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
              cancel: Optional[threading.Event] = None, _lost: Optional[threading.Event] = None) -> Claim:
        """Claim ``name`` and return the held :class:`Claim`.

        :param mode: :attr:`Mode.EXCLUSIVE`, :attr:`Mode.SHARED` or
            :attr:`Mode.SEMAPHORE` (with ``limit`` holders at most).
        :param wait: wait in the lock's FIFO queue; with ``wait=False`` a
            claim that cannot be granted at once raises :class:`Busy`.
        :param timeout: give up waiting after this many seconds: the claim
            leaves the queue and :class:`LockTimeout` is raised.
        :param cancel: a :class:`threading.Event` another thread may set to
            stop waiting: the claim leaves the queue and
            :class:`ClaimCancelled` is raised.
        :raises ClaimRefused: the server refused the claim (the code says why).
        :raises LockLost: the session ended while the claim waited.
        """
        if self._router is not None:
            return self._router.claim(name, mode, limit, wait, timeout, on_lost, _lost, cancel)
        return self._claim_here(name, mode, limit, wait, timeout, on_lost, _lost, cancel)

    def close(self) -> None:
        """Close the session: every claim on it ends and the server hands
        the locks on. Call it once the work the claims guarded has stopped."""
        rt = self._router
        if rt is not None:
            rt.close()
        self._closed_ev.set()
        with self._mu:
            self._closing = True
            if self._error is None:
                self._end_locked(SessionClosed("session closed"), lose=False)
            sock, self._sock = self._sock, None
            self._cond.notify_all()
        self._wake()
        if sock is not None:
            _close_sock(sock)
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(5)
        if t is None:
            self._close_pipe()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<Session %d at %s>" % (self.id, self._addr)

    # -- opening --------------------------------------------------------

    def _dial(self, addr: str, resumable: bool, deadline: float) -> Tuple[socket.socket, P.Welcome, float]:
        host, port = _split_addr(addr)
        c = self.client
        try:
            sock = socket.create_connection((host, port), timeout=max(0.001, min(c.connect_timeout, deadline - _now())))
        except OSError as e:
            raise ConnectError("connect %s: %s" % (addr, e)) from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if c.tls is not None:
                try:
                    sock = c.tls.wrap_socket(sock, server_hostname=c.server_hostname or host)
                except (ssl.SSLError, OSError) as e:
                    raise ConnectError("TLS with %s: %s" % (addr, e)) from e
            flags = P.HELLO_RESUMABLE if resumable else 0
            sent = _now()
            sock.sendall(P.PREAMBLE + P.hello(self.lease, self.label, flags))
            buf = bytearray()
            while True:
                if buf and buf[0] == P.V1_ERROR:
                    e1 = P.split_v1_error(buf)
                    if e1 is not None:
                        if e1[0] == Code.UNSUPPORTED_VERSION:
                            raise UnsupportedVersion(e1[0], e1[1])
                        raise SessionError(e1[0], e1[1])
                else:
                    fr = P.split(buf)
                    if fr is not None:
                        t, p = fr
                        if t == P.T_ERROR:
                            f = P.parse(t, p)
                            raise SessionError(f.code, f.reason)
                        if t != P.T_WELCOME:
                            raise ProtocolViolation("first frame %#x is not WELCOME" % t)
                        w = P.parse_welcome(p, flags)
                        if resumable and not w.flags & P.WELCOME_RESUMABLE:
                            raise ProtocolViolation("WELCOME to a resumable HELLO is not resumable")
                        # Writes happen under the session's lock: one that
                        # cannot complete within 5% of the lease (the server
                        # reads nothing) breaks the connection, so the
                        # give-up is never held up past 0.85 of the lease.
                        sock.settimeout(max(0.01, min(5.0, 0.05 * self.lease)))
                        if buf:  # a server answers nothing before it reads a request
                            raise ProtocolViolation("frames after WELCOME before any request")
                        return sock, w, sent
                left = deadline - _now()
                if left <= 0:
                    raise ConnectError("%s: no WELCOME in time" % addr)
                sock.settimeout(left)
                try:
                    d = sock.recv(4096)
                except socket.timeout:
                    raise ConnectError("%s: no WELCOME in time" % addr) from None
                if not d:
                    raise ConnectError("%s closed the connection before WELCOME" % addr)
                buf += d
        except BaseException as e:
            _close_sock(sock)
            if isinstance(e, OSError) and not isinstance(e, BatonError):
                raise ConnectError("%s: %s" % (addr, e)) from e
            raise

    def _open(self) -> None:
        deadline = _now() + self.client.connect_timeout
        last: Optional[BaseException] = None
        for addr in self._addrs:
            try:
                try:
                    sock, w, sent = self._dial(addr, self._want_resumable, deadline)
                except SessionError as e:
                    if not (self._want_resumable and e.code == Code.UNSUPPORTED_FEATURE):
                        raise
                    sock, w, sent = self._dial(addr, False, deadline)  # a server before resumable sessions
            except (ConnectError, OSError) as e:
                last = e
                continue
            self._install_conn(addr, sock, w, sent)
            self._thread = threading.Thread(target=self._run, name="baton-session", daemon=True)
            self._thread.start()
            return
        if isinstance(last, ConnectError):
            raise last
        raise ConnectError("no node could be reached: %s" % last)

    def _install_conn(self, addr: str, sock: socket.socket, w: P.Welcome, sent: float) -> None:
        self._sock, self._addr = sock, addr
        self.id, self.node = w.session, w.node
        self._welcome_flags = w.flags
        self._ring_version = w.ring
        self._ident = (w.session, w.secret, w.node.encode()) if w.flags & P.WELCOME_RESUMABLE else None
        self._anchor = self._last_ping = sent
        self._ping_sent = None
        self._pending.clear()
        self._outbox.clear()
        self._write_err = None

    # -- sending --------------------------------------------------------

    def _send_locked(self, kind: str, key: int, data: bytes) -> None:
        """Write one request and queue its answer; the anchor candidate is
        taken before the write (never later than the send). mu is held."""
        now = _now()
        self._pending.append(_Req(kind, key, now))
        if self._write_err is not None or self._sock is None:
            return
        if self.client.tls is not None:
            self._outbox += data  # one thread does all of an SSL socket's I/O
            self._wake()
            return
        try:
            self._sock.sendall(data)
        except OSError as e:
            self._write_err = e
            self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already awake, or the session is over

    # -- claims ---------------------------------------------------------

    def _claim_here(self, name: str, mode: Mode, limit: int, wait: bool, timeout: Optional[float],
                    on_lost: Optional[OnLost], lost: Optional[threading.Event],
                    cancel: Optional[threading.Event] = None) -> Claim:
        bname = P.check_name(name)
        mode = Mode(mode)
        if mode is Mode.SEMAPHORE:
            if limit < 1 or limit > 0xFFFFFFFF:
                raise ValueError("a semaphore needs a limit of at least 1")
        elif limit:
            raise ValueError("limit is for semaphore claims only")
        deadline = None if timeout is None else _now() + timeout
        with self._mu:
            while self._resuming and self._error is None:
                self._cond.wait()
            self._check_open_locked()
            # Ids count up, wrapping at 2^32, and skip the ids still in use
            # (held, queued, or awaiting RELEASED): no frame can name an
            # older claim of the same id.
            cid = self._next_id
            while cid in self._claims:
                cid = cid % 0xFFFFFFFF + 1
            self._next_id = cid % 0xFFFFFFFF + 1
            cl = Claim(self, cid, name, bname, mode, limit, lost)
            if on_lost is not None:
                cl._callbacks.append(on_lost)
            self._claims[cid] = cl
            self._send_locked("claim", cid, P.claim(cid, 0 if wait else P.CLAIM_NO_WAIT, mode, limit, bname))
            while cl._state in (_State.PENDING, _State.QUEUED) and cl.error is None:
                if cancel is not None and cancel.is_set():
                    break
                left = None if deadline is None else deadline - _now()
                if left is not None and left <= 0:
                    break
                if cancel is not None:  # an Event cannot wake the condition: look often
                    left = 0.02 if left is None else min(left, 0.02)
                self._cond.wait(left)
            state, err, result = cl._state, cl.error, cl._result
        if state is _State.HELD:
            return cl
        if err is not None:
            raise err
        if result is not None:
            raise result
        if state is _State.ENDED:
            raise SessionClosed("session closed while %r waited" % name) from self._error
        self._release(cl, None)
        if cancel is not None and cancel.is_set():
            raise ClaimCancelled("the wait for %r was cancelled" % name)
        raise LockTimeout("%r not granted within %.3fs" % (name, timeout or 0))

    def _release(self, cl: Claim, timeout: Optional[float]) -> None:
        close = False
        with self._mu:
            if cl._must_stop:
                cl._must_stop = False
                self._working.discard(cl)
                close = self._gave_up and not self._working
            if cl._state is not _State.ENDED and self._error is None:
                if not cl._releasing:
                    cl._releasing = True
                    if not self._resuming:  # else sent after its re-assertion
                        self._send_locked("release", cl.id, P.release(cl.id))
                deadline = None if timeout is None else _now() + timeout
                while cl._state is not _State.ENDED and self._error is None:
                    left = None if deadline is None else deadline - _now()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(left)
        if close:
            self._close_conn()

    def _check_open_locked(self) -> None:
        if self._error is not None:
            raise SessionClosed("session has ended: %s" % self._error) from self._error

    # -- the ring -------------------------------------------------------

    def _ask_ring(self, watch: bool, timeout: float) -> bool:
        """Send RING (and watch) and wait for its answer; True if answered."""
        with self._mu:
            if self._error is not None:
                return False
            if watch:
                self._watching = True
            n = self._ring_answers + len([r for r in self._pending if r.kind == "ring"]) + 1
            self._send_locked("ring", 0, P.ring(watch))
            end = _now() + timeout
            while self._ring_answers < n and self._error is None and not self._resuming:
                left = end - _now()
                if left <= 0:
                    return False
                self._ring_answered.wait(left)
            return self._ring_answers >= n

    def _start_routing(self) -> None:
        if self._ask_ring(True, min(self.lease, self.client.connect_timeout)) and self.client._ring.version > 0:
            self._router = _Router(self)

    # -- the reader thread ----------------------------------------------

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        buf = bytearray()
        sock = self._sock
        if sock is not None:
            sel.register(sock, selectors.EVENT_READ)
        try:
            while True:
                cause: Optional[BaseException] = None
                close_now = False
                with self._mu:
                    if self._sock is None or self._sock is not sock:
                        return
                    now = _now()
                    timeout, cause, close_now = self._tick_locked(now)
                    out = bytes(self._outbox)
                    self._outbox.clear()
                    if self._write_err is not None and cause is None:
                        cause = ConnectionLost("write failed: %s" % self._write_err, self._write_err)
                self._run_callbacks()
                if close_now:
                    self._close_conn()
                    return
                if cause is None and out:
                    try:
                        sock.sendall(out)
                    except OSError as e:
                        cause = ConnectionLost("write failed: %s" % e, e)
                if cause is None:
                    try:
                        ready = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
                        if not ready:
                            for key, _ in sel.select(timeout):
                                if key.fileobj is sock:
                                    ready = True
                                else:
                                    try:
                                        self._wake_r.recv(4096)
                                    except OSError:
                                        pass
                        if ready:
                            d = sock.recv(65536)
                            if not d:
                                cause = ConnectionLost("connection closed by the server")
                            elif self._gave_up:
                                pass  # nothing more is believed; the close waits for the work
                            else:
                                buf += d
                                with self._mu:
                                    cause = self._frames_locked(buf)
                    except socket.timeout:
                        pass  # a started TLS record not finished: read again
                    except (OSError, ValueError) as e:
                        with self._mu:
                            if self._sock is not sock:
                                return
                        cause = ConnectionLost("read failed: %s" % e, e)
                if cause is None:
                    continue
                # The connection is broken or must end.
                if self._resume_or_end(cause):
                    sel.unregister(sock)
                    buf.clear()
                    sock = self._sock
                    assert sock is not None
                    sel.register(sock, selectors.EVENT_READ)
                    continue
                return
        finally:
            sel.close()
            self._run_callbacks()
            self._close_pipe()

    def _tick_locked(self, now: float) -> Tuple[Optional[float], Optional[BaseException], bool]:
        """Timers: give-up, forced close, the next PING, the silence of a
        resumable session. Returns (select timeout, break cause, close now)."""
        L = self.lease
        if self._gave_up:
            if now >= self._close_by:
                return None, None, True
            return self._close_by - now, None, False
        if self._error is not None:
            return None, None, True
        self._expire_reasserts_locked(now)
        give_up = self._anchor + 0.8 * L
        if now > give_up:
            self._give_up_locked(now)
            return self._tick_locked(now)
        wake = give_up
        if self._ident is not None and self._pending and now - self._pending[0].sent > L / 4:
            return None, ConnectionLost("no answer for a quarter of the lease"), False
        if self._ping_sent is None:
            base = L / 4
            interval = min(max(base - 2 * self._srtt, min(0.1, base)), base)
            at = max(self._last_ping + interval, self._pong_at)
            if now >= at:
                self._seq += 1
                self._ping_sent = self._last_ping = now
                self._send_locked("ping", self._seq, P.ping(self._seq))
            else:
                wake = min(wake, at)
        if self._ident is not None and self._pending:  # after a PING just sent
            wake = min(wake, self._pending[0].sent + L / 4)
        for cl in self._claims.values():
            if cl._until is not None and cl._state is not _State.ENDED:
                wake = min(wake, cl._until)
        return max(0.0, wake - now) + 0.0005, None, False

    def _give_up_locked(self, now: float) -> None:
        """The client rule: nothing confirmed since anchor + 0.8 L. Every
        claim is lost now; the connection stays open until the work has
        stopped (each lost claim released) and at most until anchor + L."""
        err = HeartbeatTimeout("no confirmation from the server for 0.8 of the lease (%.3fs)" % (0.8 * self.lease))
        self._gave_up = True
        self._close_by = self._anchor + self.lease
        working = False
        for cl in list(self._claims.values()):
            if cl._state in (_State.HELD, _State.QUEUED) and not cl._releasing:
                cl._must_stop = True
                self._working.add(cl)
                working = True
            self._lose_locked(cl, err)
        self._error = err
        if not working:
            self._close_by = now
        self._cond.notify_all()
        self._ring_answered.notify_all()

    def _lose_locked(self, cl: Claim, err: LockLost) -> None:
        self._claims.pop(cl.id, None)
        if cl._state is _State.ENDED:
            return
        cl._state = _State.ENDED
        if cl._releasing:
            return  # the caller asked for the release: not a loss
        cl.error = err
        cl.lost.set()
        self._notify.append((cl, err))

    def _run_callbacks(self) -> None:
        with self._mu:
            todo, self._notify = self._notify, []
        for cl, err in todo:
            for fn in cl._callbacks:
                try:
                    fn(cl, err)
                except Exception:  # a callback's failure must not stop the session
                    pass

    def _end_locked(self, err: BaseException, lose: bool = True) -> None:
        """The session ends: every claim ends (lost unless closing)."""
        if self._error is None:
            self._error = err
        lost = err if isinstance(err, LockLost) else ConnectionLost(str(err), err)
        for cl in list(self._claims.values()):
            if lose:
                self._lose_locked(cl, lost)
            else:
                cl._state = _State.ENDED
        self._claims.clear()
        self._resuming = False
        self._cond.notify_all()
        self._ring_answered.notify_all()

    def _close_conn(self) -> None:
        with self._mu:
            sock, self._sock = self._sock, None
            if self._error is None:
                self._error = SessionClosed("session closed")
            self._cond.notify_all()
        self._wake()
        if sock is not None:
            _close_sock(sock)

    def _close_pipe(self) -> None:
        self._wake_r.close()
        self._wake_w.close()

    # -- frames ---------------------------------------------------------

    def _frames_locked(self, buf: bytearray) -> Optional[BaseException]:
        try:
            while True:
                fr = P.split(buf)
                if fr is None:
                    return None
                cause = self._frame_locked(*fr)
                if cause is not None:
                    return cause
        except ProtocolViolation as e:
            return e

    def _frame_locked(self, t: int, p: bytes) -> Optional[BaseException]:
        f = P.parse(t, p)
        now = _now()
        if t == P.T_ERROR:
            return SessionError(f.code, f.reason)
        if t in (P.T_PROMOTED, P.T_REVOKED):
            cl = self._claims.get(f.claim)
            if cl is not None and cl._releasing:
                return None  # valid, changes nothing: RELEASED follows
            # Valid only for a claim answered on this connection (a
            # re-assertion not yet answered has no QUEUED here yet).
            if cl is None or cl._until is not None or cl._state not in (
                    (_State.QUEUED,) if t == P.T_PROMOTED else (_State.QUEUED, _State.HELD)):
                raise ProtocolViolation("frame %#x for claim %d in no state to get it" % (t, f.claim))
            if t == P.T_PROMOTED:
                cl._state, cl.token = _State.HELD, f.value
            else:
                self._lose_locked(cl, Revoked(f.code, f.reason))
            self._cond.notify_all()
            return None
        if t == P.T_MEMBER:
            self._members.append(f)
            return None
        if t == P.T_RINGEND and f.flags & P.RINGEND_PUSHED:
            if not self._watching:
                raise ProtocolViolation("pushed ring without a watch")
            self._ring_end_locked(f)
            return None
        # An answer: it must fit the oldest unanswered request.
        if not self._pending:
            raise ProtocolViolation("answer %#x with no request unanswered" % t)
        req = self._pending.popleft()
        ok = {
            P.T_PONG: req.kind == "ping" and req.key == f.value,
            P.T_GRANTED: req.kind in ("claim", "reassert") and req.key == f.claim,
            P.T_QUEUED: req.kind in ("claim", "reassert") and req.key == f.claim,
            P.T_BUSY: req.kind in ("claim", "reassert") and req.key == f.claim,
            P.T_REFUSED: req.kind in ("claim", "reassert") and req.key == f.claim,
            P.T_RELEASED: req.kind == "release" and req.key == f.claim,
            P.T_RINGEND: req.kind == "ring",
        }.get(t, False)
        if not ok:
            raise ProtocolViolation("answer %#x does not fit the request %s %d" % (t, req.kind, req.key))
        self._anchor = max(self._anchor, req.sent)
        if t == P.T_PONG:
            rtt = now - req.sent
            self._srtt = rtt if self._srtt == 0 else 0.8 * self._srtt + 0.2 * rtt
            self._ping_sent, self._pong_at = None, now
            return None
        if t == P.T_RINGEND:
            self._ring_end_locked(f)
            self._ring_answers += 1
            self._ring_answered.notify_all()
            return None
        if t == P.T_RELEASED:
            cl = self._claims.pop(f.claim, None)
            if cl is not None:
                cl._state = _State.ENDED
            self._cond.notify_all()
            return None
        cl = self._claims.get(f.claim)
        if req.kind == "reassert":
            return self._reassert_answer_locked(cl, f, t)
        if cl is None:
            raise ProtocolViolation("answer for unknown claim %d" % f.claim)
        if t == P.T_GRANTED:
            cl._state, cl.token = _State.HELD, f.value
        elif t == P.T_QUEUED:
            cl._state = _State.QUEUED
        else:
            cl._state = _State.ENDED
            self._claims.pop(cl.id, None)
            cl._result = Busy("%r is held" % cl.name) if t == P.T_BUSY else ClaimRefused(f.code, f.reason)
        self._cond.notify_all()
        return None

    def _ring_end_locked(self, f: P.Frame) -> None:
        members, self._members = self._members, []
        if f.count != len(members):
            raise ProtocolViolation("RINGEND count %d after %d MEMBER frames" % (f.count, len(members)))
        self.client._ring.set(f.value, P.members_list(members))

    # -- resuming -------------------------------------------------------

    def _reassert_answer_locked(self, cl: Optional[Claim], f: P.Frame, t: int) -> Optional[BaseException]:
        if cl is None:
            raise ProtocolViolation("answer for unknown claim %d" % f.claim)
        if cl._state is _State.ENDED or cl.error is not None:
            # Lost meanwhile (its give-up passed): a grant is released at once.
            if t in (P.T_GRANTED, P.T_QUEUED):
                cl._releasing = True
                self._claims[cl.id] = cl
                self._send_locked("release", cl.id, P.release(cl.id))
            return None
        if t == P.T_GRANTED:
            if cl.token and f.value != cl.token:
                raise ProtocolViolation("re-assertion granted with token %d, held %d" % (f.value, cl.token))
            cl._state, cl.token = _State.HELD, f.value
        elif t == P.T_QUEUED and cl._state is _State.QUEUED:
            pass
        elif t == P.T_REFUSED and f.code == Code.REASSERT_REFUSED and cl._origin_idx + 1 < len(cl._origins):
            cl._origin_idx += 1  # a cut-off re-assertion may have moved it there
            self._send_reassert_locked(cl)
            return None
        elif t == P.T_REFUSED and f.code in (Code.NOT_OWNER, Code.STALE_RING, Code.SHUTTING_DOWN):
            return _Fresh(f.code, f.reason)
        else:
            err = ReassertRefused("re-assertion of %r refused after a broken connection" % cl.name,
                                  ClaimRefused(f.code, f.reason) if t == P.T_REFUSED else None)
            self._lose_locked(cl, err)
            if t == P.T_QUEUED:  # a held claim answered with a queue place: leave it
                cl._releasing = True
                self._claims[cl.id] = cl  # until RELEASED
                self._send_locked("release", cl.id, P.release(cl.id))
            self._cond.notify_all()
            return None
        cl._until = None
        assert self._ident is not None
        cl._origins, cl._origin_idx = [self._ident], 0
        if cl._releasing:
            self._send_locked("release", cl.id, P.release(cl.id))
        self._cond.notify_all()
        return None

    def _send_reassert_locked(self, cl: Claim) -> None:
        sid, secret, node = cl._origins[cl._origin_idx]
        token = cl.token if cl._state is _State.HELD else 0
        self._send_locked("reassert", cl.id, P.reassert(cl.id, cl.mode, cl.limit, cl._bname, token,
                                                        self._ring_version, sid, secret, node))

    def _expire_reasserts_locked(self, now: float) -> None:
        for cl in list(self._claims.values()):
            if cl._until is not None and now > cl._until and cl._state is not _State.ENDED:
                self._lose_locked(cl, NotResumed("%r not re-asserted before its give-up" % cl.name))
                self._claims[cl.id] = cl  # its answer may still come: released then
                self._cond.notify_all()

    def _resume_or_end(self, cause: BaseException) -> bool:
        """After a break: resume (True: read the new connection) or end the
        session, telling the work before the connection is closed."""
        with self._mu:
            resumable = (self._ident is not None and not self._closing and self._error is None
                         and (isinstance(cause, (ConnectionLost, _Fresh))
                              or (isinstance(cause, SessionError) and cause.code in (Code.SHUTTING_DOWN, Code.NOT_OWNER))))
            if not resumable:
                if self._error is None:
                    if isinstance(cause, ProtocolViolation):
                        err: LockLost = ConnectionLost("protocol violation: %s" % cause, cause)
                    elif isinstance(cause, LockLost):
                        err = cause
                    else:
                        err = ConnectionLost(str(cause), cause)
                    self._end_locked(err)
                    self._error = cause if isinstance(cause, (ServerError, ProtocolViolation)) else err
        if not resumable:
            self._run_callbacks()  # the work is told before the close
            self._close_conn()
            return False
        return self._resume(cause)

    def _resume(self, cause: BaseException) -> bool:
        with self._mu:
            old = self._ident
            assert old is not None
            give_up = self._anchor + 0.8 * self.lease
            cut = {r.key for r in self._pending if r.kind == "reassert"}
            for r in self._pending:
                if r.kind == "claim":
                    cl = self._claims.get(r.key)
                    if cl is not None:  # its answer is lost with the connection
                        self._lose_locked(cl, ConnectionLost("connection broke before the claim was answered", cause))
            for cl in self._claims.values():
                if cl._until is None:
                    cl._until, cl._origins, cl._origin_idx = give_up, [old], 0
                elif cl.id in cut and old not in cl._origins:
                    cl._origins.insert(0, old)
                    cl._origin_idx = 0
                elif cl.id in cut:
                    cl._origin_idx = 0
            self._pending.clear()
            self._members = []
            self._resuming = True
            self._ring_answered.notify_all()
            sock, self._sock = self._sock, None
            end = max([give_up] + [c._until for c in self._claims.values() if c._until is not None])
            addrs = list(dict.fromkeys([self._addr] + self._addrs + self.client.addresses
                                       + self.client._ring.known_addrs()))
            first = 1 if len(addrs) > 1 and not isinstance(cause, _Fresh) else 0
        self._run_callbacks()
        if sock is not None:
            _close_sock(sock)
        backoff = 0.01
        last: BaseException = cause
        attempt = 0
        if isinstance(cause, _Fresh):
            self._closed_ev.wait(min(backoff, max(0.0, end - _now())))
        while True:
            with self._mu:
                self._expire_reasserts_locked(_now())
                if self._closing or self._error is not None:
                    self._resuming = False
                    self._cond.notify_all()
                    return False
                if _now() >= end:
                    self._end_locked(NotResumed("session not resumed before the give-up: %s" % last, last))
                    return False
                # An attempt lasts at most until the next claim's give-up,
                # so that its loss is told on time.
                until = min([end] + [c._until for c in self._claims.values()
                                     if c._until is not None and c._state is not _State.ENDED])
            self._run_callbacks()
            addr = addrs[(first + attempt) % len(addrs)]
            attempt += 1
            try:
                sock, w, sent = self._dial(addr, True, max(until, _now() + 0.01))
            except (ConnectError, OSError, ProtocolViolation, SessionError) as e:
                last = e
                if isinstance(e, ServerError) and not e.temporary:
                    with self._mu:
                        self._end_locked(NotResumed("session not resumed: %s" % e, e))
                    self._run_callbacks()
                    return False
                if attempt % len(addrs) == 0 or not isinstance(e, ConnectError):
                    self._closed_ev.wait(min(random.uniform(0.5, 1.0) * backoff, max(0.0, end - _now())))
                    backoff = min(2 * backoff, 1.0, self.lease / 8 + 0.01)
                continue
            with self._mu:
                if self._closing or self._error is not None:
                    _close_sock(sock)
                    return False
                self._install_conn(addr, sock, w, sent)
                for cid in sorted(self._claims):
                    cl = self._claims[cid]
                    if cl._state is _State.ENDED:
                        self._claims.pop(cid)  # lost: its kept session drops it
                        continue
                    self._send_reassert_locked(cl)
                if self._watching:
                    self._send_locked("ring", 0, P.ring(True))
                self._resuming = False
                self._cond.notify_all()
            self._run_callbacks()
            return True


class _Fresh(BaseException):
    """A re-assertion answered 'again' (0x03, 0x05): resume on a fresh session."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__("re-assertion to be made again (%#x): %s" % (code, reason))


def _close_sock(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _Router:
    """Sends the claims of a session to their names' owner nodes, each on a
    session of its own with that node, or on the front session (whose node
    relays) when no owner is known or reachable. The ring is advice: a
    stale view costs one relay, never a wrong grant."""

    def __init__(self, front: Session) -> None:
        self.front = front
        self.mu = threading.Lock()
        self.subs: Dict[str, Session] = {}
        self.closed = False

    def session_for(self, name: str) -> Session:
        c = self.front.client
        oid, addr = c._ring.owner(name)
        if oid is None or not addr or addr == self.front.address:
            return self.front
        with self.mu:
            s = self.subs.get(oid)
            if s is not None and (s.error is not None or s.address != addr):
                self.subs.pop(oid)
                s = None
            if s is not None or self.closed:
                return s or self.front
        f = self.front
        s = Session(c, f.lease, f._want_resumable, f.label, [addr] + [a for a in c.addresses if a != addr])
        try:
            s._addrs = [addr]
            s._open()
        except (ConnectError, OSError, ServerError):
            c._ring.mark_down(oid)
            s.close()
            return self.front
        s._addrs = [addr] + [a for a in c.addresses if a != addr]  # a resume may go anywhere
        with self.mu:
            old = self.subs.get(oid)
            if self.closed or (old is not None and old.error is None):
                keep = old or self.front
            else:
                self.subs[oid] = s
                return s
        s.close()
        return keep

    def claim(self, name: str, mode: Mode, limit: int, wait: bool, timeout: Optional[float],
              on_lost: Optional[OnLost], lost: Optional[threading.Event],
              cancel: Optional[threading.Event]) -> Claim:
        for attempt in range(2):
            s = self.session_for(name)
            try:
                return s._claim_here(name, mode, limit, wait, timeout, on_lost, lost, cancel)
            except ClaimRefused as e:
                if e.code != Code.NOT_OWNER or attempt:
                    raise
                self.front._ask_ring(False, min(self.front.lease, 2.0))  # the ring moved: ask again
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self.mu:
            self.closed = True
            subs, self.subs = list(self.subs.values()), {}
        for s in subs:
            s.close()


class Lock:
    """A lock for a ``with`` block; made by :meth:`Client.lock`.

    ``lost`` is a :class:`threading.Event` set when the lock is lost while
    the block runs; ``token`` is the fencing token once entered; ``claim``
    and ``session`` are the objects underneath.
    """

    def __init__(self, client: Client, name: str, lease: Optional[float], mode: Mode, limit: int,
                 wait: bool, timeout: Optional[float], resumable: bool, on_lost: Optional[OnLost]) -> None:
        P.check_name(name)
        self.client, self.name, self.lease = client, name, lease
        self.mode, self.limit, self.wait, self.timeout = mode, limit, wait, timeout
        self.resumable, self.on_lost = resumable, on_lost
        self.lost = threading.Event()
        self.session: Optional[Session] = None
        self.claim: Optional[Claim] = None

    @property
    def token(self) -> int:
        return self.claim.token if self.claim is not None else 0

    def __enter__(self) -> int:
        self.lost.clear()
        s = self.client.session(lease=self.lease, resumable=self.resumable)
        try:
            self.claim = s.claim(self.name, mode=self.mode, limit=self.limit, wait=self.wait,
                                 timeout=self.timeout, on_lost=self.on_lost, _lost=self.lost)
        except BaseException:
            s.close()
            raise
        self.session = s
        return self.claim.token

    def __exit__(self, *exc: object) -> None:
        s, cl = self.session, self.claim
        self.session = None
        try:
            if cl is not None:
                cl.release()
        finally:
            if s is not None:
                s.close()
