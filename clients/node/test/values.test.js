// The values and watches frames against the examples of
// docs/protocol-v2-watches.md ("v2 values and watches"): each hex line below must appear there as is.
// And a server before values: asked again without the flag.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import * as P from '../src/protocol.js';
import { Client, NotSupportedError, ValidationError } from '../src/index.js';

const hex = (b) => Buffer.from(b).toString('hex').replace(/(..)(?!$)/g, '$1 ');
const unhex = (s) => Buffer.from(s.replace(/ /g, ''), 'hex');

const doc = readFileSync(new URL('../../../docs/protocol-v2-watches.md', import.meta.url), 'utf8');
const start = doc.indexOf('## v2 values and watches');
assert.ok(start >= 0, 'docs/protocol-v2-watches.md has no "v2 values and watches" section');
const end = doc.indexOf('\n## ', start + 1);
const section = doc.slice(start, end < 0 ? doc.length : end);
const inDoc = (h) => assert.ok(section.includes(h), `example ${h} is not in docs/protocol-v2-watches.md`);

test('client frames of values and watches match the protocol document', () => {
  const cases = [
    [P.hello(2000, P.HELLO_VALUES, Buffer.from('w')), '00 08 21 00 00 07 d0 08 01 77'],
    [P.claim(1, 0, 1, 0, Buffer.from('db'), undefined, Buffer.from('10.0.0.5:5432')),
      '00 1d 23 00 00 00 01 08 01 00 00 00 00 02 64 62 00 0d 31 30 2e 30 2e 30 2e 35 3a 35 34 33 32'],
    [P.watch(2, Buffer.from('db')), '00 08 2a 00 00 00 02 02 64 62'],
    [P.proclaim(1, Buffer.from('10.0.0.6:5432')), '00 14 29 00 00 00 01 00 0d 31 30 2e 30 2e 30 2e 36 3a 35 34 33 32'],
    [P.release(1), '00 05 24 00 00 00 01'],
    [P.proclaim(1, Buffer.from('x')), '00 08 29 00 00 00 01 00 01 78'],
    [P.watch(4, Buffer.alloc(0)), '00 06 2a 00 00 00 04 00'],
  ];
  for (const [frame, want] of cases) {
    inDoc(want);
    assert.equal(hex(frame), want);
  }
  // A re-assertion carries the value after its own fields.
  const secret = Buffer.alloc(16, 1);
  const re = P.claim(1, 0, 1, 0, Buffer.from('db'), { token: 42n, ring: 0n, session: 7n, secret, node: Buffer.from('n1') }, Buffer.from('v'));
  assert.equal(re[7], P.CLAIM_REASSERT | P.CLAIM_VALUE);
  assert.equal(hex(re.subarray(-3)), '00 01 76');
  assert.equal(re.readUInt16BE(0), re.length - 2);
});

test('server frames of values and watches decode as the protocol document says', () => {
  const dec = (h) => {
    inDoc(h);
    const b = unhex(h);
    assert.equal(b.readUInt16BE(0), b.length - 2);
    return P.decode(b.subarray(2));
  };
  const welcome = dec('00 0a 31 00 00 00 00 00 00 00 07 10');
  assert.equal(welcome.flags, P.WELCOME_VALUES);
  let f = dec('00 21 40 00 00 00 02 01 01 00 00 00 00 00 00 00 2a 00 0d 31 30 2e 30 2e 30 2e 35 3a 35 34 33 32 01 77 00');
  assert.deepEqual({ ...f, value: f.value.toString() }, { type: 0x40, claim: 2, kind: 1, mode: 1, token: 42n, value: '10.0.0.5:5432', label: 'w', identity: '' });
  f = dec('00 13 40 00 00 00 02 04 00 00 00 00 00 00 00 00 00 00 00 00 00');
  assert.deepEqual([f.kind, f.mode, f.token, f.value.length], [4, 0, 0n, 0]);
  f = dec('00 20 40 00 00 00 02 02 01 00 00 00 00 00 00 00 2a 00 0d 31 30 2e 30 2e 30 2e 36 3a 35 34 33 32 00 00');
  assert.deepEqual([f.kind, f.token, f.value.toString()], [2, 42n, '10.0.0.6:5432']);
  f = dec('00 13 40 00 00 00 02 03 01 00 00 00 00 00 00 00 2a 00 00 00 00');
  assert.deepEqual([f.kind, f.token], [3, 42n]);
  assert.deepEqual(dec('00 06 3f 00 00 00 01 00'), { type: 0x3f, claim: 1, status: 0 });
  assert.deepEqual(dec('00 06 3f 00 00 00 01 01'), { type: 0x3f, claim: 1, status: 1 });
  assert.deepEqual(
    dec('00 32 39 00 00 00 03 08 2b 77 61 74 63 68 65 72 20 74 6f 6f 20 73 6c 6f 77 3a 20 69 74 73 20 63 68 61 6e 67 65 73 20 77 65 72 65 20 6e 6f 74 20 72 65 61 64'),
    { type: 0x39, claim: 3, code: 0x08, reason: 'watcher too slow: its changes were not read' },
  );
});

