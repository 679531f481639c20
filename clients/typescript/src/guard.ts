/**
 * The guard: an `@a2a-js/sdk` client with the caller's lifecycle semantics applied to what
 * it yields, as the registry's decision says.
 *
 * A wrapper, not an SDK interceptor: in SDK 1.3.0 an interceptor's `after` hook sees each
 * streamed event and may replace it or end the stream after it, but cannot drop one (the
 * client yields `afterArgs.result.value` whatever the hook does), so it could not withhold a
 * duplicate terminal and still read on to see it.
 */

import { CardLifecycleMismatchError } from './errors.js';
import { TaskLifecycle, type Finding } from './lifecycle.js';
import type { ViolationReport } from './reports.js';
import type { Condition, Decision, DecisionOptions, Logger } from './types.js';
import { toWire } from './wire.js';

/**
 * - `safe` (default): when the registry vouches for the agent (authoritative), events pass
 *   through untouched, except a violation the guard sees anyway, which is withheld, reported,
 *   and makes the agent advisory locally. Otherwise (advisory, or the registry unreachable)
 *   caller semantics: each task's terminal state is delivered once and nothing after it.
 * - `strict`: like `safe`, but an advisory agent (or an unreachable registry, or an unknown
 *   card URL) is refused with {@link CardLifecycleMismatchError} before anything is sent.
 * - `observe`: every event passes untouched; violations are only reported.
 */
export type GuardMode = 'safe' | 'strict' | 'observe';

/** How to guard a client. */
export interface GuardOptions extends DecisionOptions {
  /** The agent's card URL, as registered in cardgate. */
  readonly cardUrl: string;
  /** Default `'safe'`. */
  readonly mode?: GuardMode;
}

/** What the guard wraps: an `@a2a-js/sdk` `Client`, or anything with the same two methods. */
export interface GuardableClient {
  sendMessage(...args: never[]): Promise<unknown>;
  sendMessageStream(...args: never[]): AsyncIterable<unknown>;
}

/** What the guard needs from the registry client. @internal */
export interface GuardHost {
  decision(cardUrl: string, options: DecisionOptions): Promise<Decision>;
  report(report: ViolationReport): void;
  demoteLocally(cardUrl: string, callerVersion: string, ledgerSeq: number | null): void;
  isDemotedLocally(cardUrl: string, callerVersion: string, decision: Decision): boolean;
  readonly logger: Logger;
}

/** The posture of one call. */
interface Posture {
  /** The agent's lifecycle may be relied on (authoritative, not demoted locally). */
  readonly trusted: boolean;
  readonly decision: Decision | undefined;
}

const OBSERVING: Posture = Object.freeze({ trusted: false, decision: undefined });

type AnyFn = (...args: unknown[]) => unknown;

