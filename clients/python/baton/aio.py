"""An asyncio flavour of the client: the blocking client run in threads.

::

    from baton.aio import AsyncClient

    client = AsyncClient("127.0.0.1:7070", lease=10)
    lk = client.lock("nightly-import")
    async with lk as token:
        await run_import(token, lost=lk.lost)   # lk.lost: an asyncio.Event

Cancelling a task that waits for a claim makes the claim leave the queue
(a grant that raced the cancellation is released). Each waiting claim
occupies a thread of the event loop's default executor while it waits:
for many waiting claims at once, give the loop a larger executor.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from typing import Any, List, Optional, Union

from .client import Claim, Client, Election, Holder, Session, Watch, _LeaderFilter
from .errors import ClaimRefused, Code, Revoked

__all__ = ["AsyncClient", "AsyncSession", "AsyncLock", "AsyncWatch", "AsyncElection", "AsyncObserver"]


async def _in_thread(fn: Any, *args: Any, **kw: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kw))


class AsyncClient:
    """The asyncio counterpart of :class:`baton.Client` (same arguments)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.client = Client(*args, **kw)

    async def session(self, **kw: Any) -> "AsyncSession":
        """Open a session (arguments of :meth:`baton.Client.session`)."""
        return AsyncSession(await _in_thread(self.client.session, **kw))

    def lock(self, name: str, **kw: Any) -> "AsyncLock":
        """A lock for ``async with`` (arguments of :meth:`baton.Client.lock`)."""
        return AsyncLock(self, name, kw)


