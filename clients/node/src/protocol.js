// Frames of protocol version 2 (docs/protocol-v2.md, "v2 frames"): encoders
// for the client's frames and a decoder for the server's.

import { ProtocolViolationError, ValidationError } from './errors.js';

export const PREAMBLE = Buffer.from([0x01, 0x02, 0, 0, 0, 0, 0, 0]);
export const MAX_FRAME_LEN = 512;
/** Frames may be this long on a session whose WELCOME has WELCOME_VALUES. */
export const MAX_VALUES_FRAME_LEN = 2048;
/** The longest claim value, in bytes. */
export const MAX_VALUE_LEN = 1024;
export const MAX_NAME_LEN = 255;
export const MAX_LABEL_LEN = 255;
export const MAX_LEASE_MS = 0xffffffff;
// Name and node of a re-assertion together (MaxReassertText).
export const MAX_REASSERT_TEXT = 459;

export const T = Object.freeze({
  HELLO: 0x21, PING: 0x22, CLAIM: 0x23, RELEASE: 0x24, RING: 0x26,
  PROCLAIM: 0x29, WATCH: 0x2a,
  WELCOME: 0x31, PONG: 0x32, GRANTED: 0x33, QUEUED: 0x34, BUSY: 0x35,
  PROMOTED: 0x36, RELEASED: 0x37, REFUSED: 0x38, REVOKED: 0x39, ERROR: 0x3a,
  ANSWER: 0x3b, MEMBER: 0x3c, RINGEND: 0x3d, PROCLAIMED: 0x3f, CHANGE: 0x40,
  V1ERROR: 0x13, // a version 1 ERROR answering the preamble
});

export const HELLO_RESUMABLE = 0x01;
export const HELLO_VALUES = 0x08;
export const WELCOME_RESUMABLE = 0x01;
export const WELCOME_RING = 0x02;
export const WELCOME_VALUES = 0x10;
export const CLAIM_NOWAIT = 0x01;
export const CLAIM_REASSERT = 0x02;
export const CLAIM_VALUE = 0x08;

/** CHANGE kinds. */
export const CHANGE = Object.freeze({ HELD: 1, VALUE: 2, FREED: 3, SYNCED: 4, RESET: 5 });
export const RING_WATCH = 0x01;

export const MODES = Object.freeze({ exclusive: 1, shared: 2, semaphore: 3 });

/**
 * Checks a lock name: 1 to 255 bytes of UTF-8. Returns its bytes.
 * @param {string} name
 */
export function nameBytes(name) {
  if (typeof name !== 'string') throw new ValidationError('baton: lock name must be a string');
  const b = Buffer.from(name, 'utf8');
  if (b.length === 0) throw new ValidationError('baton: empty lock name');
  if (b.length > MAX_NAME_LEN) throw new ValidationError(`baton: lock name too long (${b.length} > ${MAX_NAME_LEN} bytes)`);
  // A lone surrogate is not UTF-8: Buffer.from replaced it with U+FFFD.
  if (!name.isWellFormed()) throw new ValidationError('baton: lock name is not valid UTF-8');
  return b;
}

/**
 * Checks a claim value: a string (sent as UTF-8) or bytes, at most
 * MAX_VALUE_LEN bytes. Returns its bytes.
 * @param {string|Uint8Array} value
 */
export function valueBytes(value) {
  let b;
  if (typeof value === 'string') {
    if (!value.isWellFormed()) throw new ValidationError('baton: claim value is not valid UTF-8');
    b = Buffer.from(value, 'utf8');
  } else if (value instanceof Uint8Array) b = Buffer.from(value);
  else throw new ValidationError('baton: a claim value must be a string or a Uint8Array');
  if (b.length > MAX_VALUE_LEN) throw new ValidationError(`baton: claim value too long (${b.length} > ${MAX_VALUE_LEN} bytes)`);
  return b;
}

/** @param {number} ms */
export function checkLease(ms) {
  if (!Number.isInteger(ms) || ms < 1 || ms > MAX_LEASE_MS) {
    throw new ValidationError(`baton: lease must be a whole number of milliseconds from 1 to ${MAX_LEASE_MS}, got ${ms}`);
  }
}

