// A version 2 session: one connection carrying many claims, the client
// rule of docs/protocol-v2-client.md ("v2 client obligations") and, for a resumable
// session, reconnection with re-assertion of every claim.

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import * as P from './protocol.js';
import {
  BatonError, BusyError, ConnectionClosedError, HeartbeatTimeoutError, NotResumedError, NotSupportedError,
  ProtocolViolationError, ReassertRefusedError, ServerError, SessionClosedError, ValidationError,
  Codes, serverError,
} from './errors.js';
import { ownerOf } from './ring.js';
import { Election, Watch } from './election.js';

const now = () => performance.now();
const GIVE_UP = 0.8;
const MIN_RESUME_BACKOFF = 10;
const MAX_RESUME_BACKOFF = 1000;
const MAX_FRESH_SESSIONS = 32;
const NODE_DOWN_FOR = 1000;

function violation(msg) {
  return new ProtocolViolationError('baton: protocol violation: ' + msg);
}

/** Whether a failure ends a connection but may leave a resumable session to resume. */
function isBreak(err) {
  if (err instanceof ServerError) {
    return err.frame === 'error' && (err.code === Codes.SHUTTING_DOWN || err.code === Codes.NOT_OWNER);
  }
  return err instanceof ConnectionClosedError || err?.fresh === true;
}

/** @param {number} ms @param {AbortSignal} [signal] */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

const jitter = (d) => d / 2 + Math.random() * (d / 2);

/**
 * Normalizes a claim's mode option.
 * @param {any} opts
 */
function modeOf(opts) {
  const mode = opts?.mode ?? 'exclusive';
  const code = P.MODES[mode];
  if (!code) throw new ValidationError(`baton: unknown mode ${JSON.stringify(mode)} (exclusive, shared or semaphore)`);
  const limit = mode === 'semaphore' ? opts.limit : 0;
  if (mode === 'semaphore' && (!Number.isInteger(limit) || limit < 1 || limit > 0xffffffff)) {
    throw new ValidationError('baton: a semaphore claim needs a whole limit of at least 1');
  }
  if (mode !== 'semaphore' && opts?.limit) throw new ValidationError(`baton: a limit is for semaphore claims, not ${mode}`);
  return { mode, code, limit };
}

/**
 * One claim on a lock, made on a Session. Its `signal` aborts, and the
 * 'lost' event fires, the moment the claim stops being believed held
 * without a release: the guarded work must stop then.
 *
 * Events: 'lost' (err) - the claim was lost (not released).
 */
export class Claim extends EventEmitter {
  /** @internal */
  constructor(session, id, name, nameBuf, m, noWait) {
    super();
    /** @internal */ this._s = session;
    /** @internal */ this._id = id;
    /** The lock's name. */
    this.name = name;
    /** 'exclusive', 'shared' or 'semaphore'. */
    this.mode = m.mode;
    /** The semaphore limit, 0 for other modes. */
    this.limit = m.limit;
    /** @internal */ this._m = m;
    /** @internal */ this._nameBuf = nameBuf;
    /** @internal */ this._noWait = noWait;
    /** @internal */ this._state = 'pending'; // pending, queued, held, ended
    /** @internal */ this._token = 0n;
    /** @internal */ this._reqs = 0; // unanswered requests about the id
    /** @internal */ this._releasing = false; // a RELEASE is unanswered
    /** @internal */ this._wantRelease = false; // release asked while the session resumes
    /** @internal */ this._workDone = false;
    /** @internal */ this._done = false; // released by the application
    /** @internal */ this._counted = false;
    /** @internal */ this._reassert = false; // its re-assertion is unanswered
    /** @internal */ this._until = 0; // give-up while re-asserting
    /** @internal */ this._names = []; // sessions to name in a re-assertion
    /** @internal */ this._at = 0;
    /** @internal */ this._sentOn = null; // the session its re-assertion was sent on
    /** @internal */ this._err = null;
    /** @internal */ this._waiter = null;
    /** @internal */ this._ac = new AbortController();
    /** @internal */ this._value = null; // Buffer: the claim's value
    let resolveReleased;
    /** @internal */ this._released = new Promise((r) => { resolveReleased = r; });
    /** @internal */ this._resolveReleased = resolveReleased;
  }

  /** The fencing token of the grant (a BigInt); 0n until granted. */
  get token() {
    return this._token;
  }

  /** The claim's value (the latest proclaimed), or null for a claim made without one. */
  get value() {
    return this._value;
  }

  /**
   * Sets a new value on the claim (PROCLAIM): the watchers of a held
   * claim's name are told before the promise resolves. value is a string
   * (sent as UTF-8) or bytes, at most 1024 bytes (else ValidationError,
   * nothing sent). Rejects with NotSupportedError on a server without
   * values, and with the claim's loss when it has ended.
   * @param {string|Uint8Array} value
   * @returns {Promise<void>}
   */
  proclaim(value) {
    let b;
    try {
      b = P.valueBytes(value);
    } catch (e) {
      return Promise.reject(e);
    }
    return this._s._proclaim(this, b);
  }

  /** Aborts when the claim stops being held: lost, released, or its session closed. `signal.reason` says why. */
  get signal() {
    return this._ac.signal;
  }

  /** Whether the claim is held and believed so now. */
  get held() {
    return this._state === 'held' && !this._err && !this._done;
  }

  /** Why the claim ended (loss, release: null), or null while held. */
  get error() {
    return this._err;
  }

  /** The session the claim lives on (a routed session's claim lives on its owner node's session). */
  get session() {
    return this._s;
  }

  /**
   * Releases the claim. The claim stops being held at once (`signal`
   * aborts); the returned promise resolves when the server has applied
   * the release (or the session ended, which releases everything). It
   * never rejects and may be called more than once.
   * @returns {Promise<void>}
   */
  release() {
    this._s._release(this);
    return this._released;
  }
}

/**
 * A version 2 session with a baton server: any number of claims on one
 * connection, kept alive by PINGs. Created by Client.openSession.
 *
 * Events: 'lost' (err) - the session ended by a loss (every claim on it
 * is lost); 'resumed' - a resumable session reconnected and re-asserted
 * its claims; 'ring' (members) - a cluster's ring changed.
 */
