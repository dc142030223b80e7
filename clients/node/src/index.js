// baton client for Node.js: sessions of protocol version 2 with exclusive,
// shared and semaphore claims, fencing tokens, a loss signal for the
// guarded work, TLS, routing to a cluster's owners and resumable sessions.

export { Client } from './client.js';
export { Session, Claim } from './session.js';
export { Watch, Election, Observer } from './election.js';
export { ownerOf } from './ring.js';
export {
  Codes, BatonError, ServerError, ShuttingDownError, ClosedByAdminError, NotOwnerError,
  ReassertRefusedError, LimitReachedError, NotAuthorizedError, UnsupportedVersionError, ModeError,
  ValidationError, BusyError, HeartbeatTimeoutError, ConnectionClosedError, ProtocolViolationError,
  SessionClosedError, NotResumedError, NotSupportedError, NotLeaderError, isTemporary,
} from './errors.js';