function frame(type, payloadLen) {
  const b = Buffer.allocUnsafe(3 + payloadLen);
  b.writeUInt16BE(1 + payloadLen, 0);
  b[2] = type;
  return b;
}

/** @param {number} leaseMs @param {number} flags @param {Buffer} label */
export function hello(leaseMs, flags, label) {
  const b = frame(T.HELLO, 6 + label.length);
  b.writeUInt32BE(leaseMs, 3);
  b[7] = flags;
  b[8] = label.length;
  label.copy(b, 9);
  return b;
}

/** @param {bigint} seq */
export function ping(seq) {
  const b = frame(T.PING, 8);
  b.writeBigUInt64BE(seq, 3);
  return b;
}

/** @param {number} id */
export function release(id) {
  const b = frame(T.RELEASE, 4);
  b.writeUInt32BE(id, 3);
  return b;
}

/** @param {number} flags */
export function ring(flags) {
  const b = frame(T.RING, 1);
  b[3] = flags;
  return b;
}

/**
 * A CLAIM; with `re` a re-assertion naming a prior session; with `value`
 * (even empty) a claim that carries it (CLAIM_VALUE).
 * @param {number} id @param {number} flags @param {number} mode @param {number} limit @param {Buffer} name
 * @param {{token: bigint, ring: bigint, session: bigint, secret: Buffer, node: Buffer}} [re]
 * @param {Buffer|null} [value]
 */
export function claim(id, flags, mode, limit, name, re, value) {
  const extra = (re ? 8 + 8 + 8 + 16 + 1 + re.node.length : 0) + (value ? 2 + value.length : 0);
  const b = frame(T.CLAIM, 11 + name.length + extra);
  b.writeUInt32BE(id, 3);
  b[7] = flags | (re ? CLAIM_REASSERT : 0) | (value ? CLAIM_VALUE : 0);
  b[8] = mode;
  b.writeUInt32BE(limit, 9);
  b[13] = name.length;
  name.copy(b, 14);
  if (re) {
    let o = 14 + name.length;
    b.writeBigUInt64BE(re.token, o); o += 8;
    b.writeBigUInt64BE(re.ring, o); o += 8;
    b.writeBigUInt64BE(re.session, o); o += 8;
    re.secret.copy(b, o); o += 16;
    b[o++] = re.node.length;
    re.node.copy(b, o);
  }
  if (value) {
    const o = b.length - 2 - value.length;
    b.writeUInt16BE(value.length, o);
    value.copy(b, o + 2);
  }
  return b;
}

/** A PROCLAIM: claim id's new value. @param {number} id @param {Buffer} value */
export function proclaim(id, value) {
  const b = frame(T.PROCLAIM, 6 + value.length);
  b.writeUInt32BE(id, 3);
  b.writeUInt16BE(value.length, 7);
  value.copy(b, 9);
  return b;
}

/** A WATCH of name with id (from the claim ids). @param {number} id @param {Buffer} name */
export function watch(id, name) {
  const b = frame(T.WATCH, 5 + name.length);
  b.writeUInt32BE(id, 3);
  b[7] = name.length;
  name.copy(b, 8);
  return b;
}

function bad(msg) {
  return new ProtocolViolationError('baton: protocol violation: ' + msg);
}

const decoder = new TextDecoder('utf-8', { fatal: false });

/**
 * Decodes one server frame's type and payload (the bytes after the length).
 * Throws ProtocolViolationError for a frame that does not fit its layout.
 * @param {Buffer} b type byte and payload
 * @returns {any}
 */
