// Against a real three-node cluster on loopback (BATON_BIN): routing to a
// name's owner, and resumable sessions that keep their claims through the
// death of a node.

import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ownerOf, BusyError } from '../src/index.js';
import { startCluster, skipNoBin, once } from './helpers.js';

// Short failure detection, so that a dead node's names move within a
// lease of a few seconds (docs/client.md: leases above about
// 1.8 x (remove-after + 1 s) survive an owner's death).
const FAST = ['-cluster-self-stop', '1s', '-cluster-remove-after', '1500ms'];

/** A name that ids' ring gives to owner. */
function nameOwnedBy(owner, prefix = 'job') {
  for (let i = 0; ; i++) {
    const name = `${prefix}-${i}`;
    if (ownerOf(name, ['n1', 'n2', 'n3']) === owner) return name;
  }
}

describe('cluster', { skip: skipNoBin, timeout: 120000 }, () => {
  test('claims go to their names\' owners; a relayed claim survives the death of the node it came through', async () => {
    const cl = await startCluster(FAST);
    try {
      const [n1, n2, n3] = cl.nodes;
      const client = new Client({ address: n1.addr, nodes: [n2.addr, n3.addr] });
      const s = await client.openSession({ lease: 3000, label: 'router' });
      assert.ok(s.resumable, 'a client given a cluster opens resumable sessions');
      for (const node of cl.nodes) {
        const name = nameOwnedBy(node.id, 'routed');
        const c = await s.acquire(name);
        assert.equal(c.session.node, node.id, `${name} was claimed on ${c.session.node}, owner ${node.id}`);
        assert.equal(c.session.address, node.addr);
      }
      await s.close();

      // An election routed to its name's owner; through n1 unrouted, a
      // watch of a name n2 owns is relayed to n2.
      {
        const ename = nameOwnedBy('n2', 'elect');
        const [lead, watcher] = [await client.openSession({ lease: 3000 }), await client.openSession({ lease: 3000 })];
        const e = lead.election(ename);
        const token = await e.campaign('n2-owned');
        const obs = watcher.election(ename).observe();
        const first = (await obs.next()).value;
        assert.deepEqual([first.token, first.value.toString()], [token, 'n2-owned']);
        await e.proclaim('again');
        assert.equal((await obs.next()).value.value.toString(), 'again');
        obs.close();
        // Not routed: n1 relays the watch to n2, the name's owner.
        const plain = await new Client({ address: n1.addr, routing: 'off' }).openSession({ lease: 3000 });
        assert.ok(plain.values);
        const w = await plain.watch(ename);
        const hs = (await w.next()).value;
        assert.deepEqual(hs.map((h) => [h.token, h.value.toString()]), [[token, 'again']]);
        await lead.close();
        assert.deepEqual((await w.next()).value, []);
        w.close();
        await watcher.close();
        await plain.close();
      }

      // Not routed: a claim owned by n2 goes through n1, which relays it.
      const relayed = new Client({ address: n1.addr, routing: 'off' });
      const rs = await relayed.openSession({ lease: 4000, resumable: true, addrs: [n1.addr, n2.addr, n3.addr] });
      assert.equal(rs.node, 'n1');
      const name = nameOwnedBy('n2', 'relayed');
      const c = await rs.acquire(name);
      const token = c.token;
      let lost = null;
      c.on('lost', (e) => { lost = e; });
      const resumed = once(rs, 'resumed', 4000);
      await n1.kill();
      await resumed;
      // The re-assertion's answer comes after the resume.
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(lost, null, `the claim was lost: ${lost}`);
      assert.ok(c.held);
      assert.equal(c.token, token, 'the token changed across the resume');
      assert.notEqual(rs.node, 'n1');
      const other = new Client({ address: n2.addr, routing: 'off' });
      const os2 = await other.openSession({ lease: 2000 });
      await assert.rejects(os2.tryAcquire(name), BusyError);
      await c.release();
      assert.ok((await os2.acquire(name, { timeout: 3000 })).held, 'released after the resume, but not grantable');
      await os2.close();
      await rs.close();
    } finally {
      await cl.stop();
    }
  });

  test('a holder keeps its lock through the death of the lock\'s owner', async () => {
    const cl = await startCluster(FAST);
    try {
      const [n1, n2, n3] = cl.nodes;
      const client = new Client({ address: n1.addr, nodes: [n2.addr, n3.addr] });
      const lease = 8000;
      const s = await client.openSession({ lease });
      const name = nameOwnedBy('n3', 'owned');
      const c = await s.acquire(name);
      assert.equal(c.session.node, 'n3');
      const token = c.token;
      let lost = null;
      c.on('lost', (e) => { lost = e; });
      const resumed = once(c.session, 'resumed', lease);
      await n3.kill();
      await resumed;
      // Held until the new owner answers the re-assertion, or lost at the
      // give-up: wait for either.
      const t0 = Date.now();
      while (lost === null && c.session._claims.get(c._id)?._reassert && Date.now() - t0 < lease) {
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(lost, null, `the claim was lost: ${lost}`);
      assert.ok(c.held);
      assert.equal(c.token, token);
      assert.notEqual(c.session.node, 'n3', 'the claim did not move off the dead owner');
      assert.equal(c.session._claims.get(c._id)?._reassert, false, `re-assertion unanswered after ${Date.now() - t0} ms`);
      const other = new Client({ address: n1.addr, routing: 'off' });
      const os2 = await other.openSession({ lease: 2000 });
      await assert.rejects(os2.tryAcquire(name), BusyError);
      await os2.close();
      await s.close();
    } finally {
      await cl.stop();
    }
  });
});
