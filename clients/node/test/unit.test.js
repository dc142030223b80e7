// Frames and the ring function against the examples of docs/protocol.md.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as P from '../src/protocol.js';
import { ownerOf, ValidationError } from '../src/index.js';

const hex = (b) => Buffer.from(b).toString('hex').replace(/(..)(?!$)/g, '$1 ');

test('client frames match the protocol document', () => {
  assert.equal(hex(P.PREAMBLE), '01 02 00 00 00 00 00 00');
  assert.equal(hex(P.hello(2000, 0, Buffer.from('w1'))), '00 09 21 00 00 07 d0 00 02 77 31');
  assert.equal(hex(P.hello(2000, 1, Buffer.from('w1'))), '00 09 21 00 00 07 d0 01 02 77 31');
  assert.equal(hex(P.ping(1n)), '00 09 22 00 00 00 00 00 00 00 01');
  assert.equal(hex(P.claim(1, 0, 1, 0, Buffer.from('job'))), '00 0f 23 00 00 00 01 00 01 00 00 00 00 03 6a 6f 62');
  assert.equal(hex(P.claim(2, 0, 2, 0, Buffer.from('db'))), '00 0e 23 00 00 00 02 00 02 00 00 00 00 02 64 62');
  assert.equal(hex(P.claim(3, 1, 3, 4, Buffer.from('pool'))), '00 10 23 00 00 00 03 01 03 00 00 00 04 04 70 6f 6f 6c');
  assert.equal(hex(P.release(2)), '00 05 24 00 00 00 02');
  assert.equal(hex(P.ring(1)), '00 02 26 01');
  const secret = Buffer.from('000102030405060708090a0b0c0d0e0f', 'hex');
  assert.equal(
    hex(P.claim(1, 0, 1, 0, Buffer.from('job'), { token: 9n, ring: 3n, session: 7n, secret, node: Buffer.from('n1') })),
    '00 3a 23 00 00 00 01 02 01 00 00 00 00 03 6a 6f 62 00 00 00 00 00 00 00 09 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 07 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 02 6e 31',
  );
});

test('server frames decode as the protocol document says', () => {
  const dec = (s) => P.decode(Buffer.from(s.replace(/ /g, ''), 'hex').subarray(2));
  assert.deepEqual(dec('00 0a 31 00 00 00 00 00 00 00 07 00'), { type: 0x31, session: 7n, flags: 0, secret: null, node: '', ring: 0n });
  const w = dec('00 25 31 00 00 00 00 00 00 00 07 03 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 02 6e 31 00 00 00 00 00 00 00 09');
  assert.equal(w.node, 'n1');
  assert.equal(w.ring, 9n);
  assert.equal(w.secret.toString('hex'), '000102030405060708090a0b0c0d0e0f');
  assert.deepEqual(dec('00 0d 33 00 00 00 02 00 06 55 3f 10 00 00 00'), { type: 0x33, claim: 2, token: 1782579200000000n });
  assert.deepEqual(dec('00 05 34 00 00 00 01'), { type: 0x34, claim: 1, ticket: 0n });
  assert.deepEqual(dec('00 0c 38 00 00 00 04 21 05 6c 69 6d 69 74'), { type: 0x38, claim: 4, code: 0x21, reason: 'limit' });
  assert.deepEqual(dec('00 0a 3a 17 07 6c 65 61 73 65 20 30'), { type: 0x3a, code: 0x17, reason: 'lease 0' });
  assert.deepEqual(dec('00 0c 3d 00 00 00 00 00 00 00 03 00 04 00'), { type: 0x3d, version: 3n, count: 4, pushed: false });
  assert.throws(() => dec('00 06 37 00 00 00 02 00'), /protocol violation/);
  assert.throws(() => dec('00 02 3e 00'), /protocol violation/);
});

test('the owner of a name is the one the nodes compute', () => {
  for (const [name, want] of [['a', 'n1'], ['jobs/nightly', 'n3'], ['db-migrate', 'n3']]) {
    assert.equal(ownerOf(name, ['n3', 'n1', 'n2', 'n1']), want, name);
  }
  assert.equal(ownerOf('x', []), '');
});

test('names the protocol cannot carry are refused before sending', () => {
  assert.throws(() => P.nameBytes(''), ValidationError);
  assert.throws(() => P.nameBytes('x'.repeat(256)), ValidationError);
  assert.throws(() => P.nameBytes('\ud800'), ValidationError);
  assert.equal(P.nameBytes('é'.repeat(127)).length, 254);
  assert.throws(() => P.checkLease(0), ValidationError);
  assert.throws(() => P.checkLease(1.5), ValidationError);
  assert.throws(() => P.checkLease(2 ** 32), ValidationError);
});
