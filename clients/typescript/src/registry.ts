/**
 * The registry client: decisions (`GET /v1/trust`) with a cache that the event follower
 * keeps exact, witness reports, and the guard factory.
 */

import { RegistryRequestError } from './errors.js';
import { EventFollower, type LedgerEvent } from './events.js';
import { createGuard, type GuardHost, type GuardOptions, type GuardableClient } from './guard.js';
import { callRegistry } from './http.js';
import { ReportQueue, type ReportQueueOptions, type ReportStats } from './reports.js';
import type { Condition, Decision, DecisionOptions, Dedup, Logger, Percentiles, TrackRecord } from './types.js';

/** Options of a {@link Registry}. */
export interface RegistryOptions {
  /** The API key (role `reader` for decisions; `reporter` to file reports). Default env `CARDGATE_API_KEY`. */
  readonly apiKey?: string;
  /** Where diagnostics go; silent by default. `console` fits. */
  readonly logger?: Logger;
  /** The `fetch` to use. Default the global one. */
  readonly fetch?: typeof fetch;
  /** Timeout of `GET /v1/trust`, ms. Default 2000. */
  readonly trustTimeoutMs?: number;
  /** Timeout of the other registry calls (status, reports), ms. Default 5000. */
  readonly requestTimeoutMs?: number;
  /**
   * Follow `GET /v1/events` so cached decisions answer from memory until they change.
   * Default true; false: every `decision()` revalidates (a 304 while the decision stands).
   */
  readonly followEvents?: boolean;
  /** How long `close()` waits for queued reports, ms. Default 5000. */
  readonly closeTimeoutMs?: number;
  /** Tuning of the witness-report queue. */
  readonly reports?: ReportQueueOptions;
  /** Tuning of the event follower (reconnect backoff, idle timeout), ms. */
  readonly events?: { readonly initialBackoffMs?: number; readonly maxBackoffMs?: number; readonly idleTimeoutMs?: number };
}

/** Counters for tests and operators. */
export interface RegistryStats extends ReportStats {
  /** Whether the event follower is connected now. */
  readonly followerConnected: boolean;
  /** Ledger events received. */
  readonly eventsSeen: number;
  /** `decision()` calls answered from memory. */
  readonly cacheHits: number;
  /** `decision()` calls that asked the registry (first fetch or revalidation). */
  readonly registryCalls: number;
}

interface Entry {
  decision: Decision;
  etag: string | null;
  /** Good to answer from memory while the follower stays on connection `conn`. */
  fresh: boolean;
  conn: number;
  /** The newest ledger seq known to concern this callee that the cached decision may predate. */
  minSeq: number | undefined;
}

const NO_REQUIRES: readonly string[] = Object.freeze([]);

/** Cached decisions at most (agents × postures); beyond, the oldest is forgotten. */
const MAX_ENTRIES = 10_000;

/**
 * A cardgate registry, as an A2A caller uses it.
 *
 * ```ts
 * const registry = new Registry('http://cardgate:8080', { apiKey });
 * const d = await registry.decision(cardUrl, { callerVersion: '1.0', requires: ['streaming'] });
 * const guarded = registry.guard(client, { cardUrl });
 * await registry.close();
 * ```
 */
export class Registry {
  /** The registry's base URL. */
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #logger: Logger;
  readonly #fetch: typeof fetch;
  readonly #trustTimeout: number;
  readonly #requestTimeout: number;
  readonly #closeTimeout: number;
  readonly #follow: boolean;
  readonly #eventOptions: RegistryOptions['events'];
  readonly #cache = new Map<string, Entry>();
  readonly #byCallee = new Map<string, Set<Entry>>();
  readonly #calleeByCard = new Map<string, string>();
  readonly #inflight = new Map<string, Promise<Decision>>();
  readonly #localAdvisory = new Map<string, number | null>();
  readonly #reports: ReportQueue;
  readonly #host: GuardHost;
  #follower: EventFollower | undefined;
  #connected = false;
  /** Bumped on every connect and disconnect of the follower. */
  #conn = 0;
  /** Bumped on every ledger event and connection change. */
  #epoch = 0;
  #closed = false;
  #closing: Promise<void> | undefined;
  #eventsSeen = 0;
  #hits = 0;
  #calls = 0;

