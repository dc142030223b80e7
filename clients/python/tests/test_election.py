"""Values, watches and elections against one real `baton serve`."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading

import pytest

import baton
from baton.aio import AsyncClient
from conftest import TIMEOUT


def follow(obs: baton.Observer) -> "queue.Queue":
    """Collect an observer's leaders in a thread; an error ends the queue."""
    q: "queue.Queue" = queue.Queue()

    def run():
        try:
            for leader in obs:
                q.put(leader)
        except Exception as e:  # handed to the test
            q.put(e)

    threading.Thread(target=run, daemon=True).start()
    return q


def next_leader(q: "queue.Queue", skip_none: bool = False):
    """The next leader an observer delivered. skip_none: a moment without
    a leader between two may be seen (the release and the next grant came
    in two reads)."""
    while True:
        v = q.get(timeout=TIMEOUT)
        if isinstance(v, Exception):
            raise v
        if v is None and skip_none:
            continue
        return v


def campaign_in_thread(e: baton.Election, value: str):
    out: list = []

    def run():
        try:
            out.append(e.campaign(value))
        except Exception as ex:  # handed to the test
            out.append(ex)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_three_candidates_two_observers(server, name):
    c = baton.Client(server.addr, lease=2)
    sa, sb, sc = (c.session(label=lb) for lb in ("a", "b", "c"))
    o1, o2 = c.session(label="o1"), c.session(label="o2")
    try:
        assert sa.values, "the server did not grant values"
        obs = [o1.election(name).observe(), o2.election(name).observe()]
        qs = [follow(o) for o in obs]
        for q in qs:
            assert next_leader(q) is None  # nobody leads yet
        ea, eb, ec = sa.election(name), sb.election(name), sc.election(name)
        ta = ea.campaign("10.0.0.1:5432")
        assert ea.is_leader and ta > 0
        for q in qs:
            lead = next_leader(q)
            assert (lead.token, lead.value, lead.label) == (ta, b"10.0.0.1:5432", "a")
        tb_thread, tb = campaign_in_thread(eb, "10.0.0.2:5432")
        wait_waiters(server, name, 1)  # b queues before c
        tc_thread, tc = campaign_in_thread(ec, "10.0.0.3:5432")
        wait_waiters(server, name, 2)
        assert not tb and not tc, "a candidate led beside the leader"

        # The leader's connection closes (not a release): the next leads.
        sa._sock.shutdown(socket.SHUT_RDWR)
        tb_thread.join(TIMEOUT)
        assert isinstance(tb[0], int) and tb[0] > ta, tb
        for q in qs:
            lead = next_leader(q, skip_none=True)
            assert (lead.token, lead.value, lead.label) == (tb[0], b"10.0.0.2:5432", "b")
        assert ea.lost.wait(TIMEOUT) and not ea.is_leader

        # A proclaim reaches the observers; the token stays.
        eb.proclaim("10.0.0.22:5432")
        for q in qs:
            lead = next_leader(q)
            assert (lead.token, lead.value) == (tb[0], b"10.0.0.22:5432")
        assert eb.leader().value == b"10.0.0.22:5432"
        assert eb.claim.value == b"10.0.0.22:5432"

        # Resign: the third candidate leads, with a larger token.
        eb.resign()
        tc_thread.join(TIMEOUT)
        assert tc[0] > tb[0]
        for q in qs:
            lead = next_leader(q, skip_none=True)
            assert (lead.token, lead.value) == (tc[0], b"10.0.0.3:5432")
        with pytest.raises(baton.NotLeader):
            eb.proclaim("x")

        # No leader.
        ec.resign()
        for q in qs:
            assert next_leader(q) is None
        assert ec.leader() is None
        for o in obs:
            o.close()
        for q in qs:  # nothing more was delivered, and iteration ended
            with pytest.raises(queue.Empty):
                q.get(timeout=0.2)
    finally:
        for s in (sa, sb, sc, o1, o2):
            s.close()


def wait_waiters(server, name, n):
    from conftest import wait_for

    def check():
        try:
            return len(server.admin_get("/api/locks/" + name).get("waiters") or []) >= n
        except Exception:
            return False
    wait_for(check, "%d waiter(s) on %s" % (n, name))