export class Session extends EventEmitter {
  /** @internal */
  constructor(client, opts, addrs, addrIdx) {
    super();
    this._c = client;
    this._lease = opts.lease;
    this._label = opts.label ?? '';
    this._labelBuf = Buffer.from(this._label, 'utf8');
    this._wantResume = !!opts.resumable;
    this._addrs = addrs;
    this._addrIdx = addrIdx;
    this._claims = new Map();
    this._nextId = 0;
    this._err = null;
    this._ac = new AbortController();
    this._state = 'opening'; // opening, open, resuming, ended
    this._gen = 0;
    this._holding = 0;
    this._closeTimer = null;
    this._timer = null;
    this._timerAt = Infinity;
    this._pingTimer = null;
    this._ident = null;
    this._ring = 0n;
    this._resumedWaiters = [];
    this._fresh = 0;
    this._freshBackoff = 0;
    this._router = null;
    this._members = [];
    this._ringWaiter = null;
    this._closing = false;
    this._drain = null;
    this._watches = new Map();
    this._values = false;
  }

  /** Whether the server offers values, watches and elections on this session (it answered HELLO's values flag). */
  get values() {
    return this._values;
  }

  /** The session lease in milliseconds. */
  get lease() {
    return this._lease;
  }

  /** The server's session id (a BigInt); after a resume, the new session's. */
  get id() {
    return this._id;
  }

  /** Whether the server granted a resumable session. */
  get resumable() {
    return this._ident !== null;
  }

  /** The cluster node the session lives on ('' on a single server or when not resumable). */
  get node() {
    return this._ident?.node ?? '';
  }

  /** The address ("host:port") the session is connected to. */
  get address() {
    return this._addrs[this._addrIdx];
  }

  /** Aborts when the session ends (loss or close); `signal.reason` says why. */
  get signal() {
    return this._ac.signal;
  }

  /** Why the session ended, or null while it lives. */
  get error() {
    return this._err;
  }

  // ---- opening and connections ----

  /** @internal Opens the first connection; rejects on failure. */
  async _open(signal) {
    const addr = this._addrs[this._addrIdx];
    let conn;
    try {
      conn = await this._dial(addr, signal, Infinity, true);
    } catch (e) {
      // A server before values refuses the flag: open again without it.
      if (!(e instanceof ServerError && e.frame === 'error' && e.code === Codes.UNSUPPORTED_FEATURE)) throw e;
      conn = await this._dial(addr, signal, Infinity, false);
    }
    this._install(conn);
    this._state = 'open';
    this._schedulePing();
  }

  /**
   * Connects to addr, sends the opening and waits for WELCOME. Resolves
   * to the connection's state; rejects with the server's error, a
   * violation, a dial error or signal's reason.
   * @internal
   */
  _dial(addr, signal, giveUpAt, values = this._values) {
    return new Promise((resolve, reject) => {
      const sock = this._c._connect(addr);
      const lease = this._lease;
      const conn = {
        sock, addr, rbuf: null, pending: [], anchor: 0, deadline: 0, closeBy: 0,
        pingInflight: false, pingSent: 0, pongAt: 0, srtt: 0, sampled: false, seq: 0n,
        welcome: null, members: [], watching: false, maxFrame: P.MAX_FRAME_LEN,
      };
      let done = false;
      const finish = (err) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        sock.removeListener('data', onData);
        sock.removeListener('error', onError);
        sock.removeListener('close', onClose);
        if (err) {
          sock.on('error', () => {}); // a late TLS error must not go unhandled
          sock.destroy();
          reject(err);
        } else {
          resolve(conn);
        }
      };
      const onAbort = () => finish(signal.reason);
      const onError = (e) => finish(e);
      const onClose = () => finish(new ConnectionClosedError(`baton: ${addr} closed the connection during the opening`));
      let timer = setTimeout(
        () => finish(new HeartbeatTimeoutError(`baton: no WELCOME from ${addr} within 0.8 of the lease`)),
        Math.min(lease, Math.max(0, giveUpAt - now())),
      );
      if (signal?.aborted) return finish(signal.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      sock.on('error', onError);
      sock.on('close', onClose);
      sock.once(this._c._tls ? 'secureConnect' : 'connect', () => {
        const t = now();
        conn.pending.push({ kind: 'hello', sent: t });
        conn.anchor = t;
        conn.deadline = t + GIVE_UP * lease;
        conn.closeBy = t + lease;
        conn.pingSent = t;
        clearTimeout(timer);
        timer = setTimeout(() => finish(new HeartbeatTimeoutError(`baton: no WELCOME from ${addr} within 0.8 of the lease`)),
          Math.max(0, Math.min(conn.deadline, giveUpAt) - now()));
        const flags = (this._wantResume ? P.HELLO_RESUMABLE : 0) | (values ? P.HELLO_VALUES : 0);
        sock.setNoDelay(true);
        sock.write(Buffer.concat([P.PREAMBLE, P.hello(lease, flags, this._labelBuf)]));
      });
      const onData = (chunk) => {
        conn.rbuf = conn.rbuf ? Buffer.concat([conn.rbuf, chunk]) : chunk;
        const b = conn.rbuf;
        if (b[0] === P.T.V1ERROR) {
          // A version 1 server's ERROR (0x10: it does not speak version 2).
          if (b.length < 3 || b.length < 3 + b[2]) return;
          return finish(serverError(b[1], b.subarray(3, 3 + b[2]).toString('utf8')));
        }
        if (b.length < 2) return;
        const len = b.readUInt16BE(0);
        if (len === 0 || len > P.MAX_FRAME_LEN) return finish(violation(`frame length ${len}`));
        if (b.length < 2 + len) return;
        let f;
        try {
          f = P.decode(b.subarray(2, 2 + len));
        } catch (e) {
          return finish(e);
        }
        conn.rbuf = b.length > 2 + len ? b.subarray(2 + len) : null;
        if (f.type === P.T.ERROR) return finish(serverError(f.code, f.reason));
        if (f.type !== P.T.WELCOME) return finish(violation(`frame 0x${f.type.toString(16)} answers HELLO`));
        const asked = (this._wantResume ? P.WELCOME_RESUMABLE | P.WELCOME_RING : 0) | (values ? P.WELCOME_VALUES : 0);
        if (f.flags & ~asked) return finish(violation(`WELCOME with flags 0x${f.flags.toString(16)} not asked for`));
        if (this._wantResume && !(f.flags & P.WELCOME_RESUMABLE)) {
          // A cluster node that does not offer resumption to this session is
          // still a working session; say it is not resumable.
        }
        const t = now();
        if (t > conn.deadline) return finish(new HeartbeatTimeoutError(`baton: WELCOME from ${addr} came after 0.8 of the lease`));
        conn.pending.shift();
        conn.pongAt = t;
        conn.welcome = f;
        if (f.flags & P.WELCOME_VALUES) conn.maxFrame = P.MAX_VALUES_FRAME_LEN;
        finish(null);
      };
      sock.on('data', onData);
    });
  }

