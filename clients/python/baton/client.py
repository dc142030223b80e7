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
from typing import Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

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

__all__ = ["Client", "Session", "Claim", "Lock", "Mode", "Holder", "Watch", "Election", "Observer"]

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
        self._value: Optional[bytes] = None  # None: a claim without a value

    @property
    def value(self) -> Optional[bytes]:
        """The claim's value (the latest proclaimed), or None for a claim
        made without one."""
        return self._value

    def proclaim(self, value: Union[bytes, str], timeout: Optional[float] = None) -> None:
        """Set a new value on the claim (PROCLAIM): watchers of a held
        claim's name are told before this returns. ``value`` is bytes (or
        str, sent as UTF-8) of at most 1024 bytes.

        :raises ValueError: the value is longer than 1024 bytes (nothing sent).
        :raises NotSupported: the server has no values.
        :raises LockLost: the claim has ended (it is not in use on the server).
        """
        self.session._proclaim(self, P.check_value(value), timeout)

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
    __slots__ = ("kind", "key", "sent", "box")

    def __init__(self, kind: str, key: int, sent: float) -> None:
        self.kind, self.key, self.sent = kind, key, sent
        self.box: Optional[List[Optional[BaseException]]] = None  # a PROCLAIM's outcome


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
        self._values = False  # the WELCOME granted values and watches
        self._max_frame = P.MAX_FRAME_LEN
        self._watches: Dict[int, "Watch"] = {}
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

    @property
    def values(self) -> bool:
        """Whether the server offers values, watches and elections on this
        session (it answered HELLO's values flag)."""
        return self._values

    def claim(self, name: str, *, mode: Mode = Mode.EXCLUSIVE, limit: int = 0, wait: bool = True,
              timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
              cancel: Optional[threading.Event] = None, value: Union[bytes, str, None] = None,
              _lost: Optional[threading.Event] = None) -> Claim:
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
        :param value: a value for the claim (bytes, or str as UTF-8; at
            most 1024 bytes), shown to the name's watchers with its holder,
            changed by :meth:`Claim.proclaim`, gone when the claim ends.
        :raises ClaimRefused: the server refused the claim (the code says why).
        :raises LockLost: the session ended while the claim waited.
        :raises NotSupported: a value, and the server has no values.
        """
        bvalue = None if value is None else P.check_value(value)
        if self._router is not None:
            return self._router.claim(name, mode, limit, wait, timeout, on_lost, _lost, cancel, bvalue)
        return self._claim_here(name, mode, limit, wait, timeout, on_lost, _lost, cancel, bvalue)

    def watch(self, name: str) -> "Watch":
        """Watch the holders of ``name`` without claiming it. Returns once
        the server has sent the current holders; then iterate the
        :class:`Watch` for the holders after each change.

        :raises NotSupported: the server has no watches.
        :raises ClaimRefused: the server refused the watch (a bad name,
            the access list, too many claims on the session).
        """
        bname = P.check_name(name)
        if self._router is not None:
            return self._router.watch(name, bname)
        return self._watch_here(name, bname)

    def election(self, name: str) -> "Election":
        """The election on ``name``: :meth:`Election.campaign` to lead,
        :meth:`Election.observe` to follow who leads."""
        return Election(self, name)

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

    def _dial(self, addr: str, resumable: bool, deadline: float,
              values: bool = True) -> Tuple[socket.socket, P.Welcome, float]:
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
            flags = (P.HELLO_RESUMABLE if resumable else 0) | (P.HELLO_VALUES if values else 0)
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
                sock, w, sent = self._dial_falling_back(addr, deadline)
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

    def _dial_falling_back(self, addr: str, deadline: float) -> Tuple[socket.socket, P.Welcome, float]:
        """Ask for values (and resumption, if wanted); a server that refuses
        a flag (ERROR 0x1e) is asked again without values, then without
        resumption: it predates them."""
        tries = [(self._want_resumable, True), (self._want_resumable, False)]
        if self._want_resumable:
            tries.append((False, False))
        for i, (resumable, values) in enumerate(tries):
            try:
                return self._dial(addr, resumable, deadline, values)
            except SessionError as e:
                if e.code != Code.UNSUPPORTED_FEATURE or i == len(tries) - 1:
                    raise
        raise AssertionError("unreachable")

    def _install_conn(self, addr: str, sock: socket.socket, w: P.Welcome, sent: float) -> None:
        self._sock, self._addr = sock, addr
        self.id, self.node = w.session, w.node
        self._welcome_flags = w.flags
        self._values = bool(w.flags & P.WELCOME_VALUES)
        self._max_frame = P.MAX_VALUES_FRAME_LEN if self._values else P.MAX_FRAME_LEN
        self._ring_version = w.ring
        self._ident = (w.session, w.secret, w.node.encode()) if w.flags & P.WELCOME_RESUMABLE else None
        self._anchor = self._last_ping = sent
        self._ping_sent = None
        self._pending.clear()
        self._outbox.clear()
        self._write_err = None

    # -- sending --------------------------------------------------------

    def _send_locked(self, kind: str, key: int, data: bytes) -> _Req:
        """Write one request and queue its answer; the anchor candidate is
        taken before the write (never later than the send). mu is held."""
        now = _now()
        req = _Req(kind, key, now)
        self._pending.append(req)
        if self._write_err is not None or self._sock is None:
            return req
        if self.client.tls is not None:
            self._outbox += data  # one thread does all of an SSL socket's I/O
            self._wake()
            return req
        try:
            self._sock.sendall(data)
        except OSError as e:
            self._write_err = e
            self._wake()
        return req

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already awake, or the session is over

    # -- claims ---------------------------------------------------------

    def _claim_here(self, name: str, mode: Mode, limit: int, wait: bool, timeout: Optional[float],
                    on_lost: Optional[OnLost], lost: Optional[threading.Event],
                    cancel: Optional[threading.Event] = None, value: Optional[bytes] = None) -> Claim:
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
            if value is not None:
                self._check_values_locked()
            cid = self._alloc_id_locked()
            cl = Claim(self, cid, name, bname, mode, limit, lost)
            cl._value = value
            if on_lost is not None:
                cl._callbacks.append(on_lost)
            self._claims[cid] = cl
            self._send_locked("claim", cid, P.claim(cid, 0 if wait else P.CLAIM_NO_WAIT, mode, limit, bname, value))
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

    def _check_values_locked(self) -> None:
        if not self._values:
            raise NotSupported("values, watches and elections are not supported by this server (%s)" % self._addr)

    def _alloc_id_locked(self) -> int:
        # Ids count up, wrapping at 2^32, and skip the ids still in use
        # (claims held, queued or awaiting RELEASED, and watches): no
        # frame can name an older claim or watch of the same id.
        cid = self._next_id
        while cid in self._claims or cid in self._watches:
            cid = cid % 0xFFFFFFFF + 1
        self._next_id = cid % 0xFFFFFFFF + 1
        return cid

    # -- values and watches ---------------------------------------------

    def _proclaim(self, cl: Claim, value: bytes, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else _now() + timeout
        with self._mu:
            while self._resuming and self._error is None:
                self._cond.wait()
            self._check_values_locked()
            if cl._state is _State.ENDED or cl._releasing or cl.error is not None or self._error is not None:
                raise cl.error or LockLost("claim %r has ended" % cl.name)
            # Re-asserted with the new value should the connection break.
            cl._value = value
            req = self._send_locked("proclaim", cl.id, P.proclaim(cl.id, value))
            req.box = []
            while not req.box and self._error is None:
                left = None if deadline is None else deadline - _now()
                if left is not None and left <= 0:
                    raise LockTimeout("no PROCLAIMED for %r within %.3fs" % (cl.name, timeout or 0))
                self._cond.wait(left)
            err = req.box[0] if req.box else (cl.error or SessionClosed("session has ended: %s" % self._error))
        if err is not None:
            raise err

    def _watch_here(self, name: str, bname: bytes) -> "Watch":
        with self._mu:
            while self._resuming and self._error is None:
                self._cond.wait()
            self._check_open_locked()
            self._check_values_locked()
            wid = self._alloc_id_locked()
            w = Watch(self, wid, name, bname)
            self._watches[wid] = w
            self._send_locked("watch", wid, P.watch(wid, bname))
            while not w._answered and not w._ended:
                self._cond.wait()
            if w._ended:
                raise w._error or SessionClosed("session has ended: %s" % self._error)
        return w

    def _unwatch(self, w: "Watch") -> None:
        with self._mu:
            if w._closing or self._watches.get(w.id) is not w:
                return
            w._closing = True
            w._cond.notify_all()
            if self._error is None and not self._resuming:
                self._send_locked("unwatch", w.id, P.release(w.id))
            else:
                self._watches.pop(w.id, None)

    def _end_watches_locked(self, err: BaseException) -> None:
        for w in list(self._watches.values()):
            w._end_locked(err)
        self._watches.clear()

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
        self._fail_boxes_locked(err)
        self._end_watches_locked(err)
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
        self._fail_boxes_locked(lost if lose else err)
        self._end_watches_locked(lost if lose else err)
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
                fr = P.split(buf, self._max_frame)
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
        if t == P.T_REVOKED and f.claim in self._watches:
            w = self._watches[f.claim]
            if w._closing:
                return None  # valid, changes nothing: RELEASED follows
            if not w._answered:
                raise ProtocolViolation("REVOKED for watch %d before its synced" % f.claim)
            self._watches.pop(f.claim)
            w._end_locked(Revoked(f.code, f.reason))
            return None
        if t == P.T_CHANGE:
            w = self._watches.get(f.claim)
            if w is None:
                raise ProtocolViolation("CHANGE for %d, which is not a watch" % f.claim)
            if f.kind != P.CHANGE_SYNCED or w._answered:
                w._change_locked(f)
                return None
            # The first synced answers the WATCH: fall through.
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
            P.T_REFUSED: req.kind in ("claim", "reassert", "proclaim", "watch") and req.key == f.claim,
            P.T_RELEASED: req.kind in ("release", "unwatch") and req.key == f.claim,
            P.T_RINGEND: req.kind == "ring",
            P.T_PROCLAIMED: req.kind == "proclaim" and req.key == f.claim,
            P.T_CHANGE: req.kind == "watch" and req.key == f.claim,
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
        if req.kind in ("proclaim", "watch", "unwatch"):
            self._watch_answer_locked(req, f, t)
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

    def _watch_answer_locked(self, req: _Req, f: P.Frame, t: int) -> None:
        if req.kind == "proclaim":
            cl = self._claims.get(f.claim)
            if t == P.T_REFUSED:
                err: Optional[BaseException] = ClaimRefused(f.code, f.reason)
            elif f.status != 0:
                err = (cl.error if cl is not None else None) or LockLost("the claim has ended", None)
            else:
                err = None
            if req.box is not None:
                req.box.append(err)
        elif req.kind == "watch":
            w = self._watches.get(f.claim)
            if w is None:
                raise ProtocolViolation("answer for unknown watch %d" % f.claim)
            w._answered = True
            if t == P.T_REFUSED:
                self._watches.pop(f.claim)
                w._end_locked(ClaimRefused(f.code, f.reason))
            else:
                w._change_locked(f)
        else:  # unwatch
            w = self._watches.pop(f.claim, None)
            if w is not None:
                w._end_locked(None)
        self._cond.notify_all()

    def _fail_boxes_locked(self, err: BaseException) -> None:
        """Requests cut off by a break or the session's end: a PROCLAIM
        waiting for its answer is told."""
        for r in self._pending:
            if r.box is not None and not r.box:
                r.box.append(err)

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
        value = cl._value if self._values else None
        self._send_locked("reassert", cl.id, P.reassert(cl.id, cl.mode, cl.limit, cl._bname, token,
                                                        self._ring_version, sid, secret, node, value))

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
            self._fail_boxes_locked(ConnectionLost("connection broke before the answer; the claim is "
                                                   "re-asserted with the new value", cause))
            self._pending.clear()
            for w in list(self._watches.values()):
                if w._closing:
                    self._watches.pop(w.id)
                    w._end_locked(None)
                else:
                    w._reset_locked(rewatch=True)  # watched again on the new connection
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
                sock, w, sent = self._dial(addr, True, max(until, _now() + 0.01), self._values)
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
                for wid in sorted(self._watches):
                    if self._values:
                        self._send_locked("watch", wid, P.watch(wid, self._watches[wid]._bname))
                    else:
                        self._watches.pop(wid)._end_locked(NotSupported("the session resumed on a server without watches"))
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
              cancel: Optional[threading.Event], value: Optional[bytes] = None) -> Claim:
        for attempt in range(2):
            s = self.session_for(name)
            try:
                return s._claim_here(name, mode, limit, wait, timeout, on_lost, lost, cancel, value)
            except ClaimRefused as e:
                if e.code != Code.NOT_OWNER or attempt:
                    raise
                self.front._ask_ring(False, min(self.front.lease, 2.0))  # the ring moved: ask again
        raise AssertionError("unreachable")

    def watch(self, name: str, bname: bytes) -> "Watch":
        for attempt in range(2):
            s = self.session_for(name)
            try:
                return s._watch_here(name, bname)
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


class Holder(NamedTuple):
    """One holder of a watched name, as the server reports it."""

    token: int  #: the fencing token of its grant
    mode: Mode
    value: bytes  #: the claim's value (b"" when it has none)
    label: str  #: the holder session's label
    identity: str  #: the holder's certificate identity ("" without mutual TLS)


# A consumer that falls this many states behind skips the oldest: the
# latest state is always delivered, and memory stays bounded.
_MAX_STATES = 1024


class Watch:
    """A watch of a name's holders, made by :meth:`Session.watch`.

    Iterate it (or call :meth:`get`) for the holders, in grant order,
    after each change: the first state is the holders when the watch
    began, then one state per change as the server made it. A state is
    given only once the server says it is whole (synced). ``holders`` is
    the latest state. Iteration ends when :meth:`close` is called and
    raises the cause when the watch ends otherwise: :class:`Revoked` with
    :attr:`Code.SLOW_WATCHER` when the changes were not read fast enough
    (watch again), or the session's end.
    """

    def __init__(self, session: Session, wid: int, name: str, bname: bytes) -> None:
        self.session = session
        self.id = wid
        self.name = name
        self._bname = bname
        self._holders: List[Holder] = []
        self._synced = False
        self._answered = False
        self._closing = False
        self._ended = False
        self._error: Optional[BaseException] = None
        self._states: Deque[List[Holder]] = collections.deque(maxlen=_MAX_STATES)
        self._latest: Optional[List[Holder]] = None
        self._cond = threading.Condition(session._mu)
        self._listener: Optional[Callable[[], None]] = None  # called with mu held

    @property
    def holders(self) -> Optional[List[Holder]]:
        """The latest whole state (None before the first)."""
        with self.session._mu:
            return None if self._latest is None else list(self._latest)

    @property
    def error(self) -> Optional[BaseException]:
        """Why the watch ended, or None."""
        return self._error

    def get(self, timeout: Optional[float] = None) -> List[Holder]:
        """The next state, waiting for it at most ``timeout`` seconds
        (:class:`TimeoutError` then).

        :raises StopIteration: :meth:`close` was called.
        """
        deadline = None if timeout is None else _now() + timeout
        with self.session._mu:
            while True:
                if self._closing:
                    raise StopIteration
                if self._states:
                    return self._states.popleft()
                if self._ended:
                    raise self._error or StopIteration
                left = None if deadline is None else deadline - _now()
                if left is not None and left <= 0:
                    raise TimeoutError("no change of %r within %.3fs" % (self.name, timeout or 0))
                self._cond.wait(left)

    def _skip_to_latest(self, st: List[Holder]) -> List[Holder]:
        """The latest of st and the states already queued behind it (an
        observer wants the leader now: a release and the next grant, sent
        together, are not shown as a moment without a leader)."""
        with self.session._mu:
            if self._states and not self._closing:
                st = self._states[-1]
                self._states.clear()
        return st

    def _poll(self) -> Optional[List[Holder]]:
        """The next state without waiting, or None (asyncio)."""
        with self.session._mu:
            if self._closing:
                raise StopAsyncIteration
            if self._states:
                return self._states.popleft()
            if self._ended:
                if self._error is None:
                    raise StopAsyncIteration
                raise self._error
            return None

    def close(self) -> None:
        """End the watch (RELEASE of its id); iteration stops. Safe to call
        from any thread, more than once."""
        self.session._unwatch(self)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> List[Holder]:
        return self.get()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<Watch %d %r>" % (self.id, self.name)

    # -- from the session's thread, mu held --------------------------------

    def _wake_locked(self) -> None:
        self._cond.notify_all()
        if self._listener is not None:
            self._listener()

    def _change_locked(self, f: P.Frame) -> None:
        if self._closing or self._ended:
            return  # crossed the RELEASE
        k = f.kind
        if k == P.CHANGE_HELD:
            self._holders.append(Holder(f.value, Mode(f.mode) if f.mode in (1, 2, 3) else f.mode,
                                        f.data, f.label, f.identity))
        elif k in (P.CHANGE_VALUE, P.CHANGE_FREED):
            i = next((i for i, h in enumerate(self._holders) if h.token == f.value), -1)
            if i < 0:
                raise ProtocolViolation("CHANGE %d of token %d, which is not a holder" % (k, f.value))
            if k == P.CHANGE_VALUE:
                self._holders[i] = self._holders[i]._replace(value=f.data)
            else:
                del self._holders[i]
        elif k == P.CHANGE_SYNCED:
            self._synced = True
        else:  # reset: the whole state follows
            self._reset_locked()
            return
        if self._synced:
            self._latest = list(self._holders)
            self._states.append(list(self._holders))
            self._wake_locked()

    def _reset_locked(self, rewatch: bool = False) -> None:
        self._holders = []
        self._synced = False
        if rewatch:
            self._answered = False  # the new WATCH's synced answers it

    def _end_locked(self, err: Optional[BaseException]) -> None:
        if self._ended:
            return
        self._ended = True
        if err is not None and not self._closing:
            self._error = err
        self._wake_locked()


class Election:
    """Leader election on one name, made by :meth:`Session.election`.

    The leader is the holder of an exclusive claim on the name; its value
    (an address, say) is published to every observer with its fencing
    token. Tokens of a name only grow: pass the leader's token to what it
    writes, so that an old leader's writes are refused
    (docs/election.md).
    """

    def __init__(self, session: Session, name: str) -> None:
        P.check_name(name)
        self.session = session
        self.name = name
        self.claim: Optional[Claim] = None

    @property
    def is_leader(self) -> bool:
        """True while this candidate leads (its claim held and believed)."""
        cl = self.claim
        return cl is not None and cl.held

    @property
    def token(self) -> int:
        """The fencing token of this candidate's leadership, 0 if it never led."""
        return self.claim.token if self.claim is not None else 0

    @property
    def lost(self) -> Optional[threading.Event]:
        """Set when the leadership is lost (not by :meth:`resign`); None
        before :meth:`campaign` returned."""
        return self.claim.lost if self.claim is not None else None

    def campaign(self, value: Union[bytes, str] = b"", *, timeout: Optional[float] = None,
                 cancel: Optional[threading.Event] = None, on_lost: Optional[OnLost] = None) -> int:
        """Wait to lead, publishing ``value`` (at most 1024 bytes), and
        return the fencing token. Candidates lead in the order they came.

        :raises NotSupported: the server has no values.
        :raises LockTimeout, ClaimCancelled: as :meth:`Session.claim`.
        """
        if self.claim is not None and self.claim._state is not _State.ENDED:
            raise BatonError("this candidate is already campaigning or leading; resign first")
        self.claim = self.session.claim(self.name, value=value, timeout=timeout, cancel=cancel, on_lost=on_lost)
        return self.claim.token

    def proclaim(self, value: Union[bytes, str], timeout: Optional[float] = None) -> None:
        """Publish a new value while leading; observers are told.

        :raises NotLeader: this candidate does not lead.
        """
        cl = self.claim
        if cl is None or not cl.held:
            raise NotLeader("not the leader of %r" % self.name)
        cl.proclaim(value, timeout)

    def resign(self) -> None:
        """Stop leading: the next candidate leads. (A campaign still
        waiting stops by its ``cancel`` event or ``timeout``.)"""
        cl, self.claim = self.claim, None
        if cl is not None:
            cl.release()

    def leader(self, timeout: Optional[float] = None) -> Optional[Holder]:
        """The leader now (token, value, label, identity), or None."""
        with self.session.watch(self.name) as w:
            st = w.get(timeout)
        return st[0] if st else None

    def observe(self) -> "Observer":
        """Follow the leader: iterate the returned :class:`Observer` for
        the leader (None: no leader) now and after each change."""
        return Observer(self.session, self.name)