def test_values_too_long_are_refused(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as s, c.session() as w:
        with pytest.raises(ValueError):
            s.election(name).campaign(b"x" * 1025)
        with pytest.raises(ValueError):
            s.claim(name, value="é" * 513)
        # The longest value goes through, in a frame over 512 bytes.
        e = s.election(name)
        e.campaign(b"v" * 1024)
        watch = w.watch(name)
        assert [h.value for h in watch.get(TIMEOUT)] == [b"v" * 1024]
        with pytest.raises(ValueError):
            e.proclaim(b"x" * 1025)
        # Past the client's check, the server refuses it (REFUSED 0x24)
        # and the claim lives on with its value.
        with pytest.raises(baton.ClaimRefused) as ei:
            s._proclaim(e.claim, b"x" * 1025, TIMEOUT)
        assert ei.value.code == baton.Code.VALUE_TOO_LONG
        assert e.is_leader
        e.proclaim("short")
        assert [h.value for h in watch.get(TIMEOUT)] == [b"short"]
        watch.close()


def test_watch_reports_holders_in_grant_order(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session(label="r1") as a, c.session(label="r2") as b, c.session() as w:
        watch = w.watch(name)
        assert watch.get(TIMEOUT) == [] and watch.holders == []
        r1 = a.claim(name, mode=baton.Mode.SHARED, value="one")
        st = watch.get(TIMEOUT)
        assert [(h.token, h.mode, h.value, h.label) for h in st] == [(r1.token, baton.Mode.SHARED, b"one", "r1")]
        r2 = b.claim(name, mode=baton.Mode.SHARED)  # no value: reported empty
        assert [(h.token, h.value) for h in watch.get(TIMEOUT)] == [(r1.token, b"one"), (r2.token, b"")]
        r1.release()
        assert [h.token for h in watch.get(TIMEOUT)] == [r2.token]
        watch.close()
        with pytest.raises(StopIteration):
            watch.get(TIMEOUT)
        # The watch's id is free again, and the session serves on.
        assert w.claim(name + "-other").held


def test_async_election(server, name):
    async def main():
        c = AsyncClient(server.addr, lease=2)
        async with await c.session() as s1, await c.session() as s2:
            obs = s2.election(name).observe()
            it = obs.__aiter__()
            assert await asyncio.wait_for(it.__anext__(), TIMEOUT) is None
            e = s1.election(name)
            token = await e.campaign("async-1")
            lead = await asyncio.wait_for(it.__anext__(), TIMEOUT)
            assert (lead.token, lead.value) == (token, b"async-1")
            await e.proclaim("async-2")
            assert (await asyncio.wait_for(it.__anext__(), TIMEOUT)).value == b"async-2"
            assert (await e.leader()).value == b"async-2"
            await e.resign()
            assert await asyncio.wait_for(it.__anext__(), TIMEOUT) is None
            obs.close()
            with pytest.raises(StopAsyncIteration):
                await it.__anext__()

    asyncio.run(main())


def test_resumable_sessions_watch_again_and_keep_the_value(server, name):
    c = baton.Client(server.addr, lease=2)
    s1, s2 = c.session(resumable=True, label="lead"), c.session(resumable=True)
    try:
        assert s1.resumable and s2.resumable
        e = s1.election(name)
        token = e.campaign("v1")
        obs = s2.election(name).observe()
        q = follow(obs)
        lead = next_leader(q)
        assert (lead.token, lead.value) == (token, b"v1")
        # The observer's connection breaks: it resumes and watches again;
        # the same leader is not given twice.
        id2 = s2.id
        s2._sock.shutdown(socket.SHUT_RDWR)
        # The leader's breaks: its claim is re-asserted with its value.
        s1._sock.shutdown(socket.SHUT_RDWR)
        from conftest import wait_for
        wait_for(lambda: s2.id != id2 and not s2._resuming and not s1._resuming and s1.error is None,
                 "both sessions resumed")
        assert e.is_leader and e.token == token and not e.lost.is_set()
        assert e.leader().value == b"v1"
        e.proclaim("v2")
        lead = next_leader(q)
        assert (lead.token, lead.value) == (token, b"v2"), lead
        obs.close()
    finally:
        s1.close()
        s2.close()
