import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';

import { RegistryRequestError, RegistryUnavailableError } from '../../src/errors.js';
import { Registry, parseDecision } from '../../src/registry.js';
import { FakeRegistry, until } from './fake-registry.js';

const CARD = 'http://agent.test/.well-known/agent-card.json';
const CALLEE = '01a25067-0000-7000-8000-000000000001';

describe('Registry (against an in-process fake)', () => {
  let fake: FakeRegistry;
  const open: Registry[] = [];
  const registry = (options: ConstructorParameters<typeof Registry>[1] = {}): Registry => {
    const r = new Registry(fake.url, { apiKey: 'k', ...options });
    open.push(r);
    return r;
  };

  before(async () => {
    fake = await new FakeRegistry().start();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(async () => {
    await Promise.all(open.splice(0).map((r) => r.close()));
    fake.requests.length = 0;
    fake.setDecision(CARD, CALLEE, true, 'e1');
    fake.trustStatus = undefined;
    fake.hangTrust = false;
    fake.reportStatus = 201;
  });

  it('answers from memory, with no request, while the follower is connected', async () => {
    const r = registry();
    const d = await r.decision(CARD, { requires: ['streaming'] });
    assert.equal(d.authoritative, true);
    assert.equal(d.calleeId, CALLEE);
    assert.equal(d.evidence.ledgerSeq, 10);
    const q = fake.requests.find((x) => x.path === '/v1/trust');
    assert.equal(q?.headers.authorization, 'Bearer k');
    assert.equal(q?.query.get('caller_version'), '1.0');
    assert.equal(q?.query.get('dedup'), 'timestamp');
    assert.equal(q?.query.get('requires'), 'streaming');
    await until(() => r.stats().followerConnected, 5000, 'the follower');
    assert.equal(fake.requests.find((x) => x.path === '/v1/events')?.query.get('after'), '10');
    await r.decision(CARD, { requires: ['streaming'] }); // stored while connected
    const before = fake.count('/v1/trust');
    for (let i = 0; i < 100; i++) assert.equal(await r.decision(CARD, { requires: ['streaming'] }), await r.decision(CARD, { requires: ['streaming'] }));
    assert.equal(fake.count('/v1/trust'), before);
    assert.ok(r.stats().cacheHits >= 200);
  });

  it('asks for a track record and freshness, and never serves a fresh-asking answer from memory', async () => {
    const r = registry();
    await until(() => (void r.decision(CARD), r.stats().followerConnected), 5000, 'the follower');
    await r.decision(CARD, { minTrials: 9, minCleanRate: 0.9 });
    const q = fake.requests.at(-1)?.query;
    assert.equal(q?.get('min_trials'), '9');
    assert.equal(q?.get('min_clean_rate'), '0.9');
    assert.equal(q?.get('max_age'), null);
    const n = fake.count('/v1/trust');
    await r.decision(CARD, { minTrials: 9, minCleanRate: 0.9 });
    assert.equal(fake.count('/v1/trust'), n, 'a record asked for is cached like any posture');
    await r.decision(CARD, { maxAge: 60 });
    await r.decision(CARD, { maxAge: 60 });
    assert.equal(fake.count('/v1/trust'), n + 2);
    assert.equal(fake.requests.at(-1)?.query.get('max_age'), '60');
  });

  it('reads the track record from the evidence', () => {
    const d = parseDecision({
      callee_id: CALLEE,
      authoritative: false,
      conditions: [{ id: 'track-record', status: 'fail', reason: 'r' }],
      evidence: {
        track_record: {
          runs: 3,
          trials: 9,
          clean: 7,
          clean_rate_lower_bound: 0.453,
          class: 'flaky',
          newest_run_at: '2026-12-07T10:00:00Z',
          newest_pass_at: null,
          latency: { send: null, first_event: { p50_ms: 12, p95_ms: 40 }, terminal: null, push: null },
        },
      },
    });
    const t = d.evidence.trackRecord;
    assert.equal(t?.class, 'flaky');
    assert.equal(t?.cleanRateLowerBound, 0.453);
    assert.deepEqual(t?.latency.firstEvent, { p50Ms: 12, p95Ms: 40 });
    assert.equal(t?.latency.send, null);
    assert.equal(parseDecision({ callee_id: CALLEE, authoritative: true }).evidence.trackRecord, null);
  });

  it('keys the cache by posture, with requires in any order', async () => {
    const r = registry();
    await until(() => (void r.decision(CARD), r.stats().followerConnected), 5000, 'the follower');
    await r.decision(CARD, { requires: ['streaming', 'pushNotifications'] });
    const n = fake.count('/v1/trust');
    await r.decision(CARD, { requires: ['pushNotifications', 'streaming'] });
    assert.equal(fake.count('/v1/trust'), n);
    assert.equal(fake.requests.at(-1)?.query.get('requires'), 'pushNotifications,streaming');
    await r.decision(CARD, { dedup: 'none' });
    assert.equal(fake.count('/v1/trust'), n + 1);
  });

  it('an event about the callee makes the next decision revalidate, at that seq', async () => {
    const r = registry();
    await r.decision(CARD);
    await until(() => r.stats().followerConnected, 5000, 'the follower');
    const d1 = await r.decision(CARD);
    const n = fake.count('/v1/trust');
    fake.event('someone-else');
    await until(() => r.stats().eventsSeen === 1, 5000, 'the first event');
    assert.equal(await r.decision(CARD), d1);
    assert.equal(fake.count('/v1/trust'), n, 'an event about another callee changes nothing');
    const seq = fake.event(CALLEE, 'probe-finished');
    await until(() => r.stats().eventsSeen === 2, 5000, 'the second event');
    assert.equal(await r.decision(CARD), d1, '304: the same decision');
    const q = fake.requests.at(-1);
    assert.equal(q?.headers['if-none-match'], '"e1"');
    assert.equal(q?.query.get('min_seq'), String(seq));
    assert.equal(fake.count('/v1/trust'), n + 1);
    await r.decision(CARD);
    assert.equal(fake.count('/v1/trust'), n + 1, 'fresh again');
    fake.setDecision(CARD, CALLEE, false, 'e2');
    fake.event(CALLEE);
    await until(() => r.stats().eventsSeen === 3, 5000, 'the third event');
    const d2 = await r.decision(CARD);
    assert.equal(d2.authoritative, false);
    assert.equal(d2.gateState, 'demoted');
  });

  it('revalidates every time while disconnected, and resumes with Last-Event-ID', async () => {
    const r = registry({ events: { initialBackoffMs: 20, maxBackoffMs: 50 } });
    await r.decision(CARD);
    await until(() => r.stats().followerConnected, 5000, 'the follower');
    const seq = fake.event('other');
    await until(() => r.stats().eventsSeen === 1, 5000, 'the event');
    fake.dropStreams();
    await until(() => fake.requests.filter((x) => x.path === '/v1/events').length === 2, 5000, 'the reconnect');
    const again = fake.requests.filter((x) => x.path === '/v1/events')[1];
    assert.equal(again?.headers['last-event-id'], String(seq));
    assert.equal(again?.query.get('after'), String(seq));
    assert.equal(fake.count('/v1/status'), 2, 'the head is read before each connection');
    // A registry whose ledger is behind what was seen has a new ledger: follow it from its head.
    fake.ledgerSeq = 3;
    fake.dropStreams();
    await until(() => fake.requests.filter((x) => x.path === '/v1/events').length === 3, 5000, 'the second reconnect');
    assert.equal(fake.requests.filter((x) => x.path === '/v1/events')[2]?.query.get('after'), '3');
    fake.ledgerSeq = 10;
  });

  it('reconnects when the registry says the stream failed', async () => {
    const r = registry({ events: { initialBackoffMs: 20 } });
    await r.decision(CARD);
    await until(() => r.stats().followerConnected, 5000, 'the follower');
    const seq = fake.event('other');
    await until(() => r.stats().eventsSeen === 1, 5000, 'the event');
    fake.failStreams();
    await until(() => fake.requests.filter((x) => x.path === '/v1/events').length === 2, 5000, 'the reconnect');
    assert.equal(fake.requests.filter((x) => x.path === '/v1/events')[1]?.headers['last-event-id'], String(seq));
    await until(() => r.stats().followerConnected, 5000, 'the follower again');
  });

  it('coalesces concurrent first requests', async () => {
    const r = registry({ followEvents: false });
    const all = await Promise.all(Array.from({ length: 20 }, () => r.decision(CARD)));
    assert.equal(fake.count('/v1/trust'), 1);
    assert.ok(all.every((d) => d === all[0]));
    await r.decision(CARD);
    assert.equal(fake.count('/v1/trust'), 2, 'without the follower, every decision revalidates');
    assert.equal(fake.requests.at(-1)?.headers['if-none-match'], '"e1"');
  });

  it('throws RegistryUnavailableError on 5xx, timeouts and refused connections', async () => {
    const r = registry({ followEvents: false, trustTimeoutMs: 150 });
    fake.trustStatus = 503;
    await assert.rejects(r.decision(CARD), (e: unknown) => e instanceof RegistryUnavailableError && e.status === 503);
    fake.trustStatus = undefined;
    fake.hangTrust = true;
    await assert.rejects(r.decision(CARD), (e: unknown) => e instanceof RegistryUnavailableError && /timed out/.test(e.message));
    const gone = new Registry('http://127.0.0.1:9', { followEvents: false });
    await assert.rejects(gone.decision(CARD), RegistryUnavailableError);
  });

  it('throws RegistryRequestError on 404 and other refusals', async () => {
    const r = registry({ followEvents: false });
    await assert.rejects(r.decision('http://nowhere/'), (e: unknown) => e instanceof RegistryRequestError && e.status === 404 && e.code === 'not_found');
    fake.trustStatus = 401;
    await assert.rejects(r.decision(CARD), (e: unknown) => e instanceof RegistryRequestError && e.status === 401);
  });

  it('reads its URL and key from the environment', () => {
    const saved = [process.env['CARDGATE_URL'], process.env['CARDGATE_API_KEY']];
    try {
      process.env['CARDGATE_URL'] = 'http://example.test:1/prefix';
      process.env['CARDGATE_API_KEY'] = 'from-env';
      assert.equal(new Registry().baseUrl, 'http://example.test:1/prefix/');
      delete process.env['CARDGATE_URL'];
      assert.throws(() => new Registry(), TypeError);
    } finally {
      if (saved[0] === undefined) delete process.env['CARDGATE_URL'];
      else process.env['CARDGATE_URL'] = saved[0];
      if (saved[1] === undefined) delete process.env['CARDGATE_API_KEY'];
      else process.env['CARDGATE_API_KEY'] = saved[1];
    }
  });

  it('files a guard finding as a report, in the API shape, and re-reads the decision after it', async () => {
    const r = registry({ reports: { intervalMs: 10 } });
    const client = {
      sendMessage: () => Promise.resolve(undefined),
      async *sendMessageStream(): AsyncGenerator<unknown, void, undefined> {
        await Promise.resolve();
        yield { payload: { $case: 'statusUpdate', value: { taskId: 't1', contextId: 'c', status: { state: 3, message: undefined, timestamp: '2026-01-01T00:00:00Z' }, metadata: undefined } } };
        yield { payload: { $case: 'artifactUpdate', value: { taskId: 't1', contextId: 'c', artifact: undefined, append: false, lastChunk: false, metadata: undefined } } };
      },
    };
    await r.decision(CARD);
    await until(() => r.stats().followerConnected, 5000, 'the follower');
    const g = r.guard(client, { cardUrl: CARD });
    const seen: unknown[] = [];
    for await (const e of g.sendMessageStream()) seen.push(e);
    assert.equal(seen.length, 1);
    await until(() => r.stats().reportsSent === 1, 5000, 'the report');
    const post = fake.requests.find((x) => x.method === 'POST');
    assert.equal(post?.path, `/v1/callees/${CALLEE}/reports`);
    assert.deepEqual(post?.body, {
      protocol_version: '1.0',
      trigger: 'duplicate-terminal',
      evidence: {
        observed: [
          { statusUpdate: { taskId: 't1', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED', timestamp: '2026-01-01T00:00:00Z' } } },
          { artifactUpdate: { taskId: 't1', contextId: 'c' } },
        ],
      },
    });
    const n = fake.count('/v1/trust');
    await r.decision(CARD);
    assert.equal(fake.count('/v1/trust'), n + 1, 'the accepted report dropped the cached decision');
    assert.deepEqual(r.stats().reportsQueued, 0);
  });
});