  /** Makes conn the connection in use. @internal */
  _install(conn) {
    const gen = ++this._gen;
    this._conn = conn;
    this._id = conn.welcome.session;
    this._ident = conn.welcome.flags & P.WELCOME_RESUMABLE
      ? { session: conn.welcome.session, secret: conn.welcome.secret, node: conn.welcome.node, nodeBytes: conn.welcome.nodeBytes }
      : null;
    this._ring = conn.welcome.ring;
    this._values = (conn.welcome.flags & P.WELCOME_VALUES) !== 0;
    const sock = conn.sock;
    sock.on('data', (chunk) => {
      if (gen === this._gen) this._onData(conn, chunk);
    });
    sock.on('error', (e) => {
      if (gen === this._gen) this._broken(new ConnectionClosedError(`baton: connection to ${conn.addr} failed: ${e.message}`, { cause: e }));
    });
    sock.on('close', () => {
      if (gen === this._gen) this._broken(new ConnectionClosedError(`baton: ${conn.addr} closed the connection`));
    });
    if (conn.rbuf) {
      const rest = conn.rbuf;
      conn.rbuf = null;
      queueMicrotask(() => gen === this._gen && this._onData(conn, rest));
    }
    this._armTimer();
  }

  // ---- the reader ----

  /** @internal */
  _onData(conn, chunk) {
    conn.rbuf = conn.rbuf ? Buffer.concat([conn.rbuf, chunk]) : chunk;
    while (conn === this._conn && this._state !== 'ended') {
      const b = conn.rbuf;
      if (!b || b.length < 2) return;
      const len = b.readUInt16BE(0);
      if (len === 0 || len > conn.maxFrame) return this._lose(violation(`frame length ${len}`));
      if (b.length < 2 + len) return;
      conn.rbuf = b.length > 2 + len ? b.subarray(2 + len) : null;
      let f;
      try {
        f = P.decode(b.subarray(2, 2 + len));
      } catch (e) {
        return this._lose(e);
      }
      try {
        this._frame(conn, f, now());
      } catch (e) {
        if (e instanceof BatonError) return this._lose(e);
        throw e;
      }
    }
  }

  /** Acts on one server frame. Throws a ProtocolViolationError for a frame that breaks the rules. @internal */
  _frame(conn, f, t) {
    if (this._state === 'ended') return;
    if (t > conn.deadline && this._state === 'open') {
      // Arrived after the give-up: believe nothing it says.
      return this._broken(new HeartbeatTimeoutError('baton: no answer within 0.8 of the lease'));
    }
    switch (f.type) {
      case P.T.ERROR:
        return this._broken(serverError(f.code, f.reason, 'error'));
      case P.T.PROMOTED:
      case P.T.REVOKED:
        return this._pushed(f);
      case P.T.MEMBER:
        conn.members.push(f);
        return;
      case P.T.RINGEND:
        if (f.count !== conn.members.length) throw violation(`RINGEND counts ${f.count} members, ${conn.members.length} came`);
        if (f.pushed) {
          if (!conn.watching) throw violation('a pushed ring without a watch');
          this._ringArrived(f.version, conn.members);
          conn.members = [];
          return;
        }
        break;
      case P.T.WELCOME:
        throw violation('a second WELCOME');
      case P.T.CHANGE: {
        const w = this._watches.get(f.claim);
        if (!w) throw violation(`CHANGE for ${f.claim}, which is not a watch`);
        if (f.kind !== P.CHANGE.SYNCED || w._answered) return w._change(f);
        break; // the first synced answers the WATCH
      }
    }
    const req = conn.pending[0];
    if (!req) throw violation(`frame 0x${f.type.toString(16)} with no request unanswered`);
    if (!fits(req, f)) throw violation(`frame 0x${f.type.toString(16)} does not answer the oldest request (${req.kind})`);
    if (f.type !== P.T.RINGEND && conn.members.length) throw violation('MEMBER frames outside a ring answer');
    conn.pending.shift();
    conn.anchor = req.sent;
    conn.deadline = req.sent + GIVE_UP * this._lease;
    conn.closeBy = req.sent + this._lease;
    if (req.kind === 'proclaim' || req.kind === 'watch' || req.kind === 'unwatch') {
      this._watchAnswer(req, f);
      this._armTimer();
      return;
    }
    switch (f.type) {
      case P.T.PONG: {
        conn.pingInflight = false;
        conn.pongAt = t;
        const rtt = Math.max(0, t - req.sent);
        conn.srtt = conn.sampled ? conn.srtt + (rtt - conn.srtt) / 5 : rtt;
        conn.sampled = true;
        this._schedulePing();
        break;
      }
      case P.T.RINGEND:
        this._ringArrived(f.version, conn.members);
        conn.members = [];
        break;
      case P.T.GRANTED:
      case P.T.QUEUED:
      case P.T.BUSY:
      case P.T.REFUSED:
        this._answered(req.claim, f, t);
        break;
      case P.T.RELEASED: {
        const cl = req.claim;
        cl._reqs--;
        cl._releasing = false;
        cl._state = 'ended';
        this._forget(cl);
        cl._resolveReleased();
        break;
      }
    }
    this._armTimer();
  }

