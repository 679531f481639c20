/**
 * The registry's answer to "may I rely on this agent's task lifecycle?", as the
 * caller kit hands it out (the JSON of `GET /v1/trust`, in camelCase).
 *
 * @packageDocumentation
 */

/** How the caller deduplicates terminal events: by `status.timestamp`, or not at all. */
export type Dedup = 'timestamp' | 'none';

/** An optional capability the caller depends on. */
export type Capability = 'streaming' | 'pushNotifications' | 'stateTransitionHistory';

/** What the caller asks about: the posture it calls the agent with. */
export interface DecisionOptions {
  /** The A2A version the caller speaks, `Major.Minor`. Default `'1.0'`. */
  readonly callerVersion?: string;
  /** How the caller deduplicates terminal events. Default `'timestamp'`. */
  readonly dedup?: Dedup;
  /** Optional capabilities the caller depends on. Default none. */
  readonly requires?: readonly Capability[];
  /**
   * Ask for a track record: the `track-record` condition is `unknown` until the agent has
   * this many trials in the registry's window (5 when only `minCleanRate` is given).
   */
  readonly minTrials?: number;
  /** Then it passes when the 95 % lower bound of the clean rate reaches this (0 to 1; 0.95 when only `minTrials` is given). */
  readonly minCleanRate?: number;
  /**
   * Seconds: the `fresh` condition fails when the agent's newest passing probe run is older.
   * An answer asking this is never served from memory (it can change with time alone).
   */
  readonly maxAge?: number;
}

/** The median and 95th percentile, in milliseconds. */
export interface Percentiles {
  readonly p50Ms: number;
  readonly p95Ms: number;
}

/** An agent's record over the registry's window. */
export interface TrackRecord {
  readonly runs: number;
  readonly trials: number;
  readonly clean: number;
  /** The Wilson 95 % lower bound of the clean rate; null without trials. */
  readonly cleanRateLowerBound: number | null;
  readonly class: 'new' | 'stable' | 'flaky' | 'failing';
  readonly newestRunAt: string | null;
  readonly newestPassAt: string | null;
  /** Per operation; null where nothing was measured. */
  readonly latency: {
    readonly send: Percentiles | null;
    readonly firstEvent: Percentiles | null;
    readonly terminal: Percentiles | null;
    readonly push: Percentiles | null;
  };
}

/** One condition of a decision; `authoritative` is true only when every one passes. */
export interface Condition {
  /** `card-trusted`, `version-match`, `same-origin`, `lifecycle-probe`, `capability:<name>`, `not-demoted`, … */
  readonly id: string;
  /** `unknown` never counts as a pass. */
  readonly status: 'pass' | 'fail' | 'unknown';
  /** Why, in words. */
  readonly reason: string;
}

/** What a decision was computed from. */
export interface Evidence {
  readonly cardSnapshotId: string | null;
  readonly probeRunId: string | null;
  /** The subject's newest ledger event when the decision was made. */
  readonly ledgerSeq: number | null;
  readonly ledgerHash: string | null;
  /** The rulebook version the evidence is judged under (`GET /v1/rulebook`). */
  readonly rulebook: string | null;
  /** The agent's track record; null when it has no subject for the caller's version. */
  readonly trackRecord: TrackRecord | null;
}

/** The registry's decision about one agent, for one caller posture. Frozen. */
export interface Decision {
  /** The registry's id of the agent (the callee). */
  readonly calleeId: string;
  readonly callerVersion: string;
  readonly dedup: Dedup;
  readonly requires: readonly string[];
  /**
   * True when the caller may derive terminal-state, deduplication and progress semantics
   * from this agent; false: its card is advisory only.
   */
  readonly authoritative: boolean;
  /** `card-trusted`, `lifecycle-trusted`, `demoted`, …; null when the callee has no subject for that version. */
  readonly gateState: string | null;
  readonly conditions: readonly Condition[];
  readonly evidence: Evidence;
}

/** Where the caller kit's diagnostics go. `console` fits. Every method is optional. */
export interface Logger {
  debug?(message: string, ...details: unknown[]): void;
  info?(message: string, ...details: unknown[]): void;
  warn?(message: string, ...details: unknown[]): void;
  error?(message: string, ...details: unknown[]): void;
}

/** The violation a witness report names. */
export type Trigger = 'duplicate-terminal' | 'terminal-without-timestamp';
