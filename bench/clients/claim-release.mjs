// Claim + release on an open session, the way the Go client's benchmark
// does it: acquire (one round trip), then release without waiting for
// RELEASED (one write); the next claim's answer comes after the RELEASE.
// Also the cycle that awaits RELEASED (two round trips).
//
//   node bench/clients/claim-release.mjs 127.0.0.1:7070 [cycles]
import { performance } from 'node:perf_hooks';
import { Client } from '../../clients/node/src/index.js';

const addr = process.argv[2] ?? '127.0.0.1:7070';
const cycles = Number(process.argv[3] ?? 2000);
const s = await new Client({ address: addr }).openSession({ lease: 10000, label: 'bench-node' });
const name = `bench-node-${process.pid}`;

async function run(awaitReleased) {
  const d = new Float64Array(cycles);
  for (let i = 0; i < 200; i++) {
    const c = await s.acquire(name);
    const r = c.release();
    if (awaitReleased) await r;
  }
  const t0 = performance.now();
  for (let i = 0; i < cycles; i++) {
    const a = performance.now();
    const c = await s.acquire(name);
    const r = c.release();
    if (awaitReleased) await r;
    d[i] = performance.now() - a;
  }
  const total = performance.now() - t0;
  d.sort();
  const q = (p) => Math.round(d[Math.min(cycles - 1, Math.floor(p * cycles))] * 1000);
  return { p50_us: q(0.5), p99_us: q(0.99), per_sec: Math.round(cycles / (total / 1000)) };
}

const out = { client: 'node', cycles, release_written: await run(false), release_answered: await run(true) };
await s.close();
console.log(JSON.stringify(out));