export function decode(b) {
  const type = b[0];
  const p = b.subarray(1);
  const need = (n) => {
    if (p.length !== n) throw bad(`frame 0x${type.toString(16)} of ${p.length} payload bytes, want ${n}`);
  };
  const str = (o) => {
    if (o >= p.length) throw bad(`frame 0x${type.toString(16)} too short`);
    const n = p[o];
    if (o + 1 + n > p.length) throw bad(`string runs past the end of frame 0x${type.toString(16)}`);
    return [p.subarray(o + 1, o + 1 + n), o + 1 + n];
  };
  switch (type) {
    case T.WELCOME: {
      if (p.length < 9) throw bad('short WELCOME');
      const f = { type, session: p.readBigUInt64BE(0), flags: p[8], secret: null, node: '', ring: 0n };
      let o = 9;
      if (f.flags & WELCOME_RESUMABLE) {
        if (p.length < o + 17) throw bad('short WELCOME');
        f.secret = Buffer.from(p.subarray(o, o + 16));
        const [node, next] = str(o + 16);
        f.node = node.toString('utf8');
        f.nodeBytes = Buffer.from(node);
        o = next;
      }
      if (f.flags & WELCOME_RING) {
        if (p.length < o + 8) throw bad('short WELCOME');
        f.ring = p.readBigUInt64BE(o);
        o += 8;
      }
      if (o !== p.length) throw bad('WELCOME with bytes left over');
      return f;
    }
    case T.PONG:
      need(8);
      return { type, seq: p.readBigUInt64BE(0) };
    case T.GRANTED:
    case T.PROMOTED:
      need(12);
      return { type, claim: p.readUInt32BE(0), token: p.readBigUInt64BE(4) };
    case T.QUEUED:
      // 12 bytes carry a queue ticket, which this client never asks for:
      // the session treats one as a violation.
      if (p.length === 12) return { type, claim: p.readUInt32BE(0), ticket: p.readBigUInt64BE(4) };
      need(4);
      return { type, claim: p.readUInt32BE(0), ticket: 0n };
    case T.BUSY:
    case T.RELEASED:
      need(4);
      return { type, claim: p.readUInt32BE(0) };
    case T.REFUSED:
    case T.REVOKED: {
      if (p.length < 6) throw bad('short REFUSED/REVOKED');
      const [reason, end] = str(5);
      if (end !== p.length) throw bad('bytes left over');
      return { type, claim: p.readUInt32BE(0), code: p[4], reason: decoder.decode(reason) };
    }
    case T.ERROR: {
      if (p.length < 2) throw bad('short ERROR');
      const [reason, end] = str(1);
      if (end !== p.length) throw bad('bytes left over');
      return { type, code: p[0], reason: decoder.decode(reason) };
    }
    case T.MEMBER: {
      if (p.length < 3) throw bad('short MEMBER');
      const [id, o] = str(1);
      const [addr, end] = str(o);
      if (end !== p.length) throw bad('bytes left over');
      if (id.length === 0) throw bad('MEMBER with an empty id');
      if (p[0] & ~1) throw bad('MEMBER with reserved flags');
      return { type, inRing: (p[0] & 1) === 1, id: id.toString('utf8'), addr: addr.toString('utf8') };
    }
    case T.PROCLAIMED:
      need(5);
      if (p[4] > 1) throw bad(`PROCLAIMED with status ${p[4]}`);
      return { type, claim: p.readUInt32BE(0), status: p[4] };
    case T.CHANGE: {
      // watch u32, kind u8, mode u8, token u64, value_len u16, value, label, identity
      if (p.length < 18) throw bad(`CHANGE of ${p.length} payload bytes`);
      const kind = p[4];
      if (kind < CHANGE.HELD || kind > CHANGE.RESET) throw bad(`CHANGE of kind ${kind}`);
      const vlen = p.readUInt16BE(14);
      if (vlen > MAX_VALUE_LEN || 16 + vlen + 2 > p.length) throw bad(`CHANGE with a value of ${vlen} bytes`);
      const [label, o] = str(16 + vlen);
      const [identity, end] = str(o);
      if (end !== p.length) throw bad('bytes left over');
      return {
        type, claim: p.readUInt32BE(0), kind, mode: p[5], token: p.readBigUInt64BE(6),
        value: Buffer.from(p.subarray(16, 16 + vlen)), label: decoder.decode(label), identity: decoder.decode(identity),
      };
    }
    case T.RINGEND:
      need(11);
      if (p[10] & ~1) throw bad('RINGEND with reserved flags');
      return { type, version: p.readBigUInt64BE(0), count: p.readUInt16BE(8), pushed: (p[10] & 1) === 1 };
    default:
      throw bad(`unexpected frame type 0x${type.toString(16)}`);
  }
}
