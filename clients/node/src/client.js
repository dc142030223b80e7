import net from 'node:net';
import tls from 'node:tls';
import * as P from './protocol.js';
import { Router, Session } from './session.js';
import { ValidationError } from './errors.js';

/**
 * Splits "host:port" (or "[v6]:port").
 * @param {string} addr
 */
function splitAddr(addr) {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(addr) ?? /^([^:]*):(\d+)$/.exec(addr);
  if (!m) throw new ValidationError(`baton: bad address ${JSON.stringify(addr)}: want host:port`);
  return { host: m[1] || '127.0.0.1', port: Number(m[2]) };
}

/**
 * A baton client: holds the configuration, no connection. Safe to share.
 *
 * @example
 * const client = new Client({ address: '127.0.0.1:7070' });
 * await client.withLock('nightly-report', async (token, signal) => {
 *   await build(token, signal); // runs only while the lock is held
 * }, { lease: 5000 });
 */
export class Client {
  /** @param {import('../index.js').ClientOptions} opts */
  constructor(opts) {
    if (!opts?.address) throw new ValidationError('baton: Client needs an address (host:port)');
    this._address = opts.address;
    this._nodes = opts.nodes ?? [];
    for (const a of [this._address, ...this._nodes]) splitAddr(a);
    this._tls = opts.tls === true ? {} : opts.tls || null;
    this._routing = opts.routing ?? 'auto';
    if (!['auto', 'direct', 'off'].includes(this._routing)) throw new ValidationError(`baton: routing must be auto, direct or off, not ${this._routing}`);
    this._minHeartbeat = opts.minHeartbeatInterval ?? 100;
    this._onLost = opts.onLost;
  }

  /** Whether the client routes claims to their owners whatever the server says. @internal */
  get _routes() {
    return this._routing === 'direct' || (this._routing === 'auto' && this._nodes.length > 0);
  }

  /** Opens a socket to addr (TLS when configured). @internal */
  _connect(addr) {
    const { host, port } = splitAddr(addr);
    if (!this._tls) return net.connect({ host, port });
    const servername = this._tls.servername ?? (net.isIP(host) ? undefined : host);
    return tls.connect({ ...this._tls, host, port, servername });
  }

  /**
   * Opens a version 2 session. Options: `lease` (ms, required), `label`,
   * `resumable` (ask for a resumable session; the default with a
   * cluster), `noResume`, `addrs` (the addresses the session may use,
   * tried in turn; default `address` then `nodes`), `signal`.
   * @param {import('../index.js').SessionOptions} opts
   * @returns {Promise<Session>}
   */
  async openSession(opts) {
    P.checkLease(opts?.lease);
    const label = opts.label ?? '';
    if (Buffer.byteLength(label) > P.MAX_LABEL_LEN || !label.isWellFormed()) {
      throw new ValidationError('baton: label must be at most 255 bytes of UTF-8');
    }
    const resumable = !!opts.resumable || (this._routes && !opts.noResume);
    const addrs = opts.addrs?.length ? [...opts.addrs] : [this._address, ...this._nodes];
    const s = await this._openOn(addrs, { lease: opts.lease, label, resumable }, opts.signal);
    const clusterNode = (s._conn.welcome.flags & P.WELCOME_RING) !== 0;
    if (this._routes || (this._routing === 'auto' && clusterNode)) {
      s._router = new Router(s);
      s._askRing(true);
      let t;
      await Promise.race([s._router.first, new Promise((r) => { t = setTimeout(r, opts.lease); })]);
      clearTimeout(t);
    }
    return s;
  }

  /**
   * Opens a session on the first of addrs that accepts. @internal
   * @returns {Promise<Session>}
   */
  async _openOn(addrs, opts, signal) {
    let last;
    for (let i = 0; i < addrs.length; i++) {
      const s = new Session(this, opts, addrs, i);
      try {
        await s._open(signal);
        return s;
      } catch (e) {
        last = e;
        if (signal?.aborted || !isDialError(e)) throw e;
      }
    }
    throw last;
  }

  /**
   * Opens a session, runs fn(token, signal) while the lock is held, then
   * releases and closes. Options: those of Session.acquire plus `lease`
   * (default 10000 ms) and `label`.
   *
   * @template R
   * @param {string} name
   * @param {(token: bigint, signal: AbortSignal) => Promise<R>|R} fn
   * @param {import('../index.js').WithLockOptions} [opts]
   * @returns {Promise<R>}
   */
  async withLock(name, fn, opts = {}) {
    P.nameBytes(name);
    const s = await this.openSession({ lease: opts.lease ?? 10000, label: opts.label, signal: opts.signal, resumable: opts.resumable });
    try {
      return await s.withLock(name, fn, opts);
    } finally {
      await s.close();
    }
  }
}

/** A failure to connect (the next address may do). */
function isDialError(e) {
  return typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code) && e.syscall !== undefined;
}
