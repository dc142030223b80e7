// Real baton servers for the tests: a single `baton serve` or a cluster
// of three nodes on loopback, from the binary named by BATON_BIN.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Client } from '../src/index.js';

export const BIN = process.env.BATON_BIN;

/** Skip reason when no binary is given (the Go test always gives one). */
export const skipNoBin = BIN ? false : 'BATON_BIN is not set (run through the Go test clients/node, or go build -o /tmp/baton ./cmd/baton)';

/** A free loopback port (the kernel's choice; closed before use). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts `baton serve` with args and resolves when it listens: to
 * { addr, admin, proc, stop(), kill() }.
 */
export function startServer(args = [], { env = {} } = {}) {
  const proc = spawn(BIN, ['serve', '-listen', '127.0.0.1:0', '-admin-listen', '127.0.0.1:0', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env },
  });
  return new Promise((resolve, reject) => {
    let log = '';
    const t = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error('baton serve did not start within 10s:\n' + log));
    }, 10000);
    proc.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`baton serve exited with ${code}:\n${log}`));
    });
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /msg="baton listening" addr=(\S+) ops_addr=\S+ admin_addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(t);
        proc.removeAllListeners('exit');
        proc.stderr.removeAllListeners('data');
        proc.stderr.resume();
        resolve(wrap(proc, { addr: m[1], admin: m[2] }));
      }
    });
  });
}

function wrap(proc, fields) {
  const exited = new Promise((r) => proc.once('exit', r));
  return {
    ...fields,
    proc,
    exited,
    /** SIGTERM, and wait for the exit. */
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
    /** SIGKILL, and wait for the exit. */
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}

/** Calls the admin API: POST path on admin (host:port). Resolves to { status, body }. */
export function adminPost(admin, p) {
  return new Promise((resolve, reject) => {
    const [host, port] = admin.split(':');
    const req = http.request({ host, port, path: p, method: 'POST' }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Starts three cluster nodes on loopback (n1 forms the cluster, n2 and n3
 * join) and resolves when a client sees all three in the ring.
 */
export async function startCluster(extra = []) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'baton-node-cluster-'));
  const nodes = [];
  const ports = [];
  for (let i = 0; i < 9; i++) ports.push(await freePort());
  try {
    for (let i = 0; i < 3; i++) {
      const id = `n${i + 1}`;
      const listen = `127.0.0.1:${ports[3 * i]}`;
      const admin = `127.0.0.1:${ports[3 * i + 1]}`;
      const raft = `127.0.0.1:${ports[3 * i + 2]}`;
      const args = ['serve', '-node-id', id, '-data-dir', path.join(dir, id), '-listen', listen,
        '-raft-listen', raft, '-admin-listen', admin, ...extra];
      args.push(...(i === 0 ? ['-bootstrap'] : ['-join', nodes[0].admin]));
      const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      let log = '';
      proc.stderr.on('data', (d) => { log = (log + d).slice(-20000); });
      const n = wrap(proc, { id, addr: listen, admin, raft });
      n.log = () => log;
      nodes.push(n);
      await waitFor(async () => {
        if (proc.exitCode !== null) throw new Error(`${id} exited:\n${log}`);
        return /baton listening/.test(log);
      }, 15000, `${id} to listen`);
    }
    await waitRing(nodes, 3);
  } catch (e) {
    await Promise.all(nodes.map((n) => n.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    nodes,
    dir,
    async stop() {
      await Promise.all(nodes.map((n) => n.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Waits until a client of nodes sees want members in the ring. */
export async function waitRing(nodes, want, timeout = 30000) {
  const live = nodes.filter((n) => n.proc.exitCode === null && n.proc.signalCode === null);
  const c = new Client({ address: live[0].addr, nodes: live.slice(1).map((n) => n.addr), routing: 'direct' });
  await waitFor(async () => {
    let s;
    try {
      s = await c.openSession({ lease: 2000, noResume: true });
      const r = s._router;
      return r.members.filter((m) => m.inRing).length === want;
    } catch {
      return false;
    } finally {
      await s?.close();
    }
  }, timeout, `a ring of ${want}`);
}

/** Polls cond every 100 ms until it is true or timeout ms passed. */
export async function waitFor(cond, timeout, what) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Resolves with the value of the first emission of event on emitter (or rejects after ms). */
export function once(emitter, event, ms = 10000) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no ${event} within ${ms} ms`)), ms);
    emitter.once(event, (v) => {
      clearTimeout(t);
      resolve(v);
    });
  });
}

/** Resolves with signal.reason when it aborts (or rejects after ms). */
export function aborted(signal, ms = 10000) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const t = setTimeout(() => reject(new Error(`signal not aborted within ${ms} ms`)), ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve(signal.reason);
    }, { once: true });
  });
}