class AsyncSession:
    """The asyncio counterpart of :class:`baton.Session`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def claim(self, name: str, **kw: Any) -> Claim:
        """Claim ``name`` (arguments of :meth:`baton.Session.claim`)."""
        cancel = threading.Event()
        fut = asyncio.ensure_future(_in_thread(self.session.claim, name, cancel=cancel, **kw))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancel.set()  # the claim leaves the queue within a few ms
            try:
                cl = await fut
            except BaseException:
                pass
            else:
                await _in_thread(cl.release)  # granted just before the cancellation
            raise

    async def watch(self, name: str) -> "AsyncWatch":
        """Watch ``name``'s holders (:meth:`baton.Session.watch`); iterate
        with ``async for``."""
        return AsyncWatch(await _in_thread(self.session.watch, name))

    def election(self, name: str) -> "AsyncElection":
        """The election on ``name`` (:meth:`baton.Session.election`)."""
        return AsyncElection(self, self.session.election(name))

    async def close(self) -> None:
        await _in_thread(self.session.close)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncLock:
    """A lock for ``async with``; ``lost`` is an :class:`asyncio.Event`
    set (on the loop) the moment the lock is lost."""

    def __init__(self, client: AsyncClient, name: str, kw: dict) -> None:
        self.client, self.name, self.kw = client, name, kw
        self.lost: Optional[asyncio.Event] = None
        self.session: Optional[AsyncSession] = None
        self.claim: Optional[Claim] = None

    async def __aenter__(self) -> int:
        loop = asyncio.get_running_loop()
        self.lost = asyncio.Event()
        lost = self.lost
        user_cb = self.kw.pop("on_lost", None)

        def on_lost(cl: Claim, err: BaseException) -> None:
            loop.call_soon_threadsafe(lost.set)
            if user_cb is not None:
                user_cb(cl, err)

        opts = {k: self.kw.pop(k) for k in ("lease", "resumable") if k in self.kw}
        s = await self.client.session(**opts)
        try:
            self.claim = await s.claim(self.name, on_lost=on_lost, **self.kw)
        except BaseException:
            await s.close()
            raise
        self.session = s
        return self.claim.token

    async def __aexit__(self, *exc: object) -> None:
        s, cl, self.session = self.session, self.claim, None
        try:
            if cl is not None:
                await _in_thread(cl.release)
        finally:
            if s is not None:
                await s.close()





def _waker(loop: asyncio.AbstractEventLoop, ev: asyncio.Event) -> Any:
    def wake() -> None:  # on the session's thread, with its lock held
        try:
            loop.call_soon_threadsafe(ev.set)
        except RuntimeError:
            pass  # the loop has closed
    return wake


class AsyncWatch:
    """The asyncio counterpart of :class:`baton.Watch`: ``async for
    holders in watch``; ``close()`` ends it."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self._ev = asyncio.Event()
        watch._listener = _waker(asyncio.get_running_loop(), self._ev)

    @property
    def holders(self) -> Optional[List[Holder]]:
        return self.watch.holders

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> List[Holder]:
        while True:
            self._ev.clear()
            st = self.watch._poll()
            if st is not None:
                return st
            await self._ev.wait()

    def close(self) -> None:
        self.watch.close()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncElection:
    """The asyncio counterpart of :class:`baton.Election`."""

    def __init__(self, session: AsyncSession, election: Election) -> None:
        self.session = session
        self.election = election
        self.lost: Optional[asyncio.Event] = None

    @property
    def is_leader(self) -> bool:
        return self.election.is_leader

    @property
    def token(self) -> int:
        return self.election.token

    async def campaign(self, value: Union[bytes, str] = b"") -> int:
        """Wait to lead (cancel the task to stop waiting); returns the
        fencing token. ``lost`` (an :class:`asyncio.Event`) is set if the
        leadership is lost."""
        e = self.election
        if e.claim is not None and e.claim.error is None and e.claim.held:
            raise RuntimeError("already leading; resign first")
        loop = asyncio.get_running_loop()
        lost = self.lost = asyncio.Event()

        def on_lost(cl: Claim, err: BaseException) -> None:
            loop.call_soon_threadsafe(lost.set)

        e.claim = await self.session.claim(e.name, value=value, on_lost=on_lost)
        return e.claim.token

    async def proclaim(self, value: Union[bytes, str]) -> None:
        await _in_thread(self.election.proclaim, value)

    async def resign(self) -> None:
        await _in_thread(self.election.resign)

    async def leader(self) -> Optional[Holder]:
        return await _in_thread(self.election.leader)

    def observe(self) -> "AsyncObserver":
        """``async for leader in election.observe()``: the leader (None:
        nobody leads) now and after each change."""
        return AsyncObserver(self.session.session, self.election.name)


class AsyncObserver:
    """The asyncio counterpart of :class:`baton.Observer`."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self._filter = _LeaderFilter()
        self._watch: Optional[AsyncWatch] = None
        self._closed = False
        self._backoff = 0.0

    def __aiter__(self) -> "AsyncObserver":
        return self

    async def __anext__(self) -> Optional[Holder]:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._watch is None:
                try:
                    w = AsyncWatch(await _in_thread(self.session.watch, self.name))
                except ClaimRefused as e:
                    if not e.temporary:
                        raise
                    await self._pause()
                    continue
                if self._closed:
                    w.close()
                    raise StopAsyncIteration
                self._watch = w
            try:
                st = await self._watch.__anext__()
            except Revoked as e:
                if e.code >= 0x10:
                    raise
                self._watch = None  # watch again from the current state
                if e.code != Code.SLOW_WATCHER:
                    await self._pause()
                continue
            self._backoff = 0.0
            ok, leader = self._filter.feed(self._watch.watch._skip_to_latest(st))
            if ok:
                return leader

    async def _pause(self) -> None:
        """Wait before watching again: 50 ms, doubling to 1 s."""
        self._backoff = min(1.0, 2 * self._backoff) if self._backoff else 0.05
        await asyncio.sleep(random.uniform(0.5, 1.0) * self._backoff)

    def close(self) -> None:
        self._closed = True
        w, self._watch = self._watch, None
        if w is not None:
            w.close()

    async def __aenter__(self) -> "AsyncObserver":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
