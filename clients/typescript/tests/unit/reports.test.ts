import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { RegistryRequestError, RegistryUnavailableError } from '../../src/errors.js';
import { ReportQueue, type ReportSink, type ViolationReport } from '../../src/reports.js';
import { until } from './fake-registry.js';

function report(taskId: string, overrides: Partial<ViolationReport> = {}): ViolationReport {
  return {
    cardUrl: 'http://agent/',
    callerVersion: '1.0',
    calleeId: 'callee',
    taskId,
    trigger: 'duplicate-terminal',
    observed: [{}],
    ...overrides,
  };
}

/** A sink whose `post` answers with `outcome()` and records what it got. */
function sink(outcome: () => Error | undefined) {
  const posted: { calleeId: string; body: unknown }[] = [];
  const accepted: string[] = [];
  let resolved = 0;
  const s: ReportSink = {
    resolveCalleeId: () => {
      resolved++;
      return Promise.resolve('resolved-callee');
    },
    post: (calleeId, body) => {
      const e = outcome();
      if (e !== undefined) return Promise.reject(e);
      posted.push({ calleeId, body });
      return Promise.resolve({ ledger_seq: 1 });
    },
    accepted: (calleeId) => accepted.push(calleeId),
    logger: {},
  };
  return { s, posted, accepted, resolved: () => resolved };
}

describe('ReportQueue', () => {
  it('delivers in the background and deduplicates per (callee, task, trigger)', async () => {
    const k = sink(() => undefined);
    const q = new ReportQueue(k.s, { intervalMs: 5 });
    assert.equal(q.enqueue(report('a')), true);
    assert.equal(q.enqueue(report('a')), false);
    assert.equal(q.enqueue(report('a', { trigger: 'terminal-without-timestamp' })), true);
    assert.equal(q.enqueue(report('b', { calleeId: undefined })), true);
    await until(() => q.stats().reportsSent === 3, 5000, 'three reports');
    assert.deepEqual(k.posted.map((p) => p.calleeId), ['callee', 'callee', 'resolved-callee']);
    assert.equal(k.resolved(), 1, 'the callee id is resolved at delivery when unknown');
    assert.deepEqual(k.posted[0]?.body, { protocol_version: '1.0', trigger: 'duplicate-terminal', evidence: { observed: [{}] } });
    assert.deepEqual(k.accepted, ['callee', 'callee', 'resolved-callee']);
    assert.deepEqual(q.stats(), { reportsSent: 3, reportsDropped: 0, reportsQueued: 0 });
    await q.close(100);
  });

  it('is bounded: beyond capacity the oldest is dropped and counted', async () => {
    const k = sink(() => undefined);
    const q = new ReportQueue(k.s, { capacity: 2, intervalMs: 50 });
    q.enqueue(report('a'));
    q.enqueue(report('b'));
    q.enqueue(report('c'));
    assert.deepEqual(q.stats(), { reportsSent: 0, reportsDropped: 1, reportsQueued: 2 });
    await q.close(1000);
    assert.deepEqual(k.posted.map((p) => (p.body as { trigger: string }).trigger).length, 2);
    assert.deepEqual(q.stats(), { reportsSent: 2, reportsDropped: 1, reportsQueued: 0 });
  });

  it('drops a report the registry refuses (4xx), without retrying it', async () => {
    let calls = 0;
    const k = sink(() => (calls++, new RegistryRequestError('400', 400, 'invalid')));
    const q = new ReportQueue(k.s, { intervalMs: 5 });
    q.enqueue(report('a'));
    await until(() => q.stats().reportsDropped === 1, 5000, 'the drop');
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(calls, 1);
    assert.deepEqual(q.stats(), { reportsSent: 0, reportsDropped: 1, reportsQueued: 0 });
  });

  it('retries with backoff while the registry is down, then delivers', async () => {
    let failures = 3;
    const k = sink(() => (failures-- > 0 ? new RegistryUnavailableError('down') : undefined));
    const q = new ReportQueue(k.s, { intervalMs: 5, initialBackoffMs: 10, maxBackoffMs: 40 });
    q.enqueue(report('a'));
    q.enqueue(report('b'));
    await until(() => q.stats().reportsSent === 2, 5000, 'both reports');
    assert.equal(failures, -2, 'three failed tries, then two deliveries');
    assert.deepEqual(q.stats(), { reportsSent: 2, reportsDropped: 0, reportsQueued: 0 });
  });

  it('rate-limits: a burst is spread over time', async () => {
    const k = sink(() => undefined);
    const q = new ReportQueue(k.s, { intervalMs: 5, ratePerSecond: 4 });
    for (let i = 0; i < 8; i++) q.enqueue(report(`t${i}`));
    await new Promise((r) => setTimeout(r, 100));
    const early = q.stats().reportsSent;
    assert.ok(early <= 5, `sent ${early} at once`);
    await until(() => q.stats().reportsSent === 8, 5000, 'all eight');
  });

  it('close() waits a bounded time, then drops what is left', async () => {
    const k = sink(() => new RegistryUnavailableError('down'));
    const q = new ReportQueue(k.s, { intervalMs: 5, initialBackoffMs: 10 });
    q.enqueue(report('a'));
    const t = performance.now();
    await q.close(200);
    const took = performance.now() - t;
    assert.ok(took < 2000, `close took ${took} ms`);
    assert.deepEqual(q.stats(), { reportsSent: 0, reportsDropped: 1, reportsQueued: 0 });
    assert.equal(q.enqueue(report('b')), false);
  });
});