class _LeaderFilter:
    """What an observer delivers: a new leader, a new value of the leader,
    or no leader; never a leader with a token below one delivered (after
    a re-watch the server may show an older state)."""

    _NOTHING = object()

    def __init__(self) -> None:
        self.top = 0
        self.last: object = self._NOTHING

    def feed(self, holders: List[Holder]) -> Tuple[bool, Optional[Holder]]:
        leader = holders[0] if holders else None
        if leader is None:
            if self.last is None:
                return False, None
            self.last = None
            return True, None
        if leader.token < self.top or (leader.token == self.top and (self.last is None or self.last == leader)):
            return False, None
        self.top, self.last = leader.token, leader
        return True, leader


class Observer:
    """The leader of a name now and after each change, made by
    :meth:`Election.observe`. Iterate it: each item is the leader
    (:class:`Holder`) or None when nobody leads. A watch the server ends
    or refuses for a server condition (code below 0x10: too slow, the
    name moved) is made again, with backoff. Iteration ends at
    :meth:`close` (callable from another thread), and raises the
    session's error when it ends."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self._filter = _LeaderFilter()
        self._watch: Optional[Watch] = None
        self._closed = False
        self._mu = threading.Lock()
        self._backoff = 0.0
        self._wake = threading.Event()  # set by close(): a pause ends

    def get(self, timeout: Optional[float] = None) -> Optional[Holder]:
        """The next leader (None: no leader); :class:`TimeoutError` after ``timeout``."""
        deadline = None if timeout is None else _now() + timeout
        while True:
            with self._mu:
                if self._closed:
                    raise StopIteration
                w = self._watch
            if w is None:
                try:
                    w = self.session.watch(self.name)
                except ClaimRefused as e:
                    if not e.temporary:
                        raise
                    self._pause(deadline)
                    continue
                with self._mu:
                    if self._closed:
                        w.close()
                        raise StopIteration
                    self._watch = w
            try:
                st = w.get(None if deadline is None else max(0.0, deadline - _now()))
            except Revoked as e:
                if e.code >= 0x10:
                    raise
                with self._mu:
                    self._watch = None  # watch again: the new watch starts from the current state
                if e.code != Code.SLOW_WATCHER:
                    self._pause(deadline)
                continue
            self._backoff = 0.0
            ok, leader = self._filter.feed(w._skip_to_latest(st))
            if ok:
                return leader

    def _pause(self, deadline: Optional[float]) -> None:
        """Wait before watching again: 50 ms, doubling to 1 s."""
        self._backoff = min(1.0, 2 * self._backoff) if self._backoff else 0.05
        pause = self._backoff if deadline is None else min(self._backoff, max(0.0, deadline - _now()))
        self._wake.wait(random.uniform(0.5, 1.0) * pause)
        if deadline is not None and _now() >= deadline:
            raise TimeoutError("no leader change of %r in time" % self.name)

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Optional[Holder]:
        return self.get()

    def close(self) -> None:
        self._wake.set()
        with self._mu:
            self._closed = True
            w, self._watch = self._watch, None
        if w is not None:
            w.close()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
