// Against a scripted fake server: what a real server does not do on
// demand (late answers, split and coalesced frames, broken frames).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { Client, HeartbeatTimeoutError, ProtocolViolationError } from '../src/index.js';
import { aborted } from './helpers.js';

const welcome = Buffer.from('000a310000000000000007' + '00', 'hex');
const granted = (id, token) => {
  const b = Buffer.alloc(15);
  b.writeUInt16BE(13, 0);
  b[2] = 0x33;
  b.writeUInt32BE(id, 3);
  b.writeBigUInt64BE(token, 7);
  return b;
};

/**
 * A server that calls script(sock, reader) for each connection; reader
 * resolves to the next frame's type (after the preamble) and when it came.
 */
async function fakeServer(script) {
  const socks = new Set();
  const srv = net.createServer((sock) => {
    socks.add(sock);
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let preamble = false;
    const waiting = [];
    const frames = [];
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const at = performance.now();
      if (!preamble && buf.length >= 8) {
        buf = buf.subarray(8);
        preamble = true;
      }
      while (preamble && buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const n = buf.readUInt16BE(0);
        frames.push({ type: buf[2], at, body: buf.subarray(3, 2 + n) });
        buf = buf.subarray(2 + n);
      }
      while (waiting.length && frames.length) waiting.shift()(frames.shift());
    });
    const next = () => new Promise((r) => (frames.length ? r(frames.shift()) : waiting.push(r)));
    script(sock, next);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return {
    addr: `127.0.0.1:${srv.address().port}`,
    close: () => new Promise((r) => {
      for (const s of socks) s.destroy();
      srv.close(r);
    }),
  };
}

test('the anchor is the send time: a late answer does not extend the give-up', async () => {
  const lease = 1000;
  let claimAt = 0;
  const srv = await fakeServer(async (sock, next) => {
    await next();
    sock.write(welcome);
    const claim = await next();
    claimAt = claim.at;
    // Answer late, then fall silent: no PONG ever.
    await new Promise((r) => setTimeout(r, 300));
    sock.write(granted(claim.body.readUInt32BE(0), 5n));
  });
  try {
    const s = await new Client({ address: srv.addr }).openSession({ lease });
    const cl = await s.acquire('x');
    const reason = await aborted(cl.signal, 3000);
    const lostAt = performance.now();
    assert.ok(reason instanceof HeartbeatTimeoutError, String(reason));
    // The anchor is the CLAIM's send time; a client anchoring at the
    // GRANTED's arrival, 300 ms later, would give up 300 ms later.
    const since = lostAt - claimAt;
    assert.ok(since >= 0.8 * lease - 20 && since < 0.8 * lease + 150, `gave up ${since.toFixed(0)} ms after the CLAIM was sent`);
    await cl.release();
  } finally {
    await srv.close();
  }
});

test('the client gives up at 0.8 of the lease after HELLO when WELCOME never comes', async () => {
  const lease = 500;
  let helloAt = 0;
  const srv = await fakeServer(async (sock, next) => {
    helloAt = (await next()).at;
  });
  try {
    await assert.rejects(new Client({ address: srv.addr }).openSession({ lease }), HeartbeatTimeoutError);
    const took = performance.now() - helloAt;
    assert.ok(took >= 0.8 * lease - 20 && took < 0.8 * lease + 150, `gave up after ${took.toFixed(0)} ms`);
  } finally {
    await srv.close();
  }
});

test('frames split byte by byte and coalesced in one write are read alike', async () => {
  const srv = await fakeServer(async (sock, next) => {
    await next();
    for (const b of welcome) {
      sock.write(Buffer.from([b]));
      await new Promise((r) => setTimeout(r, 2));
    }
    const c1 = await next();
    const c2 = await next();
    sock.write(Buffer.concat([granted(c1.body.readUInt32BE(0), 7n), granted(c2.body.readUInt32BE(0), 8n)]));
  });
  try {
    const s = await new Client({ address: srv.addr }).openSession({ lease: 2000 });
    const [a, b] = await Promise.all([s.acquire('a'), s.acquire('b')]);
    assert.equal(a.token, 7n);
    assert.equal(b.token, 8n);
    await s.close();
  } finally {
    await srv.close();
  }
});

test('a frame that breaks the order loses every claim and closes the connection', async () => {
  let closed;
  const srv = await fakeServer(async (sock, next) => {
    closed = new Promise((r) => sock.on('close', r));
    await next();
    sock.write(welcome);
    const c = await next();
    sock.write(granted(c.body.readUInt32BE(0), 9n));
    await new Promise((r) => setTimeout(r, 50));
    sock.write(granted(4242, 10n)); // answers nothing
  });
  try {
    const s = await new Client({ address: srv.addr }).openSession({ lease: 5000 });
    const cl = await s.acquire('a');
    const reason = await aborted(cl.signal, 3000);
    assert.ok(reason instanceof ProtocolViolationError, String(reason));
    assert.ok(s.error instanceof ProtocolViolationError);
    await closed;
  } finally {
    await srv.close();
  }
});
