"""The Python client against one real `baton serve`."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import baton
from conftest import TIMEOUT, wait_for


def claim_in_thread(session, name, **kw):
    """Claim in a thread; returns (thread, results list)."""
    out = []

    def run():
        try:
            out.append(session.claim(name, **kw))
        except Exception as e:  # handed to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def queued(server, name, n=1):
    """Wait until the server shows n waiters on name."""
    def check():
        try:
            return len(server.admin_get("/api/locks/" + name).get("waiters") or []) >= n
        except Exception:
            return False
    wait_for(check, "%d waiter(s) on %s" % (n, name))


def test_exclusive_contention_fifo_and_tokens(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b, c.session() as d:
        first = a.claim(name)
        tb, rb = claim_in_thread(b, name)
        queued(server, name, 1)
        td, rd = claim_in_thread(d, name)
        queued(server, name, 2)
        assert not rb and not rd, "a waiter was granted while the lock was held"
        first.release()
        tb.join(TIMEOUT)
        assert isinstance(rb[0], baton.Claim) and rb[0].held
        assert not rd, "the second waiter overtook FIFO order"
        rb[0].release()
        td.join(TIMEOUT)
        assert isinstance(rd[0], baton.Claim)
        assert first.token < rb[0].token < rd[0].token, (first.token, rb[0].token, rd[0].token)


def test_shared_holders_then_exclusive(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b, c.session() as w:
        r1 = a.claim(name, mode=baton.Mode.SHARED)
        r2 = b.claim(name, mode=baton.Mode.SHARED, wait=False)
        assert r1.held and r2.held and r1.token != r2.token
        with pytest.raises(baton.Busy):
            w.claim(name, wait=False)
        t, res = claim_in_thread(w, name)
        queued(server, name)
        r1.release()
        time.sleep(0.05)
        assert not res, "exclusive granted beside a shared holder"
        r2.release()
        t.join(TIMEOUT)
        assert res[0].held and res[0].token > max(r1.token, r2.token)


def test_semaphore(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b:
        h = [a.claim(name, mode=baton.Mode.SEMAPHORE, limit=2) for _ in range(2)]
        with pytest.raises(baton.Busy):
            b.claim(name, mode=baton.Mode.SEMAPHORE, limit=2, wait=False)
        with pytest.raises(baton.ClaimRefused) as ei:
            b.claim(name, mode=baton.Mode.SEMAPHORE, limit=3)
        assert ei.value.code == baton.Code.LIMIT_MISMATCH and not ei.value.temporary
        with pytest.raises(baton.ClaimRefused) as ei:
            b.claim(name)
        assert ei.value.code == baton.Code.MODE_MISMATCH
        t, res = claim_in_thread(b, name, mode=baton.Mode.SEMAPHORE, limit=2)
        queued(server, name)
        h[0].release()
        t.join(TIMEOUT)
        assert res[0].held


def test_no_wait_busy(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b:
        a.claim(name)
        with pytest.raises(baton.Busy):
            b.claim(name, wait=False)
        assert b.claim(name + "-free", wait=False).held


def test_timeout_leaves_the_queue(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a, c.session() as b, c.session() as d:
        h = a.claim(name)
        t0 = time.monotonic()
        with pytest.raises(baton.LockTimeout):
            b.claim(name, timeout=0.3)
        took = time.monotonic() - t0
        assert 0.25 < took < 2.0, "timeout 0.3s took %.3fs" % took
        assert isinstance(baton.LockTimeout("x"), TimeoutError)
        h.release()
        # The timed-out claim left the queue: a no-wait claim gets the lock.
        assert d.claim(name, wait=False).held


def test_tokens_increase(server, name):
    c = baton.Client(server.addr, lease=2)
    toks = []
    with c.session() as s:
        for _ in range(5):
            cl = s.claim(name)
            toks.append(cl.token)
            cl.release()
    assert toks == sorted(toks) and len(set(toks)) == 5, toks


def test_context_manager_and_release(server, name):
    c = baton.Client(server.addr, lease=2)
    lk = c.lock(name)
    with lk as token:
        assert token > 0 and lk.token == token and not lk.lost.is_set()
        with pytest.raises(baton.Busy):
            with c.lock(name, wait=False):
                pass
    with c.lock(name, wait=False) as t2:  # released on exit
        assert t2 > token


def test_force_release_signals_loss_and_session_lives(server, name):
    c = baton.Client(server.addr, lease=2)
    seen = []
    with c.session() as s:
        cl = s.claim(name, on_lost=lambda claim, err: seen.append((claim.name, err)))
        assert server.force_release(name) == 200
        assert cl.lost.wait(TIMEOUT), "force-release was not signalled"
        assert isinstance(cl.error, baton.Revoked) and cl.error.code == baton.Code.ADMIN
        wait_for(lambda: seen, "the on_lost callback")
        assert seen[0][0] == name and seen[0][1] is cl.error
        cl.release()  # a no-op on a lost claim
        again = s.claim(name)  # the session lives on
        assert again.token > cl.token


def test_lock_lost_event_on_revoke(server, name):
    c = baton.Client(server.addr, lease=2)
    lk = c.lock(name)
    with lk:
        server.force_release(name)
        assert lk.lost.wait(TIMEOUT)
        assert isinstance(lk.claim.error, baton.Revoked)


def test_loss_when_server_killed(own_server, name):
    srv = own_server()
    c = baton.Client(srv.addr, lease=5)
    s = c.session()
    cl = s.claim(name)
    srv.kill()
    t0 = time.monotonic()
    assert cl.lost.wait(TIMEOUT)
    assert time.monotonic() - t0 < 2, "loss took %.3fs" % (time.monotonic() - t0)
    assert isinstance(cl.error, baton.ConnectionLost)
    with pytest.raises(baton.SessionClosed):
        s.claim(name)
    s.close()


def test_give_up_at_anchor_plus_0_8_lease(own_server, name):
    """A server that stops answering (SIGSTOP): the client gives up at
    0.8 of the lease after the last confirmed request, not later, and
    keeps the connection open until the work has stopped."""
    srv = own_server()
    lease = 1.0
    c = baton.Client(srv.addr, lease=lease)
    s = c.session()
    lost_at = []
    cl = s.claim(name, on_lost=lambda *_: lost_at.append(time.monotonic()))
    other = s.claim(name + "-2")
    srv.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    assert cl.lost.wait(TIMEOUT)
    assert isinstance(cl.error, baton.HeartbeatTimeout)
    wait_for(lambda: lost_at, "the on_lost callback")  # runs just after the Event is set
    took = lost_at[0] - stopped
    # The anchor is at most a quarter lease (plus a round trip) before the stop.
    assert 0.8 * lease - 0.35 * lease <= took <= 0.8 * lease + 0.15, "gave up %.3fs after the stop" % took
    assert s._sock is not None, "closed before the work stopped"
    cl.release()
    assert s._sock is not None, "closed before the second claim's work stopped"
    other.release()  # the work of both has stopped: now the connection closes
    wait_for(lambda: s._sock is None, "the close after the work stopped", timeout=2)
    srv.proc.send_signal(signal.SIGCONT)
    s.close()


def test_bad_input(server):
    c = baton.Client(server.addr, lease=2)
    with pytest.raises(ValueError):
        baton.Client(server.addr, lease=0)
    with pytest.raises(ValueError):
        baton.Client("no-port")
    with c.session() as s:
        with pytest.raises(ValueError):
            s.claim("")
        with pytest.raises(ValueError):
            s.claim("x" * 256)
        with pytest.raises(ValueError):
            s.claim("pool", mode=baton.Mode.SEMAPHORE)
    with pytest.raises(baton.SessionError) as ei:
        c.session(lease=3600)  # over the server's -max-lease (10 minutes)
    assert ei.value.code == baton.Code.INVALID_LEASE


def test_heartbeats_keep_claims(server, name):
    c = baton.Client(server.addr, lease=0.4)
    with c.session() as s:
        cl = s.claim(name)
        time.sleep(1.5)  # several leases
        assert cl.held and not cl.lost.is_set()


def test_close_while_waiting_raises_session_closed(server, name):
    c = baton.Client(server.addr, lease=2)
    with c.session() as a:
        a.claim(name)
        b = c.session()
        t, res = claim_in_thread(b, name)
        queued(server, name)
        b.close()
        t.join(TIMEOUT)
        assert isinstance(res[0], baton.SessionClosed), res


def test_resumable_reasserts_after_a_broken_connection(server, name):
    """The connection breaks under a resumable session: it reconnects,
    re-asserts the held and the queued claim, tokens unchanged, and the
    work is never told of a loss."""
    import socket
    c = baton.Client(server.addr, lease=2)
    with c.session(resumable=True) as s, c.session() as other:
        assert s.resumable
        held = s.claim(name)
        o = other.claim(name + "-q")
        t, res = claim_in_thread(s, name + "-q")
        queued(server, name + "-q")
        first_id = s.id
        s._sock.shutdown(socket.SHUT_RDWR)  # the connection breaks
        wait_for(lambda: s.id != first_id and not s._resuming, "the resume")
        assert held.held and not held.lost.is_set(), held.error
        tok = held.token
        o.release()  # the re-asserted queued claim is promoted on the new session
        t.join(TIMEOUT)
        assert isinstance(res[0], baton.Claim) and res[0].held and res[0].token > o.token
        with pytest.raises(baton.Busy):
            other.claim(name, wait=False)  # still held by the resumed session
        assert held.token == tok
        held.release()
        assert other.claim(name, wait=False).token > tok


def test_resumable_not_resumed_when_the_server_is_gone(own_server, name):
    srv = own_server()
    lease = 1.0
    c = baton.Client(srv.addr, lease=lease)
    s = c.session(resumable=True)
    cl = s.claim(name)
    srv.kill()
    t0 = time.monotonic()
    assert cl.lost.wait(TIMEOUT)
    took = time.monotonic() - t0
    assert isinstance(cl.error, baton.NotResumed), cl.error
    assert took <= 0.8 * lease + 0.2, "lost %.3fs after the kill" % took
    s.close()


def test_exclusive_conflicts_with_the_same_sessions_claim(server, name):
    """No deadlock detection: a session's second exclusive claim on a name
    waits for its first; the release promotes it (a push that may come
    before the RELEASED answer)."""
    c = baton.Client(server.addr, lease=2)
    with c.session() as s:
        first = s.claim(name)
        with pytest.raises(baton.Busy):
            s.claim(name, wait=False)
        t, res = claim_in_thread(s, name)
        queued(server, name)
        first.release()
        t.join(TIMEOUT)
        assert res[0].held and res[0].token > first.token


def test_resumable_gives_up_on_time_when_the_server_stops_answering(own_server, name):
    """SIGSTOP: the resumable session takes the silence for a break, its
    reconnection gets no WELCOME, and the claim is lost by anchor + 0.8 L."""
    srv = own_server()
    lease = 1.0
    c = baton.Client(srv.addr, lease=lease)
    s = c.session(resumable=True)
    lost_at = []
    cl = s.claim(name, on_lost=lambda *_: lost_at.append(time.monotonic()))
    srv.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    assert cl.lost.wait(TIMEOUT)
    wait_for(lambda: lost_at, "the on_lost callback")  # runs just after the Event is set
    took = lost_at[0] - stopped
    assert isinstance(cl.error, baton.NotResumed), cl.error
    assert 0.8 * lease - 0.35 * lease <= took <= 0.8 * lease + 0.15, "lost %.3fs after the stop" % took
    srv.proc.send_signal(signal.SIGCONT)
    s.close()
