import type { Condition, Decision } from './types.js';

/** Base class of the errors this package throws. */
export class CardgateError extends Error {
  override name = 'CardgateError';
}

/**
 * The registry could not answer: a network error, a timeout, a 5xx or a 429. The guard
 * treats the agent as advisory then (and strict mode refuses).
 */
export class RegistryUnavailableError extends CardgateError {
  override name = 'RegistryUnavailableError';
  /** The HTTP status, when the registry answered at all. */
  readonly status: number | undefined;

  constructor(message: string, options?: { status?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.status = options?.status;
  }
}

/**
 * The registry refused the request (a 4xx other than 429): e.g. 404 when no agent is
 * registered with that card URL, 401/403 for a missing key or role.
 */
export class RegistryRequestError extends CardgateError {
  override name = 'RegistryRequestError';
  /** The HTTP status. */
  readonly status: number;
  /** The registry's error code (`error.code` of its body), if it gave one. */
  readonly code: string | undefined;

  constructor(message: string, status: number, code: string | undefined) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Strict mode refused to call an agent whose lifecycle the registry does not vouch for.
 * Thrown before anything is sent to the agent.
 *
 * Strict mode fails closed: when the registry cannot be asked (unreachable, or the card URL
 * is not registered), `decision` is undefined, `conditions` is empty and `cause` says why.
 */
export class CardLifecycleMismatchError extends CardgateError {
  override name = 'CardLifecycleMismatchError';
  /** The card URL the guard was given. */
  readonly cardUrl: string;
  /** The conditions that did not pass (`fail` or `unknown`). */
  readonly conditions: readonly Condition[];
  /** The registry's decision, when there was one. */
  readonly decision: Decision | undefined;

  constructor(
    message: string,
    details: { cardUrl: string; decision?: Decision; conditions?: readonly Condition[]; cause?: unknown },
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.cardUrl = details.cardUrl;
    this.decision = details.decision;
    this.conditions =
      details.conditions ?? details.decision?.conditions.filter((c) => c.status !== 'pass') ?? [];
  }
}
