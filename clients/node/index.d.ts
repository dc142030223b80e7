// Type definitions for @batonlock/baton, the baton lock service's client
// for Node.js (20 and later).

/// <reference types="node" />

import { EventEmitter } from 'node:events';
import type { ConnectionOptions } from 'node:tls';

/** A claim's mode: exclusive (the default), shared (readers), or a semaphore of `limit` holders. */
export type Mode = 'exclusive' | 'shared' | 'semaphore';

export interface ClientOptions {
  /** The server's (or a cluster node's) "host:port". */
  address: string;
  /** Further nodes of the same cluster. With them the client routes claims to their owners and opens resumable sessions by default. */
  nodes?: string[];
  /**
   * TLS options for node:tls (`ca`, and `cert` + `key` for mutual TLS);
   * `true` for TLS with the system's CAs. Absent: plain TCP.
   */
  tls?: ConnectionOptions | true;
  /** 'auto' (default) routes when `nodes` is set or the server says it is a cluster node; 'direct' always; 'off' never. */
  routing?: 'auto' | 'direct' | 'off';
  /** Floor of the heartbeat interval in ms (never above lease/4). Default 100. */
  minHeartbeatInterval?: number;
  /**
   * Called synchronously the moment a held claim is lost, before the
   * client closes anything. Must return quickly and not call the client.
   */
  onLost?: (claim: Claim, err: Error) => void;
}

export interface SessionOptions {
  /** The session lease in ms (1 to 2^32-1): the failure detector of every claim on the session. Required. */
  lease: number;
  /** A label for operators (admin API, audit log); at most 255 bytes of UTF-8. */
  label?: string;
  /** Ask for a resumable session: a broken connection keeps the claims, which are re-asserted on a new one. Default: on with a cluster. */
  resumable?: boolean;
  /** Turn off the resumable default of a client given a cluster. */
  noResume?: boolean;
  /** The addresses the session may open and resume on, tried in turn. Default: `address`, then `nodes`. */
  addrs?: string[];
  /** Cancels the opening. */
  signal?: AbortSignal;
}

export interface AcquireOptions {
  /** Default 'exclusive'. */
  mode?: Mode;
  /** The number of holders of a semaphore (at least 1); only with mode 'semaphore'. */
  limit?: number;
  /** Wait in the lock's queue (default true); false rejects with BusyError when the lock is taken. */
  wait?: boolean;
  /** Ms to wait in the queue; then the claim leaves it and the promise rejects with a TimeoutError DOMException. */
  timeout?: number;
  /** Aborting leaves the queue and rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * A value for the claim (a string, sent as UTF-8, or bytes; at most
   * 1024 bytes, else ValidationError): shown to the name's watchers with
   * its holder, changed by Claim.proclaim, gone when the claim ends.
   * Needs a server with values (else NotSupportedError).
   */
  value?: string | Uint8Array;
}

export interface WithLockOptions extends AcquireOptions {
  /** The session's lease in ms. Default 10000. */
  lease?: number;
  label?: string;
  resumable?: boolean;
}

/** A ring member, as a cluster node reports it. */
export interface RingMember {
  id: string;
  /** The member's lock protocol address, or '' if it has none to give. */
  addr: string;
  /** Whether the member owns names. */
  inRing: boolean;
}

export declare class Client {
  constructor(options: ClientOptions);
  /** Opens a version 2 session. */
  openSession(options: SessionOptions): Promise<Session>;
  /**
   * Opens a session, runs fn while the lock is held, releases and closes.
   * Rejects with the loss if the lock was lost while fn ran.
   */
  withLock<R>(name: string, fn: (token: bigint, signal: AbortSignal) => Promise<R> | R, options?: WithLockOptions): Promise<R>;
}

export interface SessionEvents {
  lost: [err: Error];
  resumed: [];
  ring: [members: RingMember[]];
}