  /** An answer to a CLAIM. @internal */
  _answered(cl, f, t) {
    cl._reqs--;
    if (f.type === P.T.QUEUED && f.ticket !== 0n) throw violation('a QUEUED with a queue ticket, not asked for');
    if (f.type === P.T.QUEUED && cl._noWait) throw violation('QUEUED for a no-wait claim');
    if (f.type === P.T.BUSY && !cl._noWait) throw violation('BUSY for a claim that waits');
    if (cl._reassert && cl._sentOn) return this._reasserted(cl, f, t);
    switch (f.type) {
      case P.T.GRANTED:
        cl._state = 'held';
        cl._token = f.token;
        if (cl._releasing || cl._err) break; // the RELEASE that follows ends it
        cl._waiter?.resolve(cl);
        cl._waiter = null;
        break;
      case P.T.QUEUED:
        cl._state = 'queued';
        break;
      case P.T.BUSY:
        this._end(cl, new BusyError(cl.name), false);
        break;
      case P.T.REFUSED:
        this._end(cl, serverError(f.code, f.reason, 'refused'), false);
        break;
    }
    this._forget(cl);
  }

  /** The answer to a PROCLAIM, a WATCH or the RELEASE of a watch. @internal */
  _watchAnswer(req, f) {
    switch (req.kind) {
      case 'proclaim': {
        const cl = req.claim;
        cl._reqs--;
        if (f.type === P.T.REFUSED) req.reject(serverError(f.code, f.reason, 'refused'));
        else if (f.status !== 0) req.reject(cl._err ?? new BatonError('baton: the claim has ended'));
        else req.resolve();
        this._forget(cl);
        return;
      }
      case 'watch':
        if (f.type === P.T.REFUSED) {
          this._watches.delete(req.watch._id);
          req.watch._answered = true;
          req.watch._readyFns.reject(serverError(f.code, f.reason, 'refused'));
          req.watch._end(serverError(f.code, f.reason, 'refused'));
          return;
        }
        req.watch._change(f);
        return;
      case 'unwatch':
        this._watches.delete(req.watch._id);
        req.watch._end(null);
    }
  }

  /** PROMOTED and REVOKED. @internal */
  _pushed(f) {
    const w = this._watches.get(f.claim);
    if (w) {
      if (f.type !== P.T.REVOKED || !w._answered) throw violation(`frame 0x${f.type.toString(16)} for watch ${f.claim}`);
      if (w._closing) return; // valid, changes nothing: RELEASED follows
      this._watches.delete(f.claim);
      w._end(serverError(f.code, f.reason, 'revoked'));
      return;
    }
    const cl = this._claims.get(f.claim);
    if (!cl) throw violation(`push for claim ${f.claim}, which is not a claim`);
    if (f.type === P.T.PROMOTED) {
      if (cl._state !== 'queued') throw violation(`PROMOTED for claim ${f.claim} in state ${cl._state}`);
      cl._state = 'held';
      cl._token = f.token;
      if (!cl._releasing && !cl._err) {
        cl._waiter?.resolve(cl);
        cl._waiter = null;
      }
      return;
    }
    if (cl._state !== 'queued' && cl._state !== 'held') throw violation(`REVOKED for claim ${f.claim} in state ${cl._state}`);
    const wasHeld = cl._state === 'held';
    cl._state = 'ended';
    if (!cl._releasing) this._end(cl, serverError(f.code, f.reason, 'revoked'), wasHeld);
    this._forget(cl);
  }

  /** Forgets a claim id once it has ended and nothing about it is unanswered. @internal */
  _forget(cl) {
    if (cl._state === 'ended' && cl._reqs === 0 && !cl._reassert && this._claims.get(cl._id) === cl) {
      this._claims.delete(cl._id);
      cl._resolveReleased();
      this._checkDrained();
    }
  }

  /**
   * Ends a claim once: its work is told (signal, 'lost') and a waiting
   * acquire rejected. @internal
   */
  _end(cl, err, loss) {
    if (cl._err) return;
    cl._err = err ?? new SessionClosedError();
    if (cl._state !== 'held') cl._workDone = true;
    cl._ac.abort(cl._err);
    if (loss && !cl._done) {
      try {
        this._c._onLost?.(cl, cl._err);
      } catch { /* a callback's failure must not stop the rule */ }
      if (cl.listenerCount('lost')) cl.emit('lost', cl._err);
    }
    if (cl._waiter) {
      cl._waiter.reject(cl._err);
      cl._waiter = null;
    }
  }

  // ---- requests ----

  /** @internal */
  _send(req, buf) {
    const conn = this._conn;
    req.sent = now();
    conn.pending.push(req);
    // Requests of one tick go out in one write (a RELEASE and the next CLAIM, say).
    if (!conn.corked) {
      conn.corked = true;
      conn.sock.cork();
      process.nextTick(() => {
        conn.corked = false;
        conn.sock.uncork();
      });
    }
    conn.sock.write(buf);
    this._armTimer();
  }

  /** @internal */
  _allocId() {
    for (;;) {
      this._nextId = (this._nextId + 1) >>> 0;
      if (this._nextId !== 0 && !this._claims.has(this._nextId) && !this._watches.has(this._nextId)) return this._nextId;
    }
  }

  /** @internal */
  _needValues() {
    if (!this._values) throw new NotSupportedError(`baton: values, watches and elections are not supported by this server (${this.address})`);
  }

  /** @internal */
  async _proclaim(cl, value) {
    await this._waitOpen();
    this._needValues();
    if (cl._state === 'ended' || cl._err || cl._done || cl._releasing || this._claims.get(cl._id) !== cl) {
      throw cl._err ?? new BatonError('baton: the claim has ended');
    }
    cl._value = value; // re-asserted with it should the connection break
    cl._reqs++;
    return new Promise((resolve, reject) => {
      this._send({ kind: 'proclaim', claim: cl, resolve, reject }, P.proclaim(cl._id, value));
    });
  }

  /**
   * Watches the holders of name without claiming it. Resolves once the
   * server has sent the current holders; iterate the Watch (or listen to
   * its 'change' event) for the holders after each change. Rejects with
   * NotSupportedError on a server without watches, and with the server's
   * refusal (a bad name, the access list, too many claims).
   * @param {string} name
   * @returns {Promise<Watch>}
   */
  async watch(name) {
    const nameBuf = P.nameBytes(name);
    if (this._router) return this._router.watch(name, nameBuf);
    return this._watch(name, nameBuf);
  }

  /** @internal */
  async _watch(name, nameBuf) {
    await this._waitOpen();
    this._needValues();
    const w = new Watch(this, this._allocId(), name, nameBuf);
    this._watches.set(w._id, w);
    this._send({ kind: 'watch', watch: w }, P.watch(w._id, nameBuf));
    return w._ready;
  }

