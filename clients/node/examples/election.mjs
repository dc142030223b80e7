// Leader election: run several candidates and an observer.
//
//   node examples/election.mjs campaign 10.0.0.5:5432
//   node examples/election.mjs observe
//
// A candidate leads until it is stopped (Ctrl-C) or loses its claim; the
// next candidate then leads with a larger fencing token.
import { Client } from '../src/index.js';

const [role, value] = process.argv.slice(2);
const client = new Client({ address: process.env.BATON_ADDR ?? '127.0.0.1:7070' });
const session = await client.openSession({ lease: 5000, label: role });
const e = session.election('db-primary');

if (role === 'campaign') {
  const token = await e.campaign(value);
  console.log('leading with token', token); // pass the token to what you write
  e.signal.addEventListener('abort', () => {
    console.log('lost:', e.signal.reason.message);
    process.exit(1);
  });
} else {
  for await (const leader of e.observe()) {
    console.log(leader ? `leader ${leader.label} at ${leader.value} (token ${leader.token})` : 'no leader');
  }
}
