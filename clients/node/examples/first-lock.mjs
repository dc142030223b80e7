// The first lock: run a job only while holding "nightly-report", with the
// fencing token passed to the storage it writes to.
//
//   baton serve &                  # listens on 127.0.0.1:7070
//   node examples/first-lock.mjs
import { Client } from '../src/index.js';

const client = new Client({ address: process.env.BATON_ADDR ?? '127.0.0.1:7070' });

await client.withLock('nightly-report', async (token, signal) => {
  console.log(`holding nightly-report with fencing token ${token}`);
  // Long work checks the signal: it aborts the moment the lock is lost.
  for (let step = 0; step < 5; step++) {
    signal.throwIfAborted();
    await new Promise((r) => setTimeout(r, 200));
  }
  console.log('done');
}, { lease: 5000 });