  /** Ends a watch (Watch.close). @internal */
  _unwatch(w) {
    if (w._closing || this._watches.get(w._id) !== w) return;
    w._closing = true;
    if (this._state === 'open') this._send({ kind: 'unwatch', watch: w }, P.release(w._id));
    else {
      this._watches.delete(w._id);
      w._end(null);
    }
  }

  /**
   * The election on name: campaign to lead, observe who leads.
   * @param {string} name
   */
  election(name) {
    return new Election(this, name);
  }

  /** @internal Waits while the session resumes. */
  async _waitOpen(signal) {
    while (this._state === 'resuming') {
      await new Promise((resolve, reject) => {
        const onAbort = () => reject(signal.reason);
        this._resumedWaiters.push(() => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
        if (signal?.aborted) return onAbort();
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
    if (this._state !== 'open') throw this._err ?? new SessionClosedError();
  }

  /**
   * Claims a lock and resolves to the held Claim.
   *
   * Options: `mode` ('exclusive' default, 'shared', 'semaphore' with
   * `limit`), `wait` (default true; false rejects with BusyError when the
   * lock is taken), `timeout` (ms to wait in the queue, then the claim
   * leaves the queue and the promise rejects with a TimeoutError
   * DOMException), `signal` (an AbortSignal: aborting leaves the queue
   * and rejects with its reason).
   *
   * @param {string} name
   * @param {import('../index.js').AcquireOptions} [opts]
   * @returns {Promise<Claim>}
   */
  async acquire(name, opts = {}) {
    const nameBuf = P.nameBytes(name);
    const m = modeOf(opts);
    const noWait = opts.wait === false;
    const value = opts.value === undefined || opts.value === null ? null : P.valueBytes(opts.value);
    let signal = opts.signal;
    if (opts.timeout !== undefined) {
      const ts = AbortSignal.timeout(opts.timeout);
      signal = signal ? AbortSignal.any([signal, ts]) : ts;
    }
    signal?.throwIfAborted();
    if (this._router) return this._router.acquire(name, nameBuf, m, noWait, signal, value);
    return this._acquire(name, nameBuf, m, noWait, signal, value);
  }

  /** @internal */
  async _acquire(name, nameBuf, m, noWait, signal, value = null) {
    await this._waitOpen(signal);
    if (value) this._needValues();
    const id = this._allocId();
    const cl = new Claim(this, id, name, nameBuf, m, noWait);
    cl._value = value;
    this._claims.set(id, cl);
    const p = new Promise((resolve, reject) => {
      cl._waiter = { resolve, reject };
    });
    cl._reqs++;
    this._send({ kind: 'claim', claim: cl }, P.claim(id, noWait ? P.CLAIM_NOWAIT : 0, m.code, m.limit, nameBuf, undefined, value));
    let onAbort;
    if (signal) {
      onAbort = () => {
        if (!cl._waiter) return;
        const w = cl._waiter;
        cl._waiter = null;
        cl._err = signal.reason;
        cl._workDone = true;
        cl._ac.abort(signal.reason);
        this._release(cl, true);
        w.reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
    }
    try {
      return await p;
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Like acquire with `wait: false`: rejects with BusyError when the lock is taken.
   * @param {string} name
   * @param {import('../index.js').AcquireOptions} [opts]
   */
  tryAcquire(name, opts = {}) {
    return this.acquire(name, { ...opts, wait: false });
  }

  /**
   * Runs fn(token, signal) while the lock is held and releases it when fn
   * settles. `signal` aborts the moment the claim is lost: fn must stop
   * then. Resolves to fn's result. If the claim was lost while fn ran,
   * rejects with the loss (an AggregateError of fn's error and the loss
   * when fn rejected too): the work was not protected throughout.
   *
   * @template R
   * @param {string} name
   * @param {(token: bigint, signal: AbortSignal) => Promise<R>|R} fn
   * @param {import('../index.js').AcquireOptions} [opts]
   * @returns {Promise<R>}
   */
  async withLock(name, fn, opts = {}) {
    const cl = await this.acquire(name, opts);
    let result;
    let fnErr;
    let failed = false;
    try {
      result = await fn(cl.token, cl.signal);
    } catch (e) {
      failed = true;
      fnErr = e;
    }
    const lost = cl._err && !(cl._err instanceof SessionClosedError) ? cl._err : null;
    await cl.release();
    if (lost) throw failed ? new AggregateError([fnErr, lost], 'baton: the work failed and its lock was lost', { cause: lost }) : lost;
    if (failed) throw fnErr;
    return result;
  }

  /** Releases a claim (Claim.release). @internal */
  _release(cl, aborted = false) {
    if (!aborted) {
      cl._done = true;
      if (!cl._err) cl._ac.abort(new BatonError('baton: claim released'));
      if (cl._waiter) {
        cl._waiter.reject(new BatonError('baton: claim released before it was granted'));
        cl._waiter = null;
      }
    }
    this._workStopped(cl);
    if (cl._releasing || cl._wantRelease || this._claims.get(cl._id) !== cl) return;
    if (cl._state === 'ended' && cl._reqs === 0) return;
    if (this._state === 'resuming') {
      cl._wantRelease = true;
      return;
    }
    if (this._state !== 'open') return;
    cl._releasing = true;
    cl._reqs++;
    this._send({ kind: 'release', claim: cl }, P.release(cl._id));
  }

  /** Records that a claim's guarded work has stopped; may close a connection kept open for it. @internal */
  _workStopped(cl) {
    if (cl._workDone) return;
    cl._workDone = true;
    if (!cl._counted) return;
    if (--this._holding === 0) this._destroy();
  }

  // ---- heartbeats and the give-up ----

  /** @internal */
  _schedulePing() {
    const conn = this._conn;
    if (this._state !== 'open' || conn.pingInflight || this._pingTimer) return;
    const base = this._lease / 4;
    const floor = Math.min(this._c._minHeartbeat, base);
    const interval = Math.max(floor, Math.min(base, base - 2 * conn.srtt));
    const at = Math.max(conn.pingSent + interval, conn.pongAt);
    this._pingTimer = setTimeout(() => {
      this._pingTimer = null;
      if (this._state !== 'open' || conn !== this._conn || conn.pingInflight) return;
      conn.pingInflight = true;
      conn.seq++;
      this._send({ kind: 'ping', seq: conn.seq }, P.ping(conn.seq));
      conn.pingSent = conn.pending[conn.pending.length - 1].sent;
    }, Math.max(0, at - now()));
    this._pingTimer.unref?.();
  }

  /** The earliest moment the rule must look again. @internal */
  _nextCheck() {
    const conn = this._conn;
    let d = conn.deadline;
    if (this._ident && conn.pending.length) d = Math.min(d, conn.pending[0].sent + this._lease / 4);
    for (const cl of this._claims.values()) {
      if (cl._reassert && !cl._err) d = Math.min(d, cl._until);
    }
    return d;
  }

  /** Arms the one timer of the rule: give-up, silence, re-assertions overdue. @internal */
  _armTimer() {
    if (this._state === 'ended') return;
    const at = this._nextCheck();
    if (this._timer && this._timerAt <= at) return;
    clearTimeout(this._timer);
    this._timerAt = at;
    this._timer = setTimeout(() => {
      this._timer = null;
      this._timerAt = Infinity;
      this._check(now());
    }, Math.max(0, at - now()) + 1);
  }

  /** @internal */
  _check(t) {
    if (this._state === 'ended') return;
    this._expireReasserts(t);
    if (this._state === 'ended') return;
    const conn = this._conn;
    if (this._state === 'open' && t > conn.deadline) {
      return this._broken(new HeartbeatTimeoutError(`baton: no answer confirmed the session within 0.8 of its ${this._lease} ms lease`));
    }
    if (this._state === 'open' && this._ident && conn.pending.length && t >= conn.pending[0].sent + this._lease / 4) {
      return this._broken(new ConnectionClosedError(`baton: no answer from ${conn.addr} for a quarter of the lease`));
    }
    this._armTimer();
  }

  /** Loses every claim whose re-assertion is overdue. @internal */
  _expireReasserts(t) {
    for (const cl of this._claims.values()) {
      if (cl._reassert && !cl._err && t >= cl._until) {
        this._end(cl, new NotResumedError('baton: claim not resumed before its give-up', { cause: this._breakCause }), cl._state === 'held');
        if (!cl._sentOn) {
          cl._reassert = false;
          cl._state = 'ended';
          this._forget(cl);
        }
      }
    }
  }

  // ---- losing and resuming ----

  /** A failure of the connection: resume if resumable, else lose everything. @internal */
  _broken(err) {
    if (this._state === 'ended') return;
    if (this._ident && !this._closing && isBreak(err)) {
      if (this._state === 'resuming') return;
      this._resume(err);
      return;
    }
    this._lose(err);
  }

  /**
   * Ends the session once: every claim is lost, the work told first. After
   * a give-up or a shutdown the connection stays open until the held
   * claims' work has stopped (released), at most until anchor + lease.
   * @internal
   */
  _lose(err, loss = true) {
    if (this._state === 'ended') return;
    this._state = 'ended';
    this._err = err;
    clearTimeout(this._timer);
    clearTimeout(this._pingTimer);
    this._pingTimer = null;
    this._dialAbort?.abort(err);
    const hold = loss && (err instanceof HeartbeatTimeoutError || (err instanceof ServerError && err.code === Codes.SHUTTING_DOWN && err.frame === 'error'));
    for (const cl of this._claims.values()) {
      if (hold && cl._state === 'held' && !cl._workDone && !cl._err) {
        cl._counted = true;
        this._holding++;
      }
      this._end(cl, err, loss && (cl._state === 'held' || cl._reassert));
      cl._resolveReleased();
    }
    this._claims.clear();
    this._cutOff(this._conn, err);
    for (const w of this._watches.values()) w._end(err);
    this._watches.clear();
    for (const w of this._resumedWaiters.splice(0)) w();
    this._drain?.();
    this._ac.abort(err);
    if (loss && this.listenerCount('lost')) this.emit('lost', err);
    // A routed session's claims on its owners' sessions outlive its own
    // connection; close() ends them.
    if (this._holding === 0) return this._destroy();
    this._closeTimer = setTimeout(() => this._destroy(), Math.max(0, this._conn.closeBy - now()));
  }

  /** Rejects the PROCLAIMs of conn still unanswered. @internal */
  _cutOff(conn, err) {
    for (const r of conn?.pending ?? []) if (r.kind === 'proclaim') r.reject(err);
  }

  /** @internal */
  _destroy() {
    clearTimeout(this._closeTimer);
    this._conn?.sock.destroy();
  }

  /** Reconnects and re-asserts every claim (resumable sessions). @internal */
  async _resume(cause) {
    this._state = 'resuming';
    this._breakCause = cause;
    if (cause?.fresh) this._fresh++;
    else {
      this._fresh = 0;
      this._freshBackoff = 0;
    }
    if (this._fresh > MAX_FRESH_SESSIONS) {
      return this._lose(new NotResumedError(`baton: ${this._fresh} fresh sessions in a row`, { cause }));
    }
    const old = this._conn;
    const giveUp = old.deadline;
    this._cutOff(old, new ConnectionClosedError('baton: the connection broke before PROCLAIMED; the claim is re-asserted with the new value', { cause }));
    for (const w of [...this._watches.values()]) {
      if (w._closing) {
        this._watches.delete(w._id);
        w._end(null);
      } else w._reset(true); // watched again on the new connection
    }
    this._gen++; // events of the old connection are moot
    old.sock.destroy();
    clearTimeout(this._pingTimer);
    this._pingTimer = null;
    for (const cl of this._claims.values()) {
      if (cl._err) continue;
      if (!cl._reassert) {
        // Confirmed on the broken session: believed until its give-up.
        cl._reassert = true;
        cl._until = giveUp;
        cl._names = [this._ident];
      } else if (cl._sentOn) {
        // Cut off: the claim may have moved into the session that sent it.
        cl._names = [cl._sentOn, ...cl._names.filter((n) => n !== cl._sentOn)];
      }
      cl._sentOn = null;
      cl._at = 0;
    }
    for (const cl of [...this._claims.values()]) {
      if (cl._err) {
        cl._reassert = false;
        cl._state = 'ended';
        cl._reqs = 0;
        this._forget(cl);
      } else {
        cl._reqs = 0;
      }
    }
    this._dialAbort = new AbortController();
    let backoff = Math.max(this._freshBackoff, MIN_RESUME_BACKOFF);
    const maxBackoff = Math.min(MAX_RESUME_BACKOFF, this._lease / 8 + MIN_RESUME_BACKOFF);
    let last = cause;
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0 || cause?.fresh) {
        await sleep(Math.min(jitter(backoff), giveUp - now()), this._dialAbort.signal);
        backoff = Math.min(2 * backoff, maxBackoff);
        this._freshBackoff = backoff;
      }
      if (this._state !== 'resuming') return;
      const t = now();
      this._expireReasserts(t);
      if (this._state !== 'resuming') return;
      if (t >= giveUp) {
        return this._lose(new NotResumedError('baton: session not resumed before its give-up', { cause: last }));
      }
      const i = (this._addrIdx + attempt) % this._addrs.length;
      let conn;
      try {
        conn = await this._dial(this._addrs[i], this._dialAbort.signal, giveUp);
      } catch (e) {
        if (this._state !== 'resuming') return;
        last = e;
        if (e instanceof ProtocolViolationError || (e instanceof ServerError && !e.temporary)) {
          return this._lose(new NotResumedError(`baton: cannot resume: ${e.message}`, { cause: e }));
        }
        continue;
      }
      if (this._state !== 'resuming') {
        conn.sock.destroy();
        return;
      }
      if (!(conn.welcome.flags & P.WELCOME_RESUMABLE)) {
        conn.sock.destroy();
        return this._lose(new NotResumedError(`baton: ${conn.addr} did not open a resumable session`, { cause }));
      }
      this._addrIdx = i;
      this._reinstall(conn);
      return;
    }
  }

  /** Installs a new connection and re-asserts the claims on it. @internal */
  _reinstall(conn) {
    this._install(conn);
    this._state = 'open';
    this._freshNeeded = null;
    const ids = [...this._claims.keys()].sort((a, b) => a - b);
    for (const id of ids) {
      const cl = this._claims.get(id);
      if (!cl._reassert) continue;
      const prior = cl._names[cl._at];
      if (cl._nameBuf.length + prior.nodeBytes.length > P.MAX_REASSERT_TEXT) {
        this._end(cl, new NotResumedError('baton: name and node too long for a re-assertion'), cl._state === 'held');
        cl._reassert = false;
        cl._state = 'ended';
        this._forget(cl);
        continue;
      }
      this._sendReassert(cl, prior);
      if (cl._wantRelease || cl._done) {
        cl._wantRelease = false;
        cl._releasing = true;
        cl._reqs++;
        this._send({ kind: 'release', claim: cl }, P.release(cl._id));
      }
    }
    for (const w of [...this._watches.values()]) {
      if (this._values) this._send({ kind: 'watch', watch: w }, P.watch(w._id, w._nameBuf));
      else {
        this._watches.delete(w._id);
        w._end(new NotSupportedError('baton: the session resumed on a server without watches'));
      }
    }
    if (this._router) this._router.rewatch(this);
    this._schedulePing();
    for (const w of this._resumedWaiters.splice(0)) w();
    this.emit('resumed');
  }

  /** @internal */
  _sendReassert(cl, prior) {
    cl._sentOn = this._ident;
    cl._reqs++;
    const token = cl._state === 'held' ? cl._token : 0n;
    this._send({ kind: 'claim', claim: cl }, P.claim(cl._id, cl._noWait ? P.CLAIM_NOWAIT : 0, cl._m.code, cl._m.limit, cl._nameBuf,
      { token, ring: this._ring, session: prior.session, secret: prior.secret, node: prior.nodeBytes },
      this._values ? cl._value : null));
  }

  /** The answer to a re-assertion. @internal */
  _reasserted(cl, f, t) {
    cl._sentOn = null;
    const late = t >= cl._until || cl._err;
    const wasHeld = cl._state === 'held';
    const done = () => {
      cl._reassert = false;
      this._forget(cl);
      this._maybeFresh();
    };
    if (late) {
      // Lost already: a grant that came late is let go at once.
      if (f.type === P.T.GRANTED || f.type === P.T.QUEUED) {
        cl._state = f.type === P.T.GRANTED ? 'held' : 'queued';
        cl._reassert = false;
        if (!cl._releasing) {
          cl._releasing = true;
          cl._reqs++;
          this._send({ kind: 'release', claim: cl }, P.release(cl._id));
        }
      } else cl._state = 'ended';
      return done();
    }
    switch (f.type) {
      case P.T.GRANTED:
        if (wasHeld && f.token !== cl._token) throw violation(`re-assertion granted with token ${f.token}, held ${cl._token}`);
        cl._state = 'held';
        cl._token = f.token;
        cl._names = [];
        if (!wasHeld && !cl._releasing) {
          cl._waiter?.resolve(cl);
          cl._waiter = null;
        }
        return done();
      case P.T.QUEUED:
        if (wasHeld) {
          cl._state = 'queued';
          this._end(cl, new ReassertRefusedError(Codes.REASSERT_REFUSED, 'a held claim re-asserted as queued', 'refused'), true);
          this._release(cl, true);
          return done();
        }
        cl._state = 'queued';
        cl._names = [];
        return done();
      case P.T.BUSY:
        cl._state = 'ended';
        this._end(cl, new BusyError(cl.name), wasHeld);
        return done();
      case P.T.REFUSED:
        if (f.code === Codes.REASSERT_REFUSED && cl._at + 1 < cl._names.length) {
          // Another earlier session may hold it: name the next one.
          cl._at++;
          this._sendReassert(cl, cl._names[cl._at]);
          return;
        }
        if (f.code === Codes.REASSERT_REFUSED && cl._names.length > 1) {
          cl._at = 0;
          const gen = this._gen;
          setTimeout(() => {
            if (gen === this._gen && this._state === 'open' && !cl._err) this._sendReassert(cl, cl._names[0]);
          }, 20);
          return;
        }
        if (f.code === Codes.STALE_RING || f.code === Codes.NOT_OWNER) {
          // Again, on a fresh session.
          this._freshNeeded = serverError(f.code, f.reason, 'refused');
          cl._reassert = true;
          this._maybeFresh();
          return;
        }
        cl._state = 'ended';
        this._end(cl, serverError(f.code, f.reason, 'refused'), wasHeld);
        return done();
    }
  }

  /** Opens a fresh session once every re-assertion of this one was answered and one asked for it. @internal */
  _maybeFresh() {
    if (!this._freshNeeded) return;
    for (const cl of this._claims.values()) if (cl._sentOn) return;
    const err = new ConnectionClosedError('baton: re-assertion to be made again on a fresh session', { cause: this._freshNeeded });
    err.fresh = true;
    this._freshNeeded = null;
    queueMicrotask(() => this._broken(err));
  }

  /** @internal */
  _checkDrained() {
    if (this._drain && ![...this._claims.values()].some((cl) => cl._reqs > 0)) this._drain();
  }

  /**
   * Ends the session: every claim still held or queued ends (their
   * signals abort with SessionClosedError, no 'lost' event) and the
   * connection closes, which releases them all on the server at once. A
   * resumable session releases its claims first and waits for the
   * answers (at most until its give-up), since its server would keep
   * them for a lease otherwise. Call it after the guarded work has
   * stopped. Idempotent.
   * @returns {Promise<void>}
   */
  async close() {
    if (this._router) await this._router.close();
    while (this._state === 'resuming') await this._waitOpen().catch(() => {});
    if (this._state === 'open' && this._ident) {
      this._closing = true;
      const drained = new Promise((r) => { this._drain = r; });
      for (const cl of [...this._claims.values()]) {
        if (cl._state !== 'ended' || cl._reqs > 0) this._release(cl);
      }
      this._checkDrained();
      const conn = this._conn;
      let t;
      await Promise.race([drained, new Promise((r) => { t = setTimeout(r, Math.max(0, conn.deadline - now())); })]);
      clearTimeout(t);
    }
    const wait = this._conn && !this._conn.sock.destroyed
      ? new Promise((r) => this._conn.sock.once('close', r)) : Promise.resolve();
    if (this._state !== 'ended') this._lose(new SessionClosedError(), false);
    else this._destroy();
    await wait;
  }

  /** Lets `await using` close the session. */
  [Symbol.asyncDispose]() {
    return this.close();
  }

  // ---- the ring ----

  /** Sends RING (with watch). @internal */
  _askRing(watch) {
    if (this._state !== 'open') return;
    if (watch) this._conn.watching = true;
    this._send({ kind: 'ring' }, P.ring(watch ? P.RING_WATCH : 0));
  }

  /** @internal */
  _ringArrived(version, members) {
    this._router?.ring(version, members);
  }
}

function fits(req, f) {
  switch (f.type) {
    case P.T.PONG: return req.kind === 'ping' && req.seq === f.seq;
    case P.T.GRANTED: case P.T.QUEUED: case P.T.BUSY:
      return req.kind === 'claim' && req.claim._id === f.claim;
    case P.T.REFUSED:
      return ((req.kind === 'claim' || req.kind === 'proclaim') && req.claim._id === f.claim)
        || (req.kind === 'watch' && req.watch._id === f.claim);
    case P.T.RELEASED:
      return (req.kind === 'release' && req.claim._id === f.claim) || (req.kind === 'unwatch' && req.watch._id === f.claim);
    case P.T.PROCLAIMED: return req.kind === 'proclaim' && req.claim._id === f.claim;
    case P.T.CHANGE: return req.kind === 'watch' && req.watch._id === f.claim && f.kind === P.CHANGE.SYNCED;
    case P.T.RINGEND: return req.kind === 'ring';
    default: return false;
  }
}

/**
 * Sends the claims of a routed Session to their names' owners: each on a
 * session of its own with the owner node, opened on the first claim for
 * it, or on the Session's own connection (which relays) when no ring is
 * known or the owner cannot be reached. @internal
 */
export class Router {
  constructor(front) {
    this.front = front;
    this.version = -1n;
    this.members = [];
    this.nodes = new Map(); // node id -> Promise<Session>
    this.down = new Map(); // node id -> until
    this.closed = false;
    this.first = new Promise((r) => { this.gotFirst = r; });
  }

  ring(version, members) {
    if (version > this.version) {
      this.version = version;
      this.members = members.map((m) => ({ id: m.id, addr: m.addr, inRing: m.inRing }));
      this.front.emit('ring', this.members);
    }
    this.gotFirst();
  }

  rewatch(s) {
    s._askRing(true);
  }

  /** @returns {Promise<Session>} */
  async sessionFor(name) {
    const inRing = this.members.filter((m) => m.inRing);
    const id = ownerOf(name, inRing.map((m) => m.id));
    const m = inRing.find((x) => x.id === id);
    const front = this.front;
    if (!m || !m.addr || m.addr === front.address || (front.node && front.node === id)) return front;
    if ((this.down.get(id) ?? 0) > now()) return front;
    let p = this.nodes.get(id);
    if (!p) {
      const addrs = [m.addr, ...front._addrs.filter((a) => a !== m.addr)];
      p = front._c._openOn(addrs, { lease: front._lease, label: front._label, resumable: front._wantResume });
      this.nodes.set(id, p);
      p.then((s) => s.once('lost', () => this.nodes.get(id) === p && this.nodes.delete(id)), () => {});
    }
    try {
      const s = await p;
      if (s._state === 'ended') throw s._err;
      return s;
    } catch {
      if (this.nodes.get(id) === p) this.nodes.delete(id);
      this.down.set(id, now() + NODE_DOWN_FOR);
      return front;
    }
  }

  async acquire(name, nameBuf, m, noWait, signal, value) {
    for (let attempt = 0; ; attempt++) {
      const s = await this.sessionFor(name);
      try {
        return await s._acquire(name, nameBuf, m, noWait, signal, value);
      } catch (e) {
        // Refused 0x03: the ring moved under the claim; once more.
        if (attempt === 0 && e instanceof ServerError && e.code === Codes.NOT_OWNER && e.frame === 'refused') continue;
        throw e;
      }
    }
  }

  async watch(name, nameBuf) {
    for (let attempt = 0; ; attempt++) {
      const s = await this.sessionFor(name);
      try {
        return await s._watch(name, nameBuf);
      } catch (e) {
        // Refused 0x03: the ring moved under the watch; once more.
        if (attempt === 0 && e instanceof ServerError && e.code === Codes.NOT_OWNER && e.frame === 'refused') continue;
        throw e;
      }
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    const all = [...this.nodes.values()];
    this.nodes.clear();
    await Promise.all(all.map((p) => p.then((s) => s.close(), () => {})));
  }
}
