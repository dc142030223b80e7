// Values, watches and elections against a real `baton serve` (BATON_BIN).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client, Codes, NotLeaderError, ServerError, ValidationError } from '../src/index.js';
import { startServer, skipNoBin, aborted, waitFor } from './helpers.js';

function adminGet(admin, p) {
  return new Promise((resolve, reject) => {
    const [host, port] = admin.split(':');
    http.get({ host, port, path: p }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}

/** p, or a rejection after ms. */
async function within(p, ms = 10000) {
  let t;
  const r = await Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`nothing within ${ms} ms`)), ms); })]);
  clearTimeout(t);
  return r;
}

/** The next item of an async iterator, or a rejection after ms. */
const next = (it, ms) => within(it.next(), ms);

/** The next leader (not null when skipNull: a release and the next grant may come in two reads). */
async function nextLeader(it, skipNull = false) {
  for (;;) {
    const r = await next(it);
    assert.equal(r.done, false, 'the observer ended');
    if (r.value === null && skipNull) continue;
    return r.value;
  }
}

describe('values, watches and elections', { skip: skipNoBin }, () => {
  let srv;
  let client;
  let n = 0;
  const fresh = () => `elect-${process.pid}-${++n}`;
  before(async () => {
    srv = await startServer();
    client = new Client({ address: srv.addr });
  });
  after(async () => {
    await srv?.stop();
  });

  test('three candidates and two observers: failover, proclaim, resign, no leader', async () => {
    const name = fresh();
    const [sa, sb, sc, o1, o2] = await Promise.all(['a', 'b', 'c', 'o1', 'o2'].map((label) => client.openSession({ lease: 2000, label })));
    try {
      assert.equal(sa.values, true, 'the server did not grant values');
      const obs = [o1.election(name).observe(), o2.election(name).observe()];
      const events = [[], []];
      obs.forEach((o, i) => o.on('leader', (l) => events[i].push(l)));
      for (const o of obs) assert.equal(await nextLeader(o), null);
      const [ea, eb, ec] = [sa, sb, sc].map((s) => s.election(name));
      const ta = await ea.campaign('10.0.0.1:5432');
      assert.ok(ea.isLeader && ta > 0n);
      for (const o of obs) {
        const l = await nextLeader(o);
        assert.deepEqual([l.token, l.value.toString(), l.label, l.mode], [ta, '10.0.0.1:5432', 'a', 'exclusive']);
      }
      const waiters = async (k) => waitFor(async () => JSON.parse((await adminGet(srv.admin, `/api/locks/${name}`)).body).waiters?.length === k, 10000, `${k} waiters`);
      const pb = eb.campaign('10.0.0.2:5432');
      await waiters(1); // b queues before c
      const pc = ec.campaign('10.0.0.3:5432');
      await waiters(2);
      await assert.rejects(eb.proclaim('x'), NotLeaderError);

      // The leader's connection closes (not a release): the next leads.
      sa._conn.sock.destroy();
      const tb = await within(pb);
      assert.ok(tb > ta, `token ${tb} after ${ta}`);
      for (const o of obs) {
        const l = await nextLeader(o, true);
        assert.deepEqual([l.token, l.value.toString(), l.label], [tb, '10.0.0.2:5432', 'b']);
      }
      await aborted(ea.signal);
      assert.equal(ea.isLeader, false);

      // A proclaim reaches the observers; the token stays.
      await eb.proclaim('10.0.0.22:5432');
      for (const o of obs) {
        const l = await nextLeader(o);
        assert.deepEqual([l.token, l.value.toString()], [tb, '10.0.0.22:5432']);
      }
      assert.equal((await eb.leader()).value.toString(), '10.0.0.22:5432');
      assert.equal(eb.claim.value.toString(), '10.0.0.22:5432');

      // Resign: the third candidate leads, with a larger token.
      await eb.resign();
      const tc = await within(pc);
      assert.ok(tc > tb);
      for (const o of obs) assert.equal((await nextLeader(o, true)).token, tc);

      // No leader.
      await ec.resign();
      for (const o of obs) assert.equal(await nextLeader(o), null);
      assert.equal(await ec.leader(), null);
      for (const o of obs) {
        o.close();
        assert.equal((await next(o)).done, true);
      }
      // The events said the same, and no leader went back in tokens.
      for (const ev of events) {
        const tokens = ev.filter((l) => l !== null).map((l) => l.token);
        assert.deepEqual([...new Set(tokens)], [ta, tb, tc]);
        assert.equal(ev.at(-1), null);
      }
    } finally {
      await Promise.all([sa, sb, sc, o1, o2].map((s) => s.close()));
    }
  });

  test('values over 1024 bytes are refused; the longest goes through', async () => {
    const name = fresh();
    const s = await client.openSession({ lease: 2000 });
    const w = await client.openSession({ lease: 2000 });
    try {
      const e = s.election(name);
      await assert.rejects(e.campaign('x'.repeat(1025)), ValidationError);
      await assert.rejects(s.acquire(name, { value: 'é'.repeat(513) }), ValidationError);
      await e.campaign(Buffer.alloc(1024, 'v'));
      const watch = await w.watch(name);
      const st = (await next(watch)).value;
      assert.deepEqual(st.map((h) => h.value.length), [1024]); // a frame over 512 bytes
      await assert.rejects(e.proclaim('x'.repeat(1025)), ValidationError);
      // Past the client's check, the server refuses it (REFUSED 0x24) and
      // the claim lives on.
      await assert.rejects(s._proclaim(e.claim, Buffer.alloc(1025)), (err) => err instanceof ServerError && err.code === Codes.VALUE_TOO_LONG);
      assert.ok(e.isLeader);
      await e.proclaim('short');
      assert.equal((await next(watch)).value[0].value.toString(), 'short');
      watch.close();
      assert.equal((await next(watch)).done, true);
    } finally {
      await s.close();
      await w.close();
    }
  });

  test('resumable sessions watch again after a break, and the leader keeps its claim and value', async () => {
    const name = fresh();
    const s1 = await client.openSession({ lease: 2000, resumable: true, label: 'lead' });
    const s2 = await client.openSession({ lease: 2000, resumable: true });
    try {
      assert.ok(s1.resumable && s2.resumable);
      const e = s1.election(name);
      const token = await e.campaign('v1');
      const obs = s2.election(name).observe();
      let l = await nextLeader(obs);
      assert.deepEqual([l.token, l.value.toString()], [token, 'v1']);
      // Both connections break: the observer watches again (the same
      // leader is not given twice); the leader's claim is re-asserted.
      const resumed = [s1, s2].map((s) => new Promise((r) => s.once('resumed', r)));
      s2._conn.sock.destroy();
      s1._conn.sock.destroy();
      await within(Promise.all(resumed));
      assert.ok(e.isLeader && e.token === token && !e.signal.aborted);
      assert.equal((await e.leader()).value.toString(), 'v1');
      await e.proclaim('v2');
      l = await nextLeader(obs);
      assert.deepEqual([l.token, l.value.toString()], [token, 'v2']);
      obs.close();
    } finally {
      await s1.close();
      await s2.close();
    }
  });

  test('a watch reports the holders in grant order, with values and labels', async () => {
    const name = fresh();
    const a = await client.openSession({ lease: 2000, label: 'r1' });
    const b = await client.openSession({ lease: 2000, label: 'r2' });
    const w = await client.openSession({ lease: 2000 });
    try {
      const watch = await w.watch(name);
      const changes = [];
      watch.on('change', (h) => changes.push(h.map((x) => x.token)));
      assert.deepEqual((await next(watch)).value, []);
      const r1 = await a.acquire(name, { mode: 'shared', value: 'one' });
      let st = (await next(watch)).value;
      assert.deepEqual(st.map((h) => [h.token, h.mode, h.value.toString(), h.label]), [[r1.token, 'shared', 'one', 'r1']]);
      const r2 = await b.acquire(name, { mode: 'shared' });
      st = (await next(watch)).value;
      assert.deepEqual(st.map((h) => [h.token, h.value.toString()]), [[r1.token, 'one'], [r2.token, '']]);
      await r1.release();
      assert.deepEqual((await next(watch)).value.map((h) => h.token), [r2.token]);
      assert.deepEqual(watch.holders.map((h) => h.token), [r2.token]);
      await new Promise((r) => setImmediate(r)); // the events follow the reader's turn
      assert.deepEqual(changes, [[], [r1.token], [r1.token, r2.token], [r2.token]]);
      watch.close();
      // The watch's id is free again, and the session serves on.
      assert.ok((await w.acquire(`${name}-other`)).held);
    } finally {
      await Promise.all([a, b, w].map((s) => s.close()));
    }
  });
});
