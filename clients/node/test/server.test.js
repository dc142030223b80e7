// Against a real `baton serve` (BATON_BIN).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import {
  Client, BusyError, ClosedByAdminError, ConnectionClosedError, HeartbeatTimeoutError, ModeError,
  SessionClosedError, ValidationError, Codes, ServerError, ShuttingDownError,
} from '../src/index.js';
import { startServer, adminPost, skipNoBin, aborted, once } from './helpers.js';

describe('single server', { skip: skipNoBin }, () => {
  let srv;
  let client;
  let n = 0;
  const fresh = () => `lock-${process.pid}-${++n}`;
  before(async () => {
    srv = await startServer();
    client = new Client({ address: srv.addr });
  });
  after(async () => {
    await srv?.stop();
  });

  test('exclusive claims run one after the other, and the waiter is promoted at release', async () => {
    const name = fresh();
    const a = await client.openSession({ lease: 2000, label: 'a' });
    const b = await client.openSession({ lease: 2000, label: 'b' });
    try {
      const ca = await a.acquire(name);
      let bHeld = false;
      const pb = b.acquire(name).then((c) => { bHeld = true; return c; });
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(bHeld, false, 'the second claim was granted while the first held the lock');
      const t0 = performance.now();
      await ca.release();
      const cb = await pb;
      assert.ok(performance.now() - t0 < 500, 'promotion was not immediate');
      assert.ok(cb.held);
      assert.ok(cb.token > ca.token, `tokens did not increase: ${ca.token} then ${cb.token}`);
      assert.equal(ca.held, false);
      assert.ok(ca.signal.aborted, 'a released claim\'s signal did not abort');
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('tokens increase across grants and sessions', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 2000 });
    try {
      let last = 0n;
      for (let i = 0; i < 5; i++) {
        const cl = await s.acquire(name);
        assert.equal(typeof cl.token, 'bigint');
        assert.ok(cl.token > last, `token ${cl.token} after ${last}`);
        last = cl.token;
        await cl.release();
      }
    } finally {
      await s.close();
    }
  });

  test('shared claims hold together; an exclusive one waits for them and is not overtaken', async () => {
    const name = fresh();
    const s1 = await client.openSession({ lease: 2000 });
    const s2 = await client.openSession({ lease: 2000 });
    const s3 = await client.openSession({ lease: 2000 });
    try {
      const r1 = await s1.acquire(name, { mode: 'shared' });
      const r2 = await s2.acquire(name, { mode: 'shared' });
      assert.ok(r1.held && r2.held);
      assert.notEqual(r1.token, r2.token, 'each shared holder has its own token');
      const w = s3.acquire(name, { mode: 'exclusive' });
      w.catch(() => {}); // awaited below; a failed assertion must not leave it unhandled
      // s3's next answer comes after its CLAIM was queued: the server
      // answers one session's frames in order.
      await (await s3.acquire(fresh())).release();
      // A reader behind a queued writer waits too (strict FIFO).
      await assert.rejects(s1.tryAcquire(name, { mode: 'shared' }), BusyError);
      await r1.release();
      await r2.release();
      const wc = await w;
      assert.ok(wc.held);
      await assert.rejects(s1.tryAcquire(name, { mode: 'shared' }), BusyError);
    } finally {
      await Promise.all([s1.close(), s2.close(), s3.close()]);
    }
  });

  test('a semaphore admits at most its limit, and its limit and family are checked', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 2000 });
    try {
      const held = [];
      for (let i = 0; i < 3; i++) held.push(await s.acquire(name, { mode: 'semaphore', limit: 3 }));
      await assert.rejects(s.tryAcquire(name, { mode: 'semaphore', limit: 3 }), BusyError);
      await assert.rejects(s.acquire(name, { mode: 'semaphore', limit: 4 }), (e) => e instanceof ModeError && e.code === Codes.LIMIT_MISMATCH);
      await assert.rejects(s.acquire(name), (e) => e instanceof ModeError && e.code === Codes.MODE_CONFLICT);
      await held[0].release();
      const again = await s.tryAcquire(name, { mode: 'semaphore', limit: 3 });
      assert.ok(again.held);
      await assert.rejects(s.acquire(name, { mode: 'semaphore' }), ValidationError);
    } finally {
      await s.close();
    }
  });

  test('no-wait finds the lock busy; the session lives on', async () => {
    const name = fresh();
    const s1 = await client.openSession({ lease: 2000 });
    const s2 = await client.openSession({ lease: 2000 });
    try {
      await s1.acquire(name);
      await assert.rejects(s2.tryAcquire(name), (e) => e instanceof BusyError && e.lockName === name);
      await assert.rejects(s2.acquire(name, { wait: false }), BusyError);
      const other = await s2.acquire(fresh());
      assert.ok(other.held);
    } finally {
      await s1.close();
      await s2.close();
    }
  });

  test('a timeout leaves the queue, and the next claim gets the lock', async () => {
    const name = fresh();
    const s1 = await client.openSession({ lease: 2000 });
    const s2 = await client.openSession({ lease: 2000 });
    try {
      const h = await s1.acquire(name);
      const t0 = performance.now();
      await assert.rejects(s2.acquire(name, { timeout: 300 }), (e) => e.name === 'TimeoutError');
      const took = performance.now() - t0;
      assert.ok(took >= 290 && took < 2000, `timeout after ${took} ms`);
      // The timed-out claim left the queue: a third claim is next.
      const s3 = await client.openSession({ lease: 2000 });
      const p3 = s3.acquire(name);
      await h.release();
      assert.ok((await p3).held);
      await s3.close();
    } finally {
      await s1.close();
      await s2.close();
    }
  });

  test('an AbortSignal cancels a waiting claim', async () => {
    const name = fresh();
    const s1 = await client.openSession({ lease: 2000 });
    const s2 = await client.openSession({ lease: 2000 });
    try {
      const h = await s1.acquire(name);
      const ac = new AbortController();
      const p = s2.acquire(name, { signal: ac.signal });
      setTimeout(() => ac.abort(new Error('not needed any more')), 100);
      await assert.rejects(p, /not needed any more/);
      await h.release();
      assert.ok((await s2.acquire(name, { wait: false })).held, 'the cancelled claim kept its place');
      const pre = new AbortController();
      pre.abort();
      await assert.rejects(s2.acquire(fresh(), { signal: pre.signal }), (e) => e.name === 'AbortError');
    } finally {
      await s1.close();
      await s2.close();
    }
  });

  test('heartbeats keep a lock well past its lease', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 400 });
    try {
      const cl = await s.acquire(name);
      await new Promise((r) => setTimeout(r, 1500));
      assert.ok(cl.held, `lost: ${cl.error}`);
      const other = await client.openSession({ lease: 400 });
      await assert.rejects(other.tryAcquire(name), BusyError);
      await other.close();
    } finally {
      await s.close();
    }
  });

  test('withLock runs the work with the token and releases afterwards', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 2000 });
    try {
      const got = await s.withLock(name, async (token, signal) => {
        assert.equal(typeof token, 'bigint');
        assert.equal(signal.aborted, false);
        return token;
      });
      assert.ok(got > 0n);
      await assert.rejects(s.withLock(name, async () => { throw new Error('work failed'); }), /work failed/);
      assert.ok((await s.tryAcquire(name)).held, 'withLock did not release');
      const v = await client.withLock(fresh(), async (token) => `done ${token > 0n}`, { lease: 1000 });
      assert.equal(v, 'done true');
    } finally {
      await s.close();
    }
  });

  test('a force-release by the administrator tells the work; the session lives on', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 2000 });
    try {
      let lostErr;
      const done = s.withLock(name, async (token, signal) => {
        const reason = await aborted(signal);
        lostErr = reason;
        return 'stopped';
      });
      done.catch(() => {}); // awaited below
      await new Promise((r) => setTimeout(r, 100));
      const res = await adminPost(srv.admin, `/api/locks/${encodeURIComponent(name)}/release`);
      assert.equal(res.status, 200, res.body);
      await assert.rejects(done, (e) => e instanceof ClosedByAdminError && e.code === Codes.CLOSED_BY_ADMIN && e.frame === 'revoked');
      assert.ok(lostErr instanceof ClosedByAdminError);
      assert.equal(s.signal.aborted, false, 'a REVOKED ended the whole session');
      assert.ok((await s.acquire(name)).held);
    } finally {
      await s.close();
    }
  });

  test('the lost event and onLost fire at a loss and not at a release', async () => {
    const name = fresh();
    const told = [];
    const c = new Client({ address: srv.addr, onLost: (claim, err) => told.push([claim.name, err.code]) });
    const s = await c.openSession({ lease: 2000 });
    try {
      const cl = await s.acquire(name);
      let lostEvents = 0;
      cl.on('lost', () => lostEvents++);
      const lost = once(cl, 'lost');
      await adminPost(srv.admin, `/api/locks/${encodeURIComponent(name)}/release`);
      assert.ok((await lost) instanceof ClosedByAdminError);
      const c2 = await s.acquire(name);
      let released = 0;
      c2.on('lost', () => released++);
      await c2.release();
      assert.equal(released, 0);
      assert.equal(lostEvents, 1);
      assert.deepEqual(told, [[name, Codes.CLOSED_BY_ADMIN]]);
    } finally {
      await s.close();
    }
  });

  test('close ends the claims with SessionClosedError, without a lost event', async () => {
    const s = await client.openSession({ lease: 2000 });
    const cl = await s.acquire(fresh());
    let lost = false;
    cl.on('lost', () => { lost = true; });
    await s.close();
    assert.ok(cl.signal.reason instanceof SessionClosedError);
    assert.equal(lost, false);
    await assert.rejects(s.acquire(fresh()), SessionClosedError);
    await s.close();
  });

  test('bad leases and labels are refused before connecting', async () => {
    await assert.rejects(client.openSession({ lease: 0 }), ValidationError);
    await assert.rejects(client.openSession({ lease: 1000, label: 'x'.repeat(256) }), ValidationError);
    const s = await client.openSession({ lease: 1000 });
    await assert.rejects(s.acquire(''), ValidationError);
    await assert.rejects(s.acquire('x', { mode: 'nope' }), ValidationError);
    await s.close();
    // The server's own refusal: a lease above -max-lease (10 minutes).
    await assert.rejects(client.openSession({ lease: 11 * 60 * 1000 }), (e) => e instanceof ServerError && e.code === Codes.INVALID_LEASE && !e.temporary);
  });
});

