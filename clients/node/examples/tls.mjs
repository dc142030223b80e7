// Mutual TLS: the server runs with -tls-cert, -tls-key and -tls-client-ca;
// the client trusts the server's CA and presents its own certificate (its
// identity for the server's ACL).
//
//   CA=ca.pem CERT=client.pem KEY=client.key node examples/tls.mjs
import { readFileSync } from 'node:fs';
import { Client } from '../src/index.js';

const client = new Client({
  address: process.env.BATON_ADDR ?? '127.0.0.1:7070',
  tls: {
    ca: readFileSync(process.env.CA ?? 'ca.pem'),
    cert: readFileSync(process.env.CERT ?? 'client.pem'),
    key: readFileSync(process.env.KEY ?? 'client.key'),
    // servername: 'locks.internal', // when the address is not the certificate's name
  },
});
const token = await client.withLock('secure-job', async (t) => t, { lease: 5000 });
console.log('held secure-job with token', token);