test('broken CHANGE and PROCLAIMED frames are violations', () => {
  const ok = unhex('40 00 00 00 02 04 00 00 00 00 00 00 00 00 00 00 00 00 00');
  const bad = [
    ok.subarray(0, -1), Buffer.concat([ok, Buffer.of(0)]),
    Buffer.concat([ok.subarray(0, 5), Buffer.of(6), ok.subarray(6)]), // kind 6
    Buffer.concat([ok.subarray(0, 5), Buffer.of(0), ok.subarray(6)]), // kind 0
    Buffer.concat([ok.subarray(0, 15), Buffer.of(4, 1), ok.subarray(17)]), // a value of 1025 bytes
    unhex('3f 00 00 00 01 02'),
  ];
  for (const b of bad) assert.throws(() => P.decode(b), /protocol violation/, hex(b));
});

test('values are checked before anything is sent', () => {
  assert.equal(P.valueBytes('é'.repeat(512)).length, 1024);
  assert.equal(P.valueBytes(new Uint8Array(1024)).length, 1024);
  assert.throws(() => P.valueBytes('x'.repeat(1025)), ValidationError);
  assert.throws(() => P.valueBytes('é'.repeat(513)), ValidationError);
  assert.throws(() => P.valueBytes('\ud800'), ValidationError);
  assert.throws(() => P.valueBytes(5), ValidationError);
});

