/**
 * An in-process stand-in for the cardgate API, for unit tests of the registry client's
 * caching, event following and error handling (the real registry runs in test/it).
 */

import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Seen {
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: unknown;
}

export class FakeRegistry {
  readonly requests: Seen[] = [];
  /** card_url → [etag, decision JSON]. */
  readonly decisions = new Map<string, [string, Record<string, unknown>]>();
  /** Status of the next report answers (201 default). */
  reportStatus = 201;
  /** Status every trust answer gets instead of the decision, if set. */
  trustStatus: number | undefined;
  /** Never answer trust requests. */
  hangTrust = false;
  ledgerSeq = 10;
  readonly #streams = new Set<http.ServerResponse>();
  readonly #server: http.Server;
  url = '';

  constructor() {
    this.#server = http.createServer((req, res) => void this.#handle(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.#streams) s.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  setDecision(cardUrl: string, calleeId: string, authoritative: boolean, etag: string): void {
    this.decisions.set(cardUrl, [
      `"${etag}"`,
      {
        callee_id: calleeId,
        caller_version: '1.0',
        dedup: 'timestamp',
        requires: [],
        authoritative,
        gate_state: authoritative ? 'lifecycle-trusted' : 'demoted',
        conditions: [{ id: 'not-demoted', status: authoritative ? 'pass' : 'fail', reason: 'r' }],
        evidence: { card_snapshot_id: null, probe_run_id: null, ledger_seq: this.ledgerSeq, ledger_hash: 'h' },
      },
    ]);
  }

  /** Appends a ledger event and sends it to every open stream. */
  event(calleeId: string, kind = 'demoted'): number {
    const seq = ++this.ledgerSeq;
    const data = JSON.stringify({ seq, callee_id: calleeId, protocol_version: '1.0', kind, data: {} });
    for (const s of this.#streams) s.write(`id: ${seq}\nevent: ${kind}\ndata: ${data}\n\n`);
    return seq;
  }

  get openStreams(): number {
    return this.#streams.size;
  }

  /** Sends the registry's `error` frame on every open stream (it stays open). */
  failStreams(): void {
    for (const s of this.#streams) s.write('event: error\ndata: the stream failed; reconnect with Last-Event-ID\n\n');
  }

  /** Ends every open event stream (as a registry shutting down does). */
  dropStreams(): void {
    for (const s of this.#streams) s.end();
    this.#streams.clear();
  }

  count(path: string): number {
    return this.requests.filter((r) => r.path === path).length;
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    let text = '';
    for await (const chunk of req) text += String(chunk);
    const seen: Seen = {
      method: req.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      headers: req.headers,
      body: text ? (JSON.parse(text) as unknown) : undefined,
    };
    this.requests.push(seen);
    const json = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === '/v1/status') return json(200, { read_model: { ledger_seq: this.ledgerSeq } });
    if (url.pathname === '/v1/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': hello\n\n');
      this.#streams.add(res);
      res.on('close', () => this.#streams.delete(res));
      return;
    }
    if (url.pathname === '/v1/trust') {
      if (this.hangTrust) return;
      if (this.trustStatus !== undefined) return json(this.trustStatus, { error: { code: 'x', message: 'as configured' } });
      const d = this.decisions.get(url.searchParams.get('card_url') ?? '');
      if (d === undefined) return json(404, { error: { code: 'not_found', message: 'no callee' } });
      if (req.headers['if-none-match'] === d[0]) {
        res.writeHead(304, { etag: d[0] });
        res.end();
        return;
      }
      return json(200, d[1], { etag: d[0] });
    }
    const m = /^\/v1\/callees\/([^/]+)\/reports$/.exec(url.pathname);
    if (m !== null && req.method === 'POST') {
      if (this.reportStatus === 201) return json(201, { id: 'r', outcome: 'demoted', ledger_seq: this.event(m[1] ?? '') });
      return json(this.reportStatus, { error: { code: 'x', message: 'as configured' } });
    }
    json(404, { error: { code: 'not_found', message: url.pathname } });
  }
}

/** Polls `check` every 5 ms until it holds (or fails after `ms`). */
export async function until(check: () => boolean, ms = 5000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
