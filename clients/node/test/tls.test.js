// TLS and mutual TLS against a real `baton serve`, with certificates made
// here by openssl.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '../src/index.js';
import { startServer, skipNoBin } from './helpers.js';

function haveOpenSSL() {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const skip = skipNoBin || (haveOpenSSL() ? false : 'openssl is not installed');

/** A CA, a server certificate for 127.0.0.1 and a client certificate, in dir. */
function makeCerts(dir) {
  const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
    '-subj', '/CN=baton-test-ca', '-keyout', 'ca.key', '-out', 'ca.pem');
  for (const [name, ext] of [
    ['server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth'],
    ['client', 'subjectAltName=DNS:worker-1\nextendedKeyUsage=clientAuth'],
  ]) {
    writeFileSync(path.join(dir, `${name}.ext`), ext + '\n');
    ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${name}`,
      '-keyout', `${name}.key`, '-out', `${name}.csr`);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
      '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`);
  }
  const read = (f) => readFileSync(path.join(dir, f));
  return { ca: read('ca.pem'), cert: read('client.pem'), key: read('client.key') };
}

describe('TLS', { skip }, () => {
  let dir;
  let certs;
  let srv;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'baton-node-tls-'));
    certs = makeCerts(dir);
    srv = await startServer(['-tls-cert', path.join(dir, 'server.pem'), '-tls-key', path.join(dir, 'server.key'),
      '-tls-client-ca', path.join(dir, 'ca.pem')]);
  });
  after(async () => {
    await srv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('mutual TLS: a client with a certificate claims locks', async () => {
    const client = new Client({ address: srv.addr, tls: { ca: certs.ca, cert: certs.cert, key: certs.key } });
    const got = await client.withLock('tls-job', async (token) => token, { lease: 2000 });
    assert.equal(typeof got, 'bigint');
    assert.ok(got > 0n);
  });

  test('a client without a certificate is refused', async () => {
    const client = new Client({ address: srv.addr, tls: { ca: certs.ca } });
    await assert.rejects(client.openSession({ lease: 2000 }));
  });

  test('a client that does not trust the server\'s CA is refused', async () => {
    const client = new Client({ address: srv.addr, tls: { cert: certs.cert, key: certs.key } });
    await assert.rejects(client.openSession({ lease: 2000 }), (e) => /self.signed|unable to verify|certificate/i.test(e.message));
  });

  test('plain TCP to a TLS server does not open a session', async () => {
    const client = new Client({ address: srv.addr });
    await assert.rejects(client.openSession({ lease: 1000 }));
  });
});
