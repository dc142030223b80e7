"""The asyncio flavour against a real server."""

from __future__ import annotations

import asyncio

import pytest

import baton
from baton.aio import AsyncClient
from conftest import TIMEOUT


def test_async_lock_and_cancelled_wait_leaves_the_queue(server, name):
    async def main():
        c = AsyncClient(server.addr, lease=2)
        lk = c.lock(name)
        async with lk as token:
            assert token > 0 and not lk.lost.is_set()
            async with await c.session() as s:
                task = asyncio.ensure_future(s.claim(name))
                await asyncio.sleep(0.2)
                assert not task.done()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(task, TIMEOUT)
            assert server.force_release(name) == 200
            await asyncio.wait_for(lk.lost.wait(), TIMEOUT)
            assert isinstance(lk.claim.error, baton.Revoked)
        # The cancelled claim left the queue: the lock is free.
        async with c.lock(name, wait=False) as t2:
            assert t2 > token

    asyncio.run(main())


def test_cancel_event_on_the_blocking_client(server, name):
    import threading
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b:
        a.claim(name)
        ev = threading.Event()
        threading.Timer(0.1, ev.set).start()
        with pytest.raises(baton.ClaimCancelled):
            b.claim(name, cancel=ev)