test('a server before values is asked again without the flag, and values are not supported there', async () => {
  const hellos = [];
  const srv = net.createServer((sock) => {
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length < 10 || buf.length < 10 + buf.readUInt16BE(8)) return;
      const flags = buf[8 + 2 + 1 + 4];
      hellos.push(flags);
      buf = Buffer.alloc(0);
      if (flags & P.HELLO_VALUES) {
        const reason = Buffer.from('reserved flag');
        sock.end(Buffer.concat([Buffer.from([0, 3 + reason.length, 0x3a, 0x1e, reason.length]), reason]));
      } else sock.write(unhex('00 0a 31 00 00 00 00 00 00 00 07 00'));
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const s = await new Client({ address: `127.0.0.1:${srv.address().port}` }).openSession({ lease: 5000 });
  try {
    assert.deepEqual(hellos, [P.HELLO_VALUES, 0]);
    assert.equal(s.values, false);
    await assert.rejects(s.watch('db'), (e) => e instanceof NotSupportedError && /not supported by this server/.test(e.message));
    await assert.rejects(s.acquire('db', { value: 'x' }), NotSupportedError);
    const e = s.election('db');
    await assert.rejects(e.campaign('10.0.0.5:5432'), NotSupportedError);
    await assert.rejects(e.leader(), NotSupportedError);
    const o = e.observe();
    await assert.rejects(o.next(), NotSupportedError);
  } finally {
    await s.close();
    srv.close();
  }
});

function change(wid, kind, token = 0n, value = '', label = '') {
  const v = Buffer.from(value);
  const l = Buffer.from(label);
  const b = Buffer.alloc(3 + 16 + v.length + 1 + l.length + 1);
  b.writeUInt16BE(b.length - 2, 0);
  b[2] = P.T.CHANGE;
  b.writeUInt32BE(wid, 3);
  b[7] = kind;
  b[8] = kind < 4 ? 1 : 0;
  b.writeBigUInt64BE(token, 9);
  b.writeUInt16BE(v.length, 17);
  v.copy(b, 19);
  b[19 + v.length] = l.length;
  l.copy(b, 20 + v.length);
  return b;
}

for (const code of [0x08, 0x03, 0x18]) test(`an observer watches again after a revoke 0x${code.toString(16)} (not 0x18), and never goes back to an older leader`, async () => {
  const seen = {};
  const srv = net.createServer((sock) => {
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let opened = false;
    let watches = 0;
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (!opened) {
        if (buf.length < 10 || buf.length < 10 + buf.readUInt16BE(8)) return;
        seen.helloFlags = buf[15];
        buf = buf.subarray(10 + buf.readUInt16BE(8));
        opened = true;
        sock.write(unhex('00 0a 31 00 00 00 00 00 00 00 07 10'));
      }
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const f = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + f.length);
        if (f[0] === P.T.PING) {
          sock.write(Buffer.concat([Buffer.from([0, 9, P.T.PONG]), f.subarray(1, 9)]));
          continue;
        }
        if (f[0] !== P.T.WATCH) continue;
        const w = f.readUInt32BE(1);
        if (++watches === 1) {
          seen.first = w;
          sock.write(Buffer.concat([change(w, 1, 10n, 'a'), change(w, 4)]));
          sock.write(Buffer.concat([change(w, 3, 10n), change(w, 1, 20n, 'b')]));
          const reason = Buffer.from('watcher too slow');
          const r = Buffer.alloc(9 + reason.length);
          r.writeUInt16BE(r.length - 2, 0);
          r[2] = P.T.REVOKED;
          r.writeUInt32BE(w, 3);
          r[7] = code;
          r[8] = reason.length;
          reason.copy(r, 9);
          sock.write(r);
        } else {
          seen.second = w;
          sock.write(Buffer.concat([change(w, 1, 10n, 'a'), change(w, 4)])); // older than 20: dropped
          sock.write(change(w, 3, 10n));
          sock.write(change(w, 1, 30n, 'c'));
        }
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const s = await new Client({ address: `127.0.0.1:${srv.address().port}` }).openSession({ lease: 5000 });
  const got = [];
  try {
    assert.equal(s.values, true);
    for await (const leader of s.election('db').observe()) {
      got.push(leader && [leader.token, leader.value.toString()]);
      if (leader?.token === 30n) break;
    }
  } catch (e) {
    assert.ok(code === 0x18 && e.code === 0x18 && e.frame === 'revoked', String(e));
    assert.deepEqual(got, [[10n, 'a'], [20n, 'b']]);
    return;
  } finally {
    await s.close();
    srv.close();
  }
  assert.ok(seen.helloFlags & P.HELLO_VALUES);
  assert.notEqual(seen.first, seen.second);
  assert.deepEqual(got.filter((g) => g !== null), [[10n, 'a'], [20n, 'b'], [30n, 'c']], JSON.stringify(got, (k, v) => (typeof v === 'bigint' ? String(v) : v)));
});

test('a reset clears the holders until synced', async () => {
  const srv = net.createServer((sock) => {
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let opened = false;
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (!opened) {
        if (buf.length < 10 || buf.length < 10 + buf.readUInt16BE(8)) return;
        buf = buf.subarray(10 + buf.readUInt16BE(8));
        opened = true;
        sock.write(unhex('00 0a 31 00 00 00 00 00 00 00 07 10'));
      }
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const f = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + f.length);
        if (f[0] !== P.T.WATCH) continue;
        const w = f.readUInt32BE(1);
        sock.write(Buffer.concat([change(w, 1, 10n, 'a'), change(w, 4)]));
        sock.write(change(w, 5));
        sock.write(change(w, 1, 20n, 'b', 'x'));
        sock.write(change(w, 1, 30n, 'c'));
        sock.write(change(w, 4));
        sock.write(change(w, 2, 30n, 'c2'));
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const s = await new Client({ address: `127.0.0.1:${srv.address().port}` }).openSession({ lease: 5000 });
  try {
    const w = await s.watch('db');
    const states = [];
    for (let i = 0; i < 3; i++) states.push((await w.next()).value.map((h) => [h.token, h.value.toString()]));
    assert.deepEqual(states, [[[10n, 'a']], [[20n, 'b'], [30n, 'c']], [[20n, 'b'], [30n, 'c2']]]);
    assert.equal(w.holders[0].label, 'x');
  } finally {
    await s.close();
    srv.close();
  }
});
