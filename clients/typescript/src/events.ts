/**
 * The event follower: keeps one `GET /v1/events` stream open and tells the registry client
 * about every ledger event, so that cached decisions are dropped the moment they change.
 */

import http from 'node:http';
import https from 'node:https';

import { callRegistry } from './http.js';
import { SseParser } from './sse.js';
import type { Logger } from './types.js';

/** One ledger event, as the stream carries it. */
export interface LedgerEvent {
  readonly seq: number;
  readonly calleeId: string | undefined;
  readonly kind: string;
  /** The whole `data:` JSON. */
  readonly body: unknown;
}

/** @internal */
export interface FollowerOptions {
  readonly baseUrl: string;
  readonly apiKey: string | undefined;
  readonly fetch: typeof fetch;
  readonly logger: Logger;
  readonly onEvent: (event: LedgerEvent) => void;
  /** Called on every connect and disconnect. */
  readonly onConnection: (connected: boolean) => void;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
  /** No byte for this long (keep-alives come every 15 s): the stream is taken for dead. */
  readonly idleTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
}

/**
 * Follows `GET /v1/events` from the ledger head (`GET /v1/status`, read again before each
 * reconnect), reconnecting with backoff (250 ms doubling to 5 s) and `Last-Event-ID`. Its sockets and timers are unref'd:
 * it never keeps the process alive.
 */
export class EventFollower {
  readonly #o: FollowerOptions;
  readonly #abort = new AbortController();
  #connected = false;
  #lastSeq: number | undefined;
  #running: Promise<void> | undefined;
  #request: http.ClientRequest | undefined;
  #warned = new Set<string>();

  constructor(options: FollowerOptions) {
    this.#o = options;
  }

  /** Whether the stream is open right now. */
  get connected(): boolean {
    return this.#connected;
  }

  /** The seq of the last event received (or the head it started from). */
  get lastSeq(): number | undefined {
    return this.#lastSeq;
  }

  /** Starts following (once). */
  start(): void {
    this.#running ??= this.#run();
  }

  /** Stops following and waits for the loop to end. */
  async close(): Promise<void> {
    this.#abort.abort();
    this.#request?.destroy();
    this.#setConnected(false);
    await this.#running;
  }

  async #run(): Promise<void> {
    const initial = this.#o.initialBackoffMs ?? 250;
    const max = this.#o.maxBackoffMs ?? 5000;
    let backoff = initial;
    while (!this.#stopped()) {
      let opened = false;
      try {
        const head = await this.#head();
        // A ledger behind the last seq seen is a new ledger (a registry started afresh).
        if (this.#lastSeq === undefined || head < this.#lastSeq) this.#lastSeq = head;
        opened = await this.#stream(this.#lastSeq);
      } catch (e) {
        if (this.#stopped()) break;
        this.#note('error', `cardgate event stream: ${e instanceof Error ? e.message : String(e)}`);
      }
      this.#setConnected(false);
      if (this.#stopped()) break;
      if (opened) backoff = initial;
      await sleep(backoff, this.#abort.signal);
      backoff = Math.min(backoff * 2, max);
    }
  }

  #stopped(): boolean {
    return this.#abort.signal.aborted;
  }

  async #head(): Promise<number> {
    const r = await callRegistry(this.#o.fetch, new URL('v1/status', this.#o.baseUrl).href, {
      headers: this.#auth(),
      timeoutMs: this.#o.requestTimeoutMs ?? 5000,
      signal: this.#abort.signal,
    });
    const seq = (r.body as { read_model?: { ledger_seq?: unknown } } | undefined)?.read_model?.ledger_seq;
    if (typeof seq !== 'number') throw new Error('GET /v1/status has no read_model.ledger_seq');
    return seq;
  }

  #auth(): Record<string, string> {
    return this.#o.apiKey === undefined ? {} : { authorization: `Bearer ${this.#o.apiKey}` };
  }

  /** One connection: resolves when it ends; true if it was open (HTTP 200). */
  #stream(after: number): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const url = new URL('v1/events', this.#o.baseUrl);
      url.searchParams.set('after', String(after));
      const headers: Record<string, string> = {
        ...this.#auth(),
        accept: 'text/event-stream',
        'last-event-id': String(after),
      };
      const get = url.protocol === 'https:' ? https.get : http.get;
      const idleMs = this.#o.idleTimeoutMs ?? 45_000;
      let idle: NodeJS.Timeout | undefined;
      const answer = setTimeout(() => req.destroy(new Error('no answer')), this.#o.requestTimeoutMs ?? 5000);
      answer.unref();
      let opened = false;
      const finish = (error?: Error): void => {
        clearTimeout(answer);
        if (idle !== undefined) clearTimeout(idle);
        this.#request = undefined;
        if (error !== undefined && !opened) reject(error);
        else resolve(opened);
      };
      const req = get(url, { headers, agent: false }, (res) => {
        clearTimeout(answer);
        if (res.statusCode !== 200) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            if (text.length < 500) text += c;
          });
          res.on('end', () => finish(new Error(`GET /v1/events: HTTP ${res.statusCode}: ${text.slice(0, 200)}`)));
          res.on('error', (e) => finish(e));
          return;
        }
        opened = true;
        this.#setConnected(true);
        const parser = new SseParser();
        const arm = (): void => {
          if (idle !== undefined) clearTimeout(idle);
          idle = setTimeout(() => req.destroy(new Error(`no data for ${idleMs} ms`)), idleMs);
          idle.unref();
        };
        arm();
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          arm();
          for (const m of parser.push(chunk)) {
            // The registry's own word that the stream broke: resume from the last event seen.
            if (m.event === 'error') {
              this.#note('stream-error', `cardgate event stream: ${m.data}`);
              req.destroy();
              return;
            }
            this.#dispatch(m.id, m.event, m.data);
          }
        });
        res.on('end', () => finish());
        res.on('error', () => finish());
        res.on('close', () => finish());
      });
      this.#request = req;
      req.on('socket', (s) => s.unref());
      req.on('error', (e) => finish(e));
    });
  }

  #dispatch(id: string | undefined, kind: string, data: string): void {
    let body: unknown;
    try {
      body = JSON.parse(data);
    } catch {
      this.#note('bad-frame', `cardgate event stream: a ${kind} frame is not JSON`);
      return;
    }
    const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const seq = typeof b['seq'] === 'number' ? b['seq'] : Number(id);
    if (!Number.isFinite(seq)) return;
    if (this.#lastSeq !== undefined && seq <= this.#lastSeq) return;
    this.#lastSeq = seq;
    const calleeId = typeof b['callee_id'] === 'string' ? b['callee_id'] : undefined;
    try {
      this.#o.onEvent({ seq, calleeId, kind: typeof b['kind'] === 'string' ? b['kind'] : kind, body });
    } catch (e) {
      this.#note('handler', `cardgate event handler failed: ${String(e)}`);
    }
  }

  #setConnected(connected: boolean): void {
    if (this.#connected === connected) return;
    this.#connected = connected;
    this.#o.onConnection(connected);
    this.#o.logger.debug?.(`cardgate event stream ${connected ? 'connected' : 'disconnected'}`);
  }

  /** Logs a warning once per kind, debug after. */
  #note(kind: string, message: string): void {
    if (this.#warned.has(kind)) {
      this.#o.logger.debug?.(message);
    } else {
      this.#warned.add(kind);
      this.#o.logger.warn?.(message);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = (): void => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    t.unref();
    signal.addEventListener('abort', done, { once: true });
  });
}
