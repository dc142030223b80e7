// Lock + unlock of one Redis lock with node-redis: SET NX PX, then a Lua
// compare-and-delete (the pattern the Redis documentation gives): two
// round trips, as a baton claim + release that awaits RELEASED. Prints one
// JSON line, as the other clients here do.
//
//   node bench/clients/redislock.mjs 127.0.0.1:6379 [cycles]
//   (node-redis from NODE_PATH: bench/clients/run installs it)
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { createClient } = require(process.env.NODE_REDIS ?? 'redis');
const addr = process.argv[2] ?? '127.0.0.1:6379';
const cycles = Number(process.argv[3] ?? 2000);
const client = createClient({ url: `redis://${addr}` });
await client.connect();
const name = `bench-node-redis-${process.pid}`;
const unlock = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;

async function cycle() {
  const a = performance.now();
  const token = randomBytes(16).toString('hex');
  if ((await client.set(name, token, { NX: true, PX: 10000 })) !== 'OK') throw new Error('not acquired');
  await client.eval(unlock, { keys: [name], arguments: [token] });
  return performance.now() - a;
}

for (let i = 0; i < 200; i++) await cycle();
const d = new Float64Array(cycles);
const t0 = performance.now();
for (let i = 0; i < cycles; i++) d[i] = await cycle();
const total = performance.now() - t0;
d.sort();
const q = (p) => Math.round(d[Math.min(cycles - 1, Math.floor(p * cycles))] * 1000);
console.log(JSON.stringify({ client: 'node-redis', cycles, release_answered: { p50_us: q(0.5), p99_us: q(0.99), per_sec: Math.round(cycles / (total / 1000)) } }));
await client.quit();
