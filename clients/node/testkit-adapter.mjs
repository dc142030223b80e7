#!/usr/bin/env node
// The JavaScript client's adapter for `baton testkit -- node testkit-adapter.mjs`.
//
// Environment: BATON_TESTKIT_ADDR (host:port), BATON_TESTKIT_NAME,
// BATON_TESTKIT_LEASE_MS, BATON_TESTKIT_RESUMABLE ("1" or "0"). It opens
// a session with that lease (resumable when asked), claims NAME
// exclusively, waiting, and prints one JSON line per event at once:
//   {"event":"held","token":"N"}      the claim is held
//   {"event":"lost","reason":"..."}   the library told the work of a loss
//   {"event":"released"}              after a "release" asked for
//   {"event":"error","message":"..."} anything else that failed
// Standard input: "release" releases the claim, "close" closes the session
// and exits 0; the end of input does the same as "close".
//
// The work here is nothing: it stops the moment it is told of a loss, so
// the adapter then tells the library that the work has stopped (which lets
// it close the connection; before that it holds it open, at most until
// anchor + lease).

import { writeSync } from 'node:fs';
import readline from 'node:readline';
import { Client } from './src/index.js';

// Synchronous, so that a line is out before whatever the library does next.
const say = (obj) => writeSync(1, JSON.stringify(obj) + '\n');

const addr = process.env.BATON_TESTKIT_ADDR;
const name = process.env.BATON_TESTKIT_NAME;
const lease = Number(process.env.BATON_TESTKIT_LEASE_MS);
const resumable = process.env.BATON_TESTKIT_RESUMABLE === '1';

let session = null;
let claim = null;
let released = false;
const stopWaiting = new AbortController();

async function main() {
  if (!addr || !name || !Number.isInteger(lease) || lease <= 0) {
    say({ event: 'error', message: 'BATON_TESTKIT_ADDR, BATON_TESTKIT_NAME and BATON_TESTKIT_LEASE_MS (ms > 0) are required' });
    process.exit(2);
  }
  const client = new Client({ address: addr, routing: 'off' });
  session = await client.openSession({ lease, resumable, label: 'testkit-node' });
  session.on('lost', () => {}); // the claim's own event reports the loss
  claim = await session.acquire(name, { signal: stopWaiting.signal });
  if (!claim.signal.aborted) {
    claim.on('lost', (err) => {
      say({ event: 'lost', reason: err?.message ?? String(err) });
      claim.release(); // the work has stopped
    });
    say({ event: 'held', token: claim.token.toString() });
  }
}

async function release() {
  if (released) return say({ event: 'released' });
  released = true;
  if (claim) await claim.release();
  else stopWaiting.abort(new Error('released before it was granted'));
  say({ event: 'released' });
}

async function close() {
  try {
    await session?.close();
  } finally {
    process.exit(0);
  }
}

const started = main().catch((err) => {
  if (released && err?.message === 'released before it was granted') return;
  say({ event: 'error', message: err?.message ?? String(err) });
});

const rl = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
rl.on('line', (line) => {
  const cmd = line.trim();
  queue = queue.then(async () => {
    if (cmd === 'release') await release();
    else if (cmd === 'close') await close();
    else if (cmd !== '') say({ event: 'error', message: `unknown command ${JSON.stringify(cmd)}` });
  }).catch((err) => say({ event: 'error', message: err?.message ?? String(err) }));
});
rl.on('close', () => {
  queue = queue.then(close, close);
});