  /**
   * @param baseUrl - the registry's URL. Default env `CARDGATE_URL`.
   * @param options - see {@link RegistryOptions}.
   */
  constructor(baseUrl?: string, options: RegistryOptions = {}) {
    const url = baseUrl ?? process.env['CARDGATE_URL'];
    if (url === undefined || url === '') {
      throw new TypeError('cardgate: no registry URL (pass baseUrl or set CARDGATE_URL)');
    }
    this.baseUrl = url.endsWith('/') ? url : `${url}/`;
    new URL(this.baseUrl); // throws on a malformed URL
    const key = options.apiKey ?? process.env['CARDGATE_API_KEY'];
    this.#apiKey = key === '' ? undefined : key;
    this.#logger = options.logger ?? {};
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#trustTimeout = options.trustTimeoutMs ?? 2000;
    this.#requestTimeout = options.requestTimeoutMs ?? 5000;
    this.#closeTimeout = options.closeTimeoutMs ?? 5000;
    this.#follow = options.followEvents ?? true;
    this.#eventOptions = options.events;
    this.#reports = new ReportQueue(
      {
        resolveCalleeId: (cardUrl, callerVersion) => this.#resolveCalleeId(cardUrl, callerVersion),
        post: (calleeId, body) => this.#postReport(calleeId, body),
        accepted: (calleeId, seq) => this.#invalidate(calleeId, seq),
        logger: this.#logger,
      },
      options.reports,
    );
    this.#host = {
      decision: (cardUrl, o) => this.decision(cardUrl, o),
      report: (r) => this.#reports.enqueue(r),
      demoteLocally: (cardUrl, callerVersion, seq) => this.#localAdvisory.set(`${cardUrl}\n${callerVersion}`, seq),
      isDemotedLocally: (cardUrl, callerVersion, d) => this.#isDemotedLocally(cardUrl, callerVersion, d),
      logger: this.#logger,
    };
  }

  /**
   * The registry's decision about the agent whose card is at `cardUrl`, for this caller
   * posture. Answered from memory (no network) while the event follower is connected and no
   * event about that agent arrived since; revalidated with `If-None-Match` otherwise.
   *
   * @throws {@link RegistryUnavailableError} when the registry cannot be asked (network,
   *   timeout, 5xx); {@link RegistryRequestError} when it refuses (404: no agent registered
   *   with that card URL; 401/403: the key).
   */
  async decision(cardUrl: string, options: DecisionOptions = {}): Promise<Decision> {
    const callerVersion = options.callerVersion ?? '1.0';
    const dedup = options.dedup ?? 'timestamp';
    const requires = options.requires === undefined || options.requires.length === 0 ? NO_REQUIRES : options.requires;
    const req = requires.length < 2 ? (requires[0] ?? '') : [...requires].sort().join(',');
    const record = recordQuery(options);
    const key = `${cardUrl}\n${callerVersion}\n${dedup}\n${req}\n${record.toString()}`;
    const entry = this.#cache.get(key);
    const timeBound = options.maxAge !== undefined;
    if (entry !== undefined && entry.fresh && entry.conn === this.#conn && this.#connected && !timeBound) {
      this.#hits++;
      return entry.decision;
    }
    let pending = this.#inflight.get(key);
    if (pending === undefined) {
      pending = this.#fetchDecision(key, cardUrl, callerVersion, dedup, req, record).finally(() => this.#inflight.delete(key));
      this.#inflight.set(key, pending);
    }
    return pending;
  }

  /**
   * Wraps an `@a2a-js/sdk` client (or any object with `sendMessage` / `sendMessageStream`):
   * the result has the client's own type; `sendMessage`, `sendMessageStream` and
   * `resubscribeTask` are guarded, every other member is the client's. See the README for
   * the modes.
   */
  guard<C extends GuardableClient>(client: C, options: GuardOptions): C {
    return createGuard(this.#host, client, options);
  }

  /** Counters: reports sent / dropped / queued, cache hits, follower state. */
  stats(): RegistryStats {
    return {
      ...this.#reports.stats(),
      followerConnected: this.#connected,
      eventsSeen: this.#eventsSeen,
      cacheHits: this.#hits,
      registryCalls: this.#calls,
    };
  }

  /**
   * Stops the event follower and delivers the queued reports, waiting at most
   * `closeTimeoutMs` (5 s). Later decisions still work, from the network each time; later
   * reports are dropped.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      await Promise.all([this.#follower?.close(), this.#reports.close(this.#closeTimeout)]);
    })();
    return this.#closing;
  }

  async #fetchDecision(
    key: string,
    cardUrl: string,
    callerVersion: string,
    dedup: Dedup,
    requires: string,
    record: URLSearchParams,
  ): Promise<Decision> {
    this.#startFollower();
    const entry = this.#cache.get(key);
    const epoch = this.#epoch;
    const conn = this.#conn;
    const connected = this.#connected;
    const sentMinSeq = entry?.minSeq;
    const url = new URL('v1/trust', this.baseUrl);
    url.searchParams.set('card_url', cardUrl);
    url.searchParams.set('caller_version', callerVersion);
    url.searchParams.set('dedup', dedup);
    if (requires !== '') url.searchParams.set('requires', requires);
    for (const [name, value] of record) url.searchParams.set(name, value);
    if (sentMinSeq !== undefined) url.searchParams.set('min_seq', String(sentMinSeq));
    const headers = this.#auth();
    if (entry?.etag) headers['if-none-match'] = entry.etag;
    this.#calls++;
    let r;
    try {
      r = await callRegistry(this.#fetch, url.href, { headers, timeoutMs: this.#trustTimeout });
    } catch (e) {
      if (e instanceof RegistryRequestError && e.status === 404 && entry !== undefined) this.#forget(key, entry);
      throw e;
    }
    const decision = r.status === 304 && entry !== undefined ? entry.decision : parseDecision(r.body);
    const fresh = connected && this.#connected && this.#conn === conn && this.#epoch === epoch;
    const stored: Entry = entry ?? { decision, etag: null, fresh, conn, minSeq: undefined };
    if (entry !== undefined && entry.decision.calleeId !== decision.calleeId) this.#forget(key, entry);
    stored.decision = decision;
    stored.etag = r.etag ?? (r.status === 304 ? stored.etag : null);
    stored.fresh = fresh;
    stored.conn = conn;
    if (stored.minSeq === sentMinSeq) stored.minSeq = undefined;
    if (entry === undefined && this.#cache.size >= MAX_ENTRIES) {
      const [oldKey, oldEntry] = this.#cache.entries().next().value ?? [];
      if (oldKey !== undefined && oldEntry !== undefined) this.#forget(oldKey, oldEntry);
    }
    this.#cache.set(key, stored);
    let set = this.#byCallee.get(decision.calleeId);
    if (set === undefined) this.#byCallee.set(decision.calleeId, (set = new Set()));
    set.add(stored);
    this.#calleeByCard.set(`${cardUrl}\n${callerVersion}`, decision.calleeId);
    return decision;
  }

  #forget(key: string, entry: Entry): void {
    this.#cache.delete(key);
    this.#byCallee.get(entry.decision.calleeId)?.delete(entry);
  }

  #startFollower(): void {
    if (!this.#follow || this.#closed || this.#follower !== undefined) return;
    this.#follower = new EventFollower({
      baseUrl: this.baseUrl,
      apiKey: this.#apiKey,
      fetch: this.#fetch,
      logger: this.#logger,
      requestTimeoutMs: this.#requestTimeout,
      ...this.#eventOptions,
      onEvent: (e) => this.#onEvent(e),
      onConnection: (c) => {
        this.#connected = c;
        this.#conn++;
        this.#epoch++;
      },
    });
    this.#follower.start();
  }

  #onEvent(event: LedgerEvent): void {
    this.#eventsSeen++;
    this.#epoch++;
    if (event.calleeId === undefined) {
      for (const e of this.#cache.values()) e.fresh = false;
      return;
    }
    this.#invalidate(event.calleeId, event.seq);
  }

  /** Drops the cached decisions about a callee: the next `decision()` revalidates at `seq` at least. */
  #invalidate(calleeId: string, seq: number | undefined): void {
    const set = this.#byCallee.get(calleeId);
    if (set === undefined) return;
    for (const e of set) {
      e.fresh = false;
      if (seq !== undefined) e.minSeq = Math.max(e.minSeq ?? 0, seq);
    }
  }

  #isDemotedLocally(cardUrl: string, callerVersion: string, d: Decision): boolean {
    if (this.#localAdvisory.size === 0) return false;
    const k = `${cardUrl}\n${callerVersion}`;
    if (!this.#localAdvisory.has(k)) return false;
    if (d.authoritative && this.#localAdvisory.get(k) !== d.evidence.ledgerSeq) {
      this.#localAdvisory.delete(k);
      return false;
    }
    return true;
  }

  async #resolveCalleeId(cardUrl: string, callerVersion: string): Promise<string> {
    return this.#calleeByCard.get(`${cardUrl}\n${callerVersion}`) ?? (await this.decision(cardUrl, { callerVersion })).calleeId;
  }

  async #postReport(calleeId: string, body: unknown): Promise<unknown> {
    const url = new URL(`v1/callees/${encodeURIComponent(calleeId)}/reports`, this.baseUrl);
    const r = await callRegistry(this.#fetch, url.href, {
      method: 'POST',
      headers: this.#auth(),
      body,
      timeoutMs: this.#requestTimeout,
    });
    return r.body;
  }

  #auth(): Record<string, string> {
    return this.#apiKey === undefined ? {} : { authorization: `Bearer ${this.#apiKey}` };
  }
}

