// Watches of a name's holders and leader election on top of them
// (docs/protocol-v2-watches.md, "v2 values and watches"; docs/election.md).

import { EventEmitter } from 'node:events';
import * as P from './protocol.js';
import { BatonError, Codes, NotLeaderError, ProtocolViolationError, ServerError } from './errors.js';

const modeNames = new Map(Object.entries(P.MODES).map(([k, v]) => [v, k]));

// A consumer that falls this many states behind skips the oldest: the
// latest state is always delivered, and memory stays bounded.
const MAX_STATES = 1024;

/**
 * A watch of a name's holders, made by Session.watch. Iterate it with
 * `for await` (or listen to 'change') for the holders, in grant order,
 * after each change: first the holders when the watch began, then one
 * state per change as the server made it, each given only once the
 * server says it is whole (synced).
 *
 * Events: 'change' (holders) - a new state; 'close' (err) - the watch
 * ended: null after close(), else why (a ServerError with code
 * SLOW_WATCHER when its changes were not read fast enough: watch again;
 * or the session's end).
 */
export class Watch extends EventEmitter {
  /** @internal */
  constructor(session, id, name, nameBuf) {
    super();
    /** @internal */ this._s = session;
    /** @internal */ this._id = id;
    /** The watched name. */
    this.name = name;
    /** @internal */ this._nameBuf = nameBuf;
    /** @internal */ this._holders = [];
    /** @internal */ this._synced = false;
    /** @internal */ this._answered = false;
    /** @internal */ this._closing = false;
    /** @internal */ this._ended = false;
    /** @internal */ this._err = null;
    /** @internal */ this._latest = null;
    /** @internal */ this._queue = [];
    /** @internal */ this._waiters = [];
    /** @internal */ this._ready = new Promise((resolve, reject) => { this._readyFns = { resolve, reject }; });
    this._ready.catch(() => {});
  }

  /** The latest whole state (null before the first). */
  get holders() {
    return this._latest ? [...this._latest] : null;
  }

  /** Why the watch ended, or null. */
  get error() {
    return this._err;
  }

  /** Ends the watch (RELEASE of its id); iteration stops. Idempotent. */
  close() {
    this._s._unwatch(this);
  }

  /** The next state; `done` after close(); rejects when the watch ends otherwise. */
  next() {
    if (this._queue.length) return Promise.resolve({ value: this._queue.shift(), done: false });
    if (this._closing || (this._ended && !this._err)) return Promise.resolve({ value: undefined, done: true });
    if (this._ended) return Promise.reject(this._err);
    return new Promise((resolve, reject) => this._waiters.push({ resolve, reject }));
  }

  /** `break` in `for await` closes the watch. */
  return() {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  // ---- from the session ----

  /** A CHANGE (the first synced included). @internal */
  _change(f) {
    if (this._closing || this._ended) return; // crossed the RELEASE
    switch (f.kind) {
      case P.CHANGE.HELD:
        this._holders.push({ token: f.token, mode: modeNames.get(f.mode) ?? f.mode, value: f.value, label: f.label, identity: f.identity });
        break;
      case P.CHANGE.VALUE:
      case P.CHANGE.FREED: {
        const i = this._holders.findIndex((h) => h.token === f.token);
        if (i < 0) throw new ProtocolViolationError(`baton: protocol violation: CHANGE ${f.kind} of token ${f.token}, which is not a holder`);
        if (f.kind === P.CHANGE.VALUE) this._holders[i] = { ...this._holders[i], value: f.value };
        else this._holders.splice(i, 1);
        break;
      }
      case P.CHANGE.SYNCED:
        this._synced = true;
        if (!this._answered) {
          this._answered = true;
          this._readyFns.resolve(this);
        }
        break;
      case P.CHANGE.RESET:
        this._reset(false);
        return;
    }
    if (!this._synced) return;
    const state = [...this._holders];
    this._latest = state;
    const w = this._waiters.shift();
    if (w) w.resolve({ value: state, done: false });
    else {
      this._queue.push(state);
      if (this._queue.length > MAX_STATES) this._queue.shift();
    }
    // After the reader's turn, so that a listener added as watch()
    // resolves hears the first state too.
    setImmediate(() => this.emit('change', state));
  }

  /** Forgets the holders: a whole state follows (after a reset, or a new WATCH after a resume). @internal */
  _reset(rewatch) {
    this._holders = [];
    this._synced = false;
    if (rewatch) this._answered = false;
  }

  /** Ends the watch; err null for a close the user asked for. @internal */
  _end(err) {
    if (this._ended) return;
    this._ended = true;
    if (err && !this._closing) this._err = err;
    if (!this._answered) this._readyFns.reject(err ?? new BatonError('baton: watch closed'));
    for (const w of this._waiters.splice(0)) {
      if (this._err) w.reject(this._err);
      else w.resolve({ value: undefined, done: true });
    }
    const e = this._err;
    setImmediate(() => this.emit('close', e));
  }
}

/**
 * What an observer delivers: a new leader, a new value of the leader, or
 * no leader; never a leader with a token below one delivered (after a
 * re-watch the server may show an older state).
 */
class LeaderFilter {
  constructor() {
    this.top = 0n;
    this.last = undefined; // undefined: nothing delivered yet; null: no leader
  }

