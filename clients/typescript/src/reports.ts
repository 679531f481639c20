/**
 * The witness-report queue: violations the guard saw, delivered to
 * `POST /v1/callees/{id}/reports` in the background. Bounded, batched, rate-limited,
 * deduplicated, retried while the registry is down; it never blocks the caller.
 */

import { RegistryRequestError } from './errors.js';
import type { Logger, Trigger } from './types.js';

/** One violation to report. `observed` is the evidence, already in its wire JSON. */
export interface ViolationReport {
  readonly cardUrl: string;
  readonly callerVersion: string;
  /** The callee's id, if the guard knew it; resolved from the card URL at delivery if not. */
  readonly calleeId: string | undefined;
  readonly taskId: string;
  readonly trigger: Trigger;
  readonly observed: readonly unknown[];
}

/** Tuning of the report queue. */
export interface ReportQueueOptions {
  /** Reports held at most; beyond, the oldest is dropped (and counted). Default 256. */
  readonly capacity?: number;
  /** Reports sent per second at most (token bucket). Default 10. */
  readonly ratePerSecond?: number;
  /** How often the worker drains the queue, in ms. Default 100. */
  readonly intervalMs?: number;
  /** First retry delay after a failed delivery, doubling up to `maxBackoffMs`. Default 250. */
  readonly initialBackoffMs?: number;
  /** Default 5000. */
  readonly maxBackoffMs?: number;
}

/** Counters of the report queue. */
export interface ReportStats {
  /** Reports the registry accepted (201). */
  readonly reportsSent: number;
  /** Reports given up: overflow, refused (4xx), unknown callee, or unsent at close. */
  readonly reportsDropped: number;
  /** Reports waiting now. */
  readonly reportsQueued: number;
}

/** What the queue needs from the registry client. @internal */
export interface ReportSink {
  /** The callee id of a card URL (cache or `GET /v1/trust`). */
  resolveCalleeId(cardUrl: string, callerVersion: string): Promise<string>;
  /** Posts one report; resolves with the 201 body; throws the registry client's errors. */
  post(calleeId: string, body: unknown): Promise<unknown>;
  /** A report was accepted. */
  accepted(calleeId: string, ledgerSeq: number | undefined): void;
  readonly logger: Logger;
}

interface Pending {
  readonly report: ViolationReport;
  calleeId: string | undefined;
}

const DEDUP_MEMORY = 4096;

/** The queue and its worker. @internal */
export class ReportQueue {
  readonly #sink: ReportSink;
  readonly #capacity: number;
  readonly #rate: number;
  readonly #interval: number;
  readonly #initialBackoff: number;
  readonly #maxBackoff: number;
  readonly #queue: Pending[] = [];
  readonly #seen = new Set<string>();
  #tokens: number;
  #refilledAt = performance.now();
  #backoff: number;
  #retryAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #draining: Promise<void> | undefined;
  #closed = false;
  #sent = 0;
  #dropped = 0;

  constructor(sink: ReportSink, options: ReportQueueOptions = {}) {
    this.#sink = sink;
    this.#capacity = Math.max(1, options.capacity ?? 256);
    this.#rate = Math.max(0.1, options.ratePerSecond ?? 10);
    this.#interval = Math.max(1, options.intervalMs ?? 100);
    this.#initialBackoff = options.initialBackoffMs ?? 250;
    this.#maxBackoff = options.maxBackoffMs ?? 5000;
    this.#backoff = this.#initialBackoff;
    this.#tokens = Math.max(1, this.#rate);
  }