function text(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** The JSON of `GET /v1/trust` as a frozen {@link Decision}. */
export function parseDecision(body: unknown): Decision {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  if (typeof b['callee_id'] !== 'string' || typeof b['authoritative'] !== 'boolean') {
    throw new RegistryRequestError('cardgate GET /v1/trust: the answer is not a decision', 200, undefined);
  }
  const ev = (typeof b['evidence'] === 'object' && b['evidence'] !== null ? b['evidence'] : {}) as Record<string, unknown>;
  const conditions = Array.isArray(b['conditions']) ? (b['conditions'] as unknown[]) : [];
  const strOrNull = (v: unknown): string | null => (typeof v === 'string' ? v : null);
  return Object.freeze({
    calleeId: b['callee_id'],
    callerVersion: text(b['caller_version']),
    dedup: b['dedup'] === 'none' ? 'none' : 'timestamp',
    requires: Object.freeze(Array.isArray(b['requires']) ? b['requires'].map(String) : []),
    authoritative: b['authoritative'],
    gateState: strOrNull(b['gate_state']),
    conditions: Object.freeze(
      conditions.map((c): Condition => {
        const o = (typeof c === 'object' && c !== null ? c : {}) as Record<string, unknown>;
        const status = o['status'] === 'pass' || o['status'] === 'fail' ? o['status'] : 'unknown';
        return Object.freeze({ id: text(o['id']), status, reason: text(o['reason']) });
      }),
    ),
    evidence: Object.freeze({
      cardSnapshotId: strOrNull(ev['card_snapshot_id']),
      probeRunId: strOrNull(ev['probe_run_id']),
      ledgerSeq: typeof ev['ledger_seq'] === 'number' ? ev['ledger_seq'] : null,
      ledgerHash: strOrNull(ev['ledger_hash']),
      rulebook: strOrNull(ev['rulebook']),
      trackRecord: parseTrackRecord(ev['track_record']),
    }),
  });
}

/** What a caller asks of the record, as query parameters (empty when it asks nothing). */
function recordQuery(options: DecisionOptions): URLSearchParams {
  const q = new URLSearchParams();
  if (options.minTrials !== undefined) q.set('min_trials', String(Math.trunc(options.minTrials)));
  if (options.minCleanRate !== undefined) q.set('min_clean_rate', String(options.minCleanRate));
  if (options.maxAge !== undefined) q.set('max_age', String(Math.trunc(options.maxAge)));
  return q;
}

function parseTrackRecord(value: unknown): TrackRecord | null {
  if (typeof value !== 'object' || value === null) return null;
  const r = value as Record<string, unknown>;
  const num = (v: unknown): number => (typeof v === 'number' ? v : 0);
  const percentiles = (v: unknown): Percentiles | null => {
    if (typeof v !== 'object' || v === null) return null;
    const p = v as Record<string, unknown>;
    return Object.freeze({ p50Ms: num(p['p50_ms']), p95Ms: num(p['p95_ms']) });
  };
  const latency = (typeof r['latency'] === 'object' && r['latency'] !== null ? r['latency'] : {}) as Record<string, unknown>;
  const classes = ['new', 'stable', 'flaky', 'failing'] as const;
  const cls = classes.find((c) => c === r['class']) ?? 'new';
  return Object.freeze({
    runs: num(r['runs']),
    trials: num(r['trials']),
    clean: num(r['clean']),
    cleanRateLowerBound: typeof r['clean_rate_lower_bound'] === 'number' ? r['clean_rate_lower_bound'] : null,
    class: cls,
    newestRunAt: typeof r['newest_run_at'] === 'string' ? r['newest_run_at'] : null,
    newestPassAt: typeof r['newest_pass_at'] === 'string' ? r['newest_pass_at'] : null,
    latency: Object.freeze({
      send: percentiles(latency['send']),
      firstEvent: percentiles(latency['first_event']),
      terminal: percentiles(latency['terminal']),
      push: percentiles(latency['push']),
    }),
  });
}