  /** @returns {[boolean, any]} */
  feed(holders) {
    const leader = holders[0] ?? null;
    if (leader === null) {
      if (this.last === null) return [false, null];
      this.last = null;
      return [true, null];
    }
    if (leader.token < this.top) return [false, null];
    if (leader.token === this.top && (!this.last || this.last.value.equals(leader.value))) return [false, null];
    this.top = leader.token;
    this.last = leader;
    return [true, leader];
  }
}

// A watch ended or refused for a server condition (too slow, the name
// moved, ...) is made again; a client error (0x10 and above) ends the observer.
const isTemporary = (e) => e instanceof ServerError && e.frame !== 'error' && e.code < 0x10;
const isSlow = (e) => e instanceof ServerError && e.frame === 'revoked' && e.code === Codes.SLOW_WATCHER;

/**
 * The leader of a name now and after each change, made by
 * Election.observe. Iterate it with `for await` (each item is the leader,
 * or null when nobody leads) or listen to 'leader'. A watch the server
 * ends or refuses for a server condition (code below 0x10: too slow, the
 * name moved) is made again, with backoff; a leader older than one
 * delivered is never delivered.
 *
 * Events: 'leader' (leader|null); 'close' (err) - null after close().
 */
export class Observer extends EventEmitter {
  /** @internal */
  constructor(session, name, signal) {
    super();
    /** @internal */ this._s = session;
    /** The observed name. */
    this.name = name;
    /** @internal */ this._filter = new LeaderFilter();
    /** @internal */ this._w = null;
    /** @internal */ this._closed = false;
    /** @internal */ this._ended = false;
    /** @internal */ this._err = null;
    /** @internal */ this._queue = [];
    /** @internal */ this._waiters = [];
    if (signal) {
      if (signal.aborted) this.close();
      else signal.addEventListener('abort', () => this.close(), { once: true });
    }
    if (!this._closed) this._run();
  }

  /** @internal */
  async _run() {
    let backoff = 0;
    const pause = async () => {
      backoff = backoff ? Math.min(1000, 2 * backoff) : 50;
      await new Promise((r) => {
        const done = () => {
          clearTimeout(t);
          this.removeListener('close', done);
          r();
        };
        const t = setTimeout(done, backoff / 2 + Math.random() * (backoff / 2));
        this.once('close', done);
      });
    };
    while (!this._closed) {
      let w;
      try {
        w = await this._s.watch(this.name);
      } catch (e) {
        if (isTemporary(e)) {
          await pause();
          continue;
        }
        return this._end(e);
      }
      if (this._closed) return w.close();
      this._w = w;
      try {
        for await (let holders of w) {
          // The leader now: a release and the next grant that came together
          // are not shown as a moment without a leader.
          if (w._queue.length) holders = w._queue.splice(0).pop();
          const [ok, leader] = this._filter.feed(holders);
          backoff = 0;
          if (ok) this._deliver(leader);
        }
      } catch (e) {
        if (!isTemporary(e)) return this._end(e);
        // Watch again: the new watch starts from the current state.
        if (!isSlow(e)) await pause();
        continue;
      }
      return this._end(null);
    }
  }