  /** The counters. */
  stats(): ReportStats {
    return { reportsSent: this.#sent, reportsDropped: this.#dropped, reportsQueued: this.#queue.length };
  }

  /**
   * Queues a report unless the same (callee, task, trigger) was queued before. Never blocks.
   * @returns whether it was queued.
   */
  enqueue(report: ViolationReport): boolean {
    if (this.#closed) {
      this.#dropped++;
      return false;
    }
    const key = `${report.cardUrl}\n${report.callerVersion}\n${report.taskId}\n${report.trigger}`;
    if (this.#seen.has(key)) return false;
    this.#seen.add(key);
    if (this.#seen.size > DEDUP_MEMORY) {
      const oldest = this.#seen.values().next().value;
      if (oldest !== undefined) this.#seen.delete(oldest);
    }
    this.#queue.push({ report, calleeId: report.calleeId });
    if (this.#queue.length > this.#capacity) {
      this.#queue.shift();
      this.#dropped++;
      this.#note('overflow', `cardgate report queue full (${this.#capacity}): dropped the oldest report`);
    }
    this.#schedule(this.#interval);
    return true;
  }

  /**
   * Stops taking reports and delivers what is queued, waiting at most `timeoutMs`; what is
   * still queued then is dropped (and counted).
   */
  async close(timeoutMs: number): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const deadline = performance.now() + timeoutMs;
    await this.#draining;
    while (this.#queue.length > 0 && performance.now() < deadline) {
      const wait = Math.min(
        Math.max(this.#retryAt - performance.now(), 0),
        this.#initialBackoff,
        deadline - performance.now(),
      );
      if (wait > 0) await delay(wait);
      this.#retryAt = 0;
      await this.#drain(deadline);
    }
    if (this.#queue.length > 0) {
      this.#dropped += this.#queue.length;
      this.#sink.logger.warn?.(`cardgate: ${this.#queue.length} report(s) not delivered before close`);
      this.#queue.length = 0;
    }
  }

  #schedule(ms: number): void {
    if (this.#closed || this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#draining !== undefined) return; // its end schedules the next round
      this.#draining = this.#drain(Infinity).finally(() => {
        this.#draining = undefined;
        if (this.#queue.length > 0) {
          this.#schedule(Math.max(this.#interval, this.#retryAt - performance.now()));
        }
      });
    }, ms);
    this.#timer.unref();
  }

  #refill(): void {
    const now = performance.now();
    this.#tokens = Math.min(Math.max(1, this.#rate), this.#tokens + ((now - this.#refilledAt) / 1000) * this.#rate);
    this.#refilledAt = now;
  }

  /** Sends what is queued, as the rate allows; stops at the first failure that is worth a retry. */
  async #drain(deadline: number): Promise<void> {
    if (performance.now() < this.#retryAt) return;
    while (this.#queue.length > 0 && performance.now() < deadline) {
      this.#refill();
      if (this.#tokens < 1) {
        if (!this.#closed) return;
        await delay(Math.ceil(((1 - this.#tokens) / this.#rate) * 1000));
        continue;
      }
      const item = this.#queue[0];
      if (item === undefined) return;
      this.#tokens -= 1;
      const outcome = await this.#deliver(item);
      if (outcome === 'retry') {
        this.#retryAt = performance.now() + this.#backoff;
        this.#backoff = Math.min(this.#backoff * 2, this.#maxBackoff);
        return;
      }
      this.#backoff = this.#initialBackoff;
      const i = this.#queue.indexOf(item);
      if (i >= 0) this.#queue.splice(i, 1);
      if (outcome === 'sent') this.#sent++;
      else this.#dropped++;
    }
  }

  async #deliver(item: Pending): Promise<'sent' | 'dropped' | 'retry'> {
    const r = item.report;
    try {
      item.calleeId ??= await this.#sink.resolveCalleeId(r.cardUrl, r.callerVersion);
      const body = {
        protocol_version: r.callerVersion,
        trigger: r.trigger,
        evidence: { observed: r.observed },
      };
      const answer = (await this.#sink.post(item.calleeId, body)) as { ledger_seq?: unknown } | undefined;
      const seq = typeof answer?.ledger_seq === 'number' ? answer.ledger_seq : undefined;
      this.#sink.logger.info?.(`cardgate: reported ${r.trigger} of task ${r.taskId} at ${r.cardUrl}`);
      this.#sink.accepted(item.calleeId, seq);
      return 'sent';
    } catch (e) {
      if (e instanceof RegistryRequestError) {
        this.#sink.logger.warn?.(
          `cardgate: dropped the ${r.trigger} report of task ${r.taskId} at ${r.cardUrl}: ${e.message}`,
        );
        return 'dropped';
      }
      this.#note('retry', `cardgate: report delivery failed, will retry: ${e instanceof Error ? e.message : String(e)}`);
      return 'retry';
    }
  }

  #warned = new Set<string>();

  #note(kind: string, message: string): void {
    if (this.#warned.has(kind)) this.#sink.logger.debug?.(message);
    else {
      this.#warned.add(kind);
      this.#sink.logger.warn?.(message);
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