/** One connection carrying any number of claims. */
export declare class Session extends EventEmitter<SessionEvents> {
  private constructor();
  /** The lease in ms. */
  readonly lease: number;
  /** The server's session id; after a resume, the new session's. */
  readonly id: bigint;
  /** Whether the server granted a resumable session. */
  readonly resumable: boolean;
  /** The cluster node the session lives on ('' on a single server or when not resumable). */
  readonly node: string;
  /** The "host:port" the session is connected to. */
  readonly address: string;
  /** Aborts when the session ends (loss or close). */
  readonly signal: AbortSignal;
  /** Why the session ended, or null while it lives. */
  readonly error: Error | null;
  /** Whether the server offers values, watches and elections on this session. */
  readonly values: boolean;
  /**
   * Watches a name's holders without claiming it; resolves once the
   * current holders came. Rejects with NotSupportedError on a server
   * without watches, or with the server's refusal (a ServerError).
   */
  watch(name: string): Promise<Watch>;
  /** The election on a name: campaign to lead, observe who leads. */
  election(name: string): Election;
  /** Claims a lock; resolves when it is held. */
  acquire(name: string, options?: AcquireOptions): Promise<Claim>;
  /** acquire with `wait: false`: rejects with BusyError when the lock is taken. */
  tryAcquire(name: string, options?: Omit<AcquireOptions, 'wait'>): Promise<Claim>;
  /**
   * Runs fn(token, signal) while the lock is held and releases it after.
   * `signal` aborts the moment the claim is lost. Rejects with the loss
   * (an AggregateError with fn's error when both failed) if the lock was
   * lost while fn ran.
   */
  withLock<R>(name: string, fn: (token: bigint, signal: AbortSignal) => Promise<R> | R, options?: AcquireOptions): Promise<R>;
  /** Ends the session and every claim on it (releasing them on the server). */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface ClaimEvents {
  lost: [err: Error];
}

/** A claim on a lock. */
export declare class Claim extends EventEmitter<ClaimEvents> {
  private constructor();
  readonly name: string;
  readonly mode: Mode;
  /** The semaphore limit; 0 for exclusive and shared claims. */
  readonly limit: number;
  /** The fencing token of the grant. */
  readonly token: bigint;
  /** Aborts when the claim stops being held: lost, released, or its session closed. */
  readonly signal: AbortSignal;
  /** Whether the claim is held and believed so now. */
  readonly held: boolean;
  /** Why the claim ended by a loss or close, or null. */
  readonly error: Error | null;
  /** The session the claim lives on (with routing, its owner node's session). */
  readonly session: Session;
  /** Releases the claim: it stops being held at once; resolves when the server has applied it. Never rejects. */
  release(): Promise<void>;
  /** The claim's value (the latest proclaimed), or null for a claim made without one. */
  readonly value: Buffer | null;
  /**
   * Sets a new value on the claim; the name's watchers are told before
   * it resolves. At most 1024 bytes (else ValidationError, nothing sent).
   */
  proclaim(value: string | Uint8Array): Promise<void>;
}

/** One holder of a watched name, as the server reports it. */
export interface Holder {
  /** The fencing token of its grant. */
  token: bigint;
  mode: Mode;
  /** The claim's value (empty when it has none). */
  value: Buffer;
  /** The holder session's label. */
  label: string;
  /** The holder's certificate identity ('' without mutual TLS). */
  identity: string;
}

/** The leader of an election: the holder of its exclusive claim. */
export type Leader = Holder;

export interface WatchEvents {
  /** The holders, in grant order, after a change (each state whole). */
  change: [holders: Holder[]];
  /** The watch ended: null after close(), else why (a ServerError with code SLOW_WATCHER when its changes were not read in time, or the session's end). */
  close: [err: Error | null];
}

/**
 * A watch of a name's holders. `for await (const holders of watch)`
 * gives the holders when the watch began, then after each change; the
 * loop ends at close() and throws when the watch ends otherwise.
 */
export declare class Watch extends EventEmitter<WatchEvents> implements AsyncIterableIterator<Holder[]> {
  private constructor();
  readonly name: string;
  /** The latest whole state, or null before the first. */
  readonly holders: Holder[] | null;
  /** Why the watch ended, or null. */
  readonly error: Error | null;
  /** Ends the watch. Idempotent. */
  close(): void;
  next(): Promise<IteratorResult<Holder[], undefined>>;
  return(): Promise<IteratorResult<Holder[], undefined>>;
  [Symbol.asyncIterator](): AsyncIterableIterator<Holder[]>;
}

export interface ObserverEvents {
  /** The leader now, or null when nobody leads. */
  leader: [leader: Leader | null];
  /** Observing ended: null after close(), else why. */
  close: [err: Error | null];
}

/**
 * The leader of a name now and after each change (a new leader, a new
 * value, or null for no leader); never a leader with a token below one
 * already delivered. A watch the server ends or refuses for a server
 * condition (code below 0x10: too slow, the name moved) is made again.
 */
export declare class Observer extends EventEmitter<ObserverEvents> implements AsyncIterableIterator<Leader | null> {
  private constructor();
  readonly name: string;
  /** Why observing ended, or null. */
  readonly error: Error | null;
  /** Stops observing. Idempotent. */
  close(): void;
  next(): Promise<IteratorResult<Leader | null, undefined>>;
  return(): Promise<IteratorResult<Leader | null, undefined>>;
  [Symbol.asyncIterator](): AsyncIterableIterator<Leader | null>;
}

/**
 * Leader election on one name: the leader holds its exclusive claim and
 * publishes a value with its fencing token (docs/election.md).
 */
export declare class Election {
  private constructor();
  readonly session: Session;
  readonly name: string;
  /** The claim of this candidate's leadership, or null. */
  readonly claim: Claim | null;
  /** Whether this candidate leads now. */
  readonly isLeader: boolean;
  /** The fencing token of this candidate's leadership (0n if it never led). */
  readonly token: bigint;
  /** Aborts when the leadership ends (lost or resigned); null before campaign resolved. */
  readonly signal: AbortSignal | null;
  /** Waits to lead, publishing value; resolves to the fencing token. `signal`/`timeout` stop the wait. */
  campaign(value?: string | Uint8Array, options?: { signal?: AbortSignal; timeout?: number }): Promise<bigint>;
  /** Publishes a new value while leading; rejects with NotLeaderError otherwise. */
  proclaim(value: string | Uint8Array): Promise<void>;
  /** Stops leading: the next candidate leads. (A campaign still waiting stops by its signal or timeout.) */
  resign(): Promise<void>;
  /** The leader now, or null. */
  leader(): Promise<Leader | null>;
  /** Follows the leader until close() or the signal aborts. */
  observe(options?: { signal?: AbortSignal }): Observer;
}

/** The id of the in-ring member owning name (rendezvous hashing, as the nodes compute it); '' for an empty ring. */
export declare function ownerOf(name: string, members: string[]): string;

/** Protocol error codes. */
export declare const Codes: Readonly<{
  SHUTTING_DOWN: 0x01;
  CLOSED_BY_ADMIN: 0x02;
  NOT_OWNER: 0x03;
  REASSERT_REFUSED: 0x04;
  STALE_RING: 0x05;
  LIMIT_REACHED: 0x07;
  SLOW_WATCHER: 0x08;
  UNSUPPORTED_VERSION: 0x10;
  FIRST_NOT_ACQUIRE: 0x11;
  DUPLICATE_ACQUIRE: 0x12;
  UNKNOWN_MESSAGE: 0x13;
  EMPTY_NAME: 0x14;
  NAME_TOO_LONG: 0x15;
  INVALID_NAME: 0x16;
  INVALID_LEASE: 0x17;
  NOT_AUTHORIZED: 0x18;
  INVALID_FRAME: 0x19;
  FRAME_TOO_LONG: 0x1a;
  FIRST_NOT_HELLO: 0x1b;
  DUPLICATE_HELLO: 0x1c;
  INVALID_LABEL: 0x1d;
  UNSUPPORTED_FEATURE: 0x1e;
  CLAIM_IN_USE: 0x1f;
  UNKNOWN_MODE: 0x20;
  INVALID_LIMIT: 0x21;
  LIMIT_MISMATCH: 0x22;
  MODE_CONFLICT: 0x23;
  VALUE_TOO_LONG: 0x24;
}>;

/** Base class of every error this package throws. */
export declare class BatonError extends Error {
  /** Whether trying again may succeed. */
  readonly temporary: boolean;
}

/** The server's ERROR (session ended), REFUSED (claim refused) or REVOKED (claim ended); the code is what to branch on. */
export declare class ServerError extends BatonError {
  constructor(code: number, reason: string, frame?: 'error' | 'refused' | 'revoked');
  readonly code: number;
  readonly reason: string;
  readonly frame: 'error' | 'refused' | 'revoked';
  /** The code's name in Codes, or undefined for an unknown code. */
  readonly codeName: keyof typeof Codes | undefined;
}
export declare class ShuttingDownError extends ServerError {}
export declare class ClosedByAdminError extends ServerError {}
export declare class NotOwnerError extends ServerError {}
export declare class ReassertRefusedError extends ServerError {}
export declare class LimitReachedError extends ServerError {}
export declare class NotAuthorizedError extends ServerError {}
export declare class UnsupportedVersionError extends ServerError {}
export declare class ModeError extends ServerError {}
/** A name, lease, label or option the protocol cannot carry; nothing was sent. */
export declare class ValidationError extends BatonError {}
/** The server does not offer values, watches or elections; nothing was sent. */
export declare class NotSupportedError extends BatonError {}
/** The election's candidate does not lead. */
export declare class NotLeaderError extends BatonError {}
/** A non-waiting claim found the lock taken. */
export declare class BusyError extends BatonError {
  readonly lockName: string;
}
/** No answer confirmed the session within 0.8 of its lease. */
export declare class HeartbeatTimeoutError extends BatonError {}
/** The connection ended without an ERROR frame. */
export declare class ConnectionClosedError extends BatonError {}
/** The server broke the protocol. */
export declare class ProtocolViolationError extends BatonError {}
/** Session.close ended the session. */
export declare class SessionClosedError extends BatonError {}
/** A resumable session or claim was not resumed before its give-up. */
export declare class NotResumedError extends BatonError {}
/** Whether an error is worth trying again. */
export declare function isTemporary(err: unknown): boolean;
