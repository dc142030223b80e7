// A cluster: the client learns the ring, sends each claim to its name's
// owner, and opens resumable sessions that keep their locks through the
// death of a node (with a lease long enough: see docs/client.md).
//
//   BATON_NODES=127.0.0.1:7070,127.0.0.1:7170,127.0.0.1:7270 node examples/cluster.mjs
import { Client } from '../src/index.js';

const [address, ...nodes] = (process.env.BATON_NODES ?? '127.0.0.1:7070,127.0.0.1:7170,127.0.0.1:7270').split(',');
const client = new Client({ address, nodes });
const session = await client.openSession({ lease: 20000, label: 'cluster-example' });
session.on('ring', (members) => console.log('ring:', members.map((m) => `${m.id}${m.inRing ? '' : ' (out)'}`).join(' ')));

for (const name of ['a', 'jobs/nightly', 'db-migrate']) {
  const claim = await session.acquire(name);
  claim.session.on('resumed', () => console.log(`${name}: resumed on ${claim.session.node}, still held: ${claim.held}`));
  console.log(`${name}: held on node ${claim.session.node}, token ${claim.token}`);
}
await new Promise((r) => setTimeout(r, Number(process.env.HOLD_MS ?? 0)));
await session.close();