  /** @internal */
  _deliver(leader) {
    const w = this._waiters.shift();
    if (w) w.resolve({ value: leader, done: false });
    else {
      this._queue.push(leader);
      if (this._queue.length > MAX_STATES) this._queue.shift();
    }
    this.emit('leader', leader);
  }

  /** @internal */
  _end(err) {
    if (this._ended) return;
    this._ended = true;
    this._err = this._closed ? null : err;
    for (const w of this._waiters.splice(0)) {
      if (this._err) w.reject(this._err);
      else w.resolve({ value: undefined, done: true });
    }
    this.emit('close', this._err);
  }

  /** Stops observing (ends the watch). Idempotent. */
  close() {
    if (this._closed) return;
    this._closed = true;
    this._queue = [];
    this._w?.close();
    this._end(null);
  }

  /** Why observing ended, or null. */
  get error() {
    return this._err;
  }

  next() {
    if (this._queue.length) return Promise.resolve({ value: this._queue.shift(), done: false });
    if (this._ended) return this._err ? Promise.reject(this._err) : Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => this._waiters.push({ resolve, reject }));
  }

  return() {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator]() {
    return this;
  }
}

/**
 * Leader election on one name, made by Session.election. The leader is
 * the holder of an exclusive claim on the name; its value (an address,
 * say) is published to every observer with its fencing token. Tokens of
 * a name only grow: pass the leader's token to what it writes, so that
 * an old leader's writes are refused (docs/election.md).
 */
export class Election {
  /** @internal */
  constructor(session, name) {
    P.nameBytes(name);
    /** The session the candidate campaigns on. */
    this.session = session;
    /** The election's name (a lock name). */
    this.name = name;
    /** @internal */ this._claim = null;
    /** @internal */ this._campaigning = false;
  }

  /** The claim of this candidate's leadership (null before campaign resolved or after resign). */
  get claim() {
    return this._claim;
  }

  /** Whether this candidate leads now. */
  get isLeader() {
    return this._claim !== null && this._claim.held;
  }

  /** The fencing token of this candidate's leadership (0n if it never led). */
  get token() {
    return this._claim?.token ?? 0n;
  }

  /** Aborts when the leadership ends (lost, or resigned); null before campaign resolved. */
  get signal() {
    return this._claim?.signal ?? null;
  }

  /**
   * Waits to lead, publishing value (a string or bytes, at most 1024
   * bytes), and resolves to the fencing token. Candidates lead in the
   * order they came. `signal` or `timeout` stop the wait (the candidate
   * leaves the queue).
   * @param {string|Uint8Array} [value]
   * @param {{signal?: AbortSignal, timeout?: number}} [opts]
   */
  async campaign(value = '', opts = {}) {
    if (this._campaigning || (this._claim && this._claim.held)) {
      throw new BatonError('baton: this candidate is already campaigning or leading; resign first');
    }
    this._campaigning = true;
    try {
      this._claim = await this.session.acquire(this.name, { value, signal: opts.signal, timeout: opts.timeout });
    } finally {
      this._campaigning = false;
    }
    return this._claim.token;
  }

  /**
   * Publishes a new value while leading; observers are told.
   * Rejects with NotLeaderError when this candidate does not lead.
   * @param {string|Uint8Array} value
   */
  async proclaim(value) {
    if (!this.isLeader) throw new NotLeaderError(`baton: not the leader of ${JSON.stringify(this.name)}`);
    await this._claim.proclaim(value);
  }

  /** Stops leading: the next candidate leads. (A campaign still waiting stops by its signal or timeout.) */
  async resign() {
    const cl = this._claim;
    this._claim = null;
    await cl?.release();
  }

  /** The leader now ({ token, mode, value, label, identity }), or null. */
  async leader() {
    const w = await this.session.watch(this.name);
    try {
      const { value } = await w.next();
      return value?.[0] ?? null;
    } finally {
      w.close();
    }
  }

  /**
   * Follows the leader: an Observer, iterated with `for await` or
   * listened to ('leader'). `signal` stops it.
   * @param {{signal?: AbortSignal}} [opts]
   */
  observe(opts = {}) {
    return new Observer(this.session, this.name, opts.signal);
  }
}
