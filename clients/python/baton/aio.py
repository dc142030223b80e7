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
import threading
from typing import Any, Optional

from .client import Claim, Client, Session

__all__ = ["AsyncClient", "AsyncSession", "AsyncLock"]


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



