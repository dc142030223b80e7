// Error classes of the baton client. Branch on the class or on `code`
// (a protocol error code), never on the message or the server's reason.

/** Protocol error codes (docs/protocol.md, "Error codes" and "v2 error codes"). */
export const Codes = Object.freeze({
  SHUTTING_DOWN: 0x01,
  CLOSED_BY_ADMIN: 0x02,
  NOT_OWNER: 0x03,
  REASSERT_REFUSED: 0x04,
  STALE_RING: 0x05,
  LIMIT_REACHED: 0x07,
  SLOW_WATCHER: 0x08,
  UNSUPPORTED_VERSION: 0x10,
  FIRST_NOT_ACQUIRE: 0x11,
  DUPLICATE_ACQUIRE: 0x12,
  UNKNOWN_MESSAGE: 0x13,
  EMPTY_NAME: 0x14,
  NAME_TOO_LONG: 0x15,
  INVALID_NAME: 0x16,
  INVALID_LEASE: 0x17,
  NOT_AUTHORIZED: 0x18,
  INVALID_FRAME: 0x19,
  FRAME_TOO_LONG: 0x1a,
  FIRST_NOT_HELLO: 0x1b,
  DUPLICATE_HELLO: 0x1c,
  INVALID_LABEL: 0x1d,
  UNSUPPORTED_FEATURE: 0x1e,
  CLAIM_IN_USE: 0x1f,
  UNKNOWN_MODE: 0x20,
  INVALID_LIMIT: 0x21,
  LIMIT_MISMATCH: 0x22,
  MODE_CONFLICT: 0x23,
  VALUE_TOO_LONG: 0x24,
});

const codeNames = new Map(Object.entries(Codes).map(([k, v]) => [v, k]));

/** Base class of every error this package throws. */
export class BatonError extends Error {
  /**
   * @param {string} message
   * @param {ErrorOptions} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }

  /** Whether trying again (a new session, a new claim) may succeed. */
  get temporary() {
    return false;
  }
}

/**
 * The server sent ERROR (the session ended), REFUSED (a claim was refused,
 * the session lives on) or REVOKED (a held or queued claim was ended by an
 * administrator, an ACL reload or a cluster change; the session lives on).
 * `code` is the protocol code; codes below 0x10 are server conditions
 * (temporary), the others client errors.
 */
export class ServerError extends BatonError {
  /**
   * @param {number} code
   * @param {string} reason
   * @param {'error'|'refused'|'revoked'} [frame]
   */
  constructor(code, reason, frame = 'error') {
    const hex = '0x' + code.toString(16).padStart(2, '0');
    super(`baton: server ${frame === 'error' ? 'error' : frame} ${hex} (${codeNames.get(code) ?? 'unknown'}): ${reason}`);
    /** @type {number} */
    this.code = code;
    /** @type {string} */
    this.reason = reason;
    /** Which frame carried it: 'error' (session level), 'refused' or 'revoked' (one claim). */
    this.frame = frame;
  }

  /** The code's name in Codes, or undefined for a code this client does not know. */
  get codeName() {
    return codeNames.get(this.code);
  }

  get temporary() {
    return this.code < 0x10;
  }
}

/** ERROR 0x01: the server is shutting down. Reconnect at once. */
export class ShuttingDownError extends ServerError {}
/** 0x02: an administrator force-released or kicked the claim (REVOKED), or closed the session. */
export class ClosedByAdminError extends ServerError {}
/** 0x03: a cluster node cannot serve this lock (or lost its quorum). */
export class NotOwnerError extends ServerError {}
/** 0x04: a resumable session's claim was refused on re-assertion; the claim is lost. */
export class ReassertRefusedError extends ServerError {}
/** 0x07: a server limit (claims per session, waiters per lock, sessions per client). */
export class LimitReachedError extends ServerError {}
/** 0x18: the access-control list refuses this client the lock. */
export class NotAuthorizedError extends ServerError {}
/** 0x10: the server does not speak protocol version 2. */
export class UnsupportedVersionError extends ServerError {}
/** 0x20-0x23: the claim's mode or semaphore limit does not fit the lock's claims. */
export class ModeError extends ServerError {}

const byCode = new Map([
  [Codes.SHUTTING_DOWN, ShuttingDownError],
  [Codes.CLOSED_BY_ADMIN, ClosedByAdminError],
  [Codes.NOT_OWNER, NotOwnerError],
  [Codes.REASSERT_REFUSED, ReassertRefusedError],
  [Codes.LIMIT_REACHED, LimitReachedError],
  [Codes.NOT_AUTHORIZED, NotAuthorizedError],
  [Codes.UNSUPPORTED_VERSION, UnsupportedVersionError],
  [Codes.UNKNOWN_MODE, ModeError],
  [Codes.INVALID_LIMIT, ModeError],
  [Codes.LIMIT_MISMATCH, ModeError],
  [Codes.MODE_CONFLICT, ModeError],
]);

/**
 * The ServerError subclass for a code.
 * @param {number} code
 * @param {string} reason
 * @param {'error'|'refused'|'revoked'} [frame]
 * @returns {ServerError}
 */
export function serverError(code, reason, frame) {
  const C = byCode.get(code) ?? ServerError;
  return new C(code, reason, frame);
}

/** A name, lease, label or option the protocol cannot carry; nothing was sent. */
export class ValidationError extends BatonError {}

/**
 * The server does not offer what was asked: values, watches and
 * elections need a server that answered HELLO's values flag. Nothing was
 * sent.
 */
export class NotSupportedError extends BatonError {}

/** The election's candidate does not lead (it never won, resigned, or lost its claim). */
export class NotLeaderError extends BatonError {}

/** A non-waiting claim found the lock taken. */
export class BusyError extends BatonError {
  constructor(name) {
    super(`baton: lock ${JSON.stringify(name)} is busy`);
    this.lockName = name;
  }
}

/**
 * No answer confirmed the session within 0.8 of its lease after the
 * request was sent: the client gave up before the server could hand the
 * lock on.
 */
export class HeartbeatTimeoutError extends BatonError {
  get temporary() {
    return true;
  }
}

/** The connection ended (EOF, reset, failed write) without an ERROR frame. */
export class ConnectionClosedError extends BatonError {
  get temporary() {
    return true;
  }
}

/** The server broke the protocol; the client closed the connection. */
export class ProtocolViolationError extends BatonError {}

/** Session.close() ended the session and its claims. */
export class SessionClosedError extends BatonError {
  constructor() {
    super('baton: session closed');
  }
}

/**
 * A resumable session (or one of its claims) was not resumed before its
 * give-up; `cause` is the failure that broke the connection.
 */
export class NotResumedError extends BatonError {
  get temporary() {
    return this.cause instanceof BatonError ? this.cause.temporary : true;
  }
}

/**
 * Whether an error is worth trying again (a new session or claim).
 * @param {unknown} err
 */
export function isTemporary(err) {
  if (err instanceof BatonError) return err.temporary;
  // Dial errors (ECONNREFUSED and the like) are temporary; a TLS
  // certificate that failed verification is not.
  const code = /** @type {any} */ (err)?.code;
  if (typeof code === 'string') return !/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS/.test(code);
  return false;
}