/** @internal */
export function createGuard<C extends GuardableClient>(host: GuardHost, client: C, options: GuardOptions): C {
  const { cardUrl } = options;
  if (typeof cardUrl !== 'string' || cardUrl === '') throw new TypeError('cardgate guard: cardUrl is required');
  const mode: GuardMode = options.mode ?? 'safe';
  if (!['safe', 'strict', 'observe'].includes(mode)) {
    throw new TypeError(`cardgate guard: mode must be 'safe', 'strict' or 'observe', not '${mode}'`);
  }
  const callerVersion = options.callerVersion ?? '1.0';
  const dedup = options.dedup ?? 'timestamp';
  const { minTrials, minCleanRate, maxAge } = options;
  const decisionOptions: DecisionOptions = {
    callerVersion,
    dedup,
    requires: options.requires ?? [],
    ...(minTrials === undefined ? {} : { minTrials }),
    ...(minCleanRate === undefined ? {} : { minCleanRate }),
    ...(maxAge === undefined ? {} : { maxAge }),
  };
  const checkTimestamps = dedup === 'timestamp';
  let warned = false;

  const posture = async (): Promise<Posture> => {
    if (mode === 'observe') return OBSERVING;
    let decision: Decision;
    try {
      decision = await host.decision(cardUrl, decisionOptions);
    } catch (cause) {
      const why = cause instanceof Error ? cause.message : String(cause);
      if (mode === 'strict') {
        throw new CardLifecycleMismatchError(`cardgate could not vouch for ${cardUrl} (${why}); strict mode refuses`, {
          cardUrl,
          cause,
        });
      }
      if (!warned) {
        warned = true;
        host.logger.warn?.(`cardgate: no decision for ${cardUrl} (${why}); treating it as advisory`);
      }
      return { trusted: false, decision: undefined };
    }
    const trusted = decision.authoritative && !host.isDemotedLocally(cardUrl, callerVersion, decision);
    if (!trusted && mode === 'strict') {
      let failing: Condition[] = decision.conditions.filter((c) => c.status !== 'pass');
      if (failing.length === 0) {
        failing = [{ id: 'local-violation', status: 'fail', reason: 'this process saw the agent violate its lifecycle' }];
      }
      throw new CardLifecycleMismatchError(
        `${cardUrl} is advisory for A2A ${callerVersion}: ${failing.map((c) => `${c.id} ${c.status}`).join(', ')}`,
        { cardUrl, decision, conditions: failing },
      );
    }
    return { trusted, decision };
  };

  const witness = (findings: readonly Finding[], p: Posture): void => {
    for (const f of findings) {
      host.report({
        cardUrl,
        callerVersion,
        calleeId: p.decision?.calleeId,
        taskId: f.taskId,
        trigger: f.trigger,
        observed: f.observed.map(toWire),
      });
      if (p.trusted && p.decision !== undefined) {
        host.demoteLocally(cardUrl, callerVersion, p.decision.evidence.ledgerSeq);
        host.logger.warn?.(`cardgate: ${cardUrl} violated its lifecycle (${f.trigger}); treating it as advisory`);
      }
    }
  };

  async function* guardStream(start: () => AsyncIterable<unknown>): AsyncGenerator<unknown, void, undefined> {
    const p = await posture();
    const lifecycle = new TaskLifecycle(checkTimestamps);
    for await (const event of start()) {
      const v = lifecycle.observe(event);
      if (v.findings.length > 0) witness(v.findings, p);
      if (v.deliver || mode === 'observe') yield event;
    }
  }

  const target = client as unknown as Record<PropertyKey, unknown>;
  const call = (name: string, args: unknown[]): unknown => (target[name] as AnyFn).apply(client, args);

  const sendMessage = async (...args: unknown[]): Promise<unknown> => {
    const p = await posture();
    const result = await call('sendMessage', args);
    const v = new TaskLifecycle(checkTimestamps).observe(result);
    if (v.findings.length > 0) witness(v.findings, p);
    return result;
  };
  const sendMessageStream = (...args: unknown[]): AsyncGenerator<unknown, void, undefined> =>
    guardStream(() => call('sendMessageStream', args) as AsyncIterable<unknown>);
  const resubscribeTask = (...args: unknown[]): AsyncGenerator<unknown, void, undefined> =>
    guardStream(() => call('resubscribeTask', args) as AsyncIterable<unknown>);

  const bound = new Map<PropertyKey, { fn: unknown; bound: unknown }>();
  return new Proxy(client, {
    get(t, prop) {
      if (prop === 'sendMessage') return sendMessage;
      if (prop === 'sendMessageStream') return sendMessageStream;
      const value: unknown = Reflect.get(t, prop, t);
      if (typeof value !== 'function') return value;
      if (prop === 'resubscribeTask') return resubscribeTask;
      const known = bound.get(prop);
      if (known !== undefined && known.fn === value) return known.bound;
      const b = (value as AnyFn).bind(t);
      bound.set(prop, { fn: value, bound: b });
      return b;
    },
  });
}