describe('losses', { skip: skipNoBin }, () => {
  test('a killed server loses every claim at once', async () => {
    const srv = await startServer();
    try {
      const client = new Client({ address: srv.addr });
      const s = await client.openSession({ lease: 5000 });
      const a = await s.acquire('a');
      const b = await s.acquire('b', { mode: 'shared' });
      const lost = once(s, 'lost');
      const t0 = performance.now();
      await srv.kill();
      const err = await lost;
      assert.ok(err instanceof ConnectionClosedError, String(err));
      assert.ok(performance.now() - t0 < 1000);
      assert.ok(a.signal.reason instanceof ConnectionClosedError);
      assert.ok(b.signal.aborted);
      assert.equal(a.held, false);
    } finally {
      await srv.kill();
    }
  });

  test('a silent server: the work is told at 0.8 of the lease, the connection closes only once it stopped', async () => {
    const srv = await startServer();
    const lease = 1000;
    try {
      const client = new Client({ address: srv.addr });
      const s = await client.openSession({ lease });
      const cl = await s.acquire('frozen');
      await new Promise((r) => setTimeout(r, 300));
      const t0 = performance.now();
      srv.proc.kill('SIGSTOP');
      const reason = await aborted(cl.signal, 5000);
      const told = performance.now();
      const after = told - t0;
      assert.ok(reason instanceof HeartbeatTimeoutError, String(reason));
      // The last confirmed request was sent at most a quarter lease before
      // the stop, so the give-up (anchor + 0.8 L) comes within 0.8 L of it.
      assert.ok(after <= 0.8 * lease + 150, `told after ${after.toFixed(0)} ms, lease ${lease}`);
      // Against the anchor itself: the send time of the last request answered.
      const sinceAnchor = told - s._conn.anchor;
      assert.ok(sinceAnchor >= 0.8 * lease && sinceAnchor <= 0.8 * lease + 150,
        `told ${sinceAnchor.toFixed(0)} ms after the anchor, want 0.8 of the ${lease} ms lease`);
      assert.equal(s._conn.sock.destroyed, false, 'closed before the work stopped');
      await cl.release();
      assert.equal(s._conn.sock.destroyed, true, 'not closed once the work stopped');
    } finally {
      srv.proc.kill('SIGCONT');
      await srv.kill();
    }
  });

  test('a silent server: the connection closes at anchor + lease if the work does not stop', async () => {
    const srv = await startServer();
    const lease = 600;
    try {
      const client = new Client({ address: srv.addr });
      const s = await client.openSession({ lease });
      const cl = await s.acquire('frozen');
      srv.proc.kill('SIGSTOP');
      await aborted(cl.signal, 5000);
      const closeBy = s._conn.closeBy;
      await new Promise((r) => s._conn.sock.once('close', r));
      const at = performance.now();
      assert.ok(at >= closeBy - 5, `closed ${(closeBy - at).toFixed(0)} ms before anchor + lease`);
      assert.ok(at < closeBy + 500, `closed ${(at - closeBy).toFixed(0)} ms after anchor + lease`);
    } finally {
      srv.proc.kill('SIGCONT');
      await srv.kill();
    }
  });

  test('a shutdown tells the work (ERROR 0x01)', async () => {
    const srv = await startServer();
    try {
      const client = new Client({ address: srv.addr });
      const s = await client.openSession({ lease: 5000 });
      const cl = await s.acquire('x');
      const p = aborted(cl.signal);
      const stopped = srv.stop();
      const reason = await p;
      assert.ok(reason instanceof ShuttingDownError && reason.temporary, String(reason));
      await cl.release();
      await stopped;
    } finally {
      await srv.kill();
    }
  });
});
