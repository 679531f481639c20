/**
 * The caller kit against real processes: cardgate, the fake agent (misbehaving only on
 * turns that say FAULT, so it is lifecycle-trusted first) and the JS SDK test agent.
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { TaskState } from '@a2a-js/sdk';
import type { Client } from '@a2a-js/sdk/client';

import { CardLifecycleMismatchError, Registry, type DecisionOptions } from '../../src/index.js';
import { collect, message, sdkClient, summarize, terminals } from './a2a.js';
import { Cardgate, missingPrerequisite, poll, startFakeAgent, startJsAgent, sleep, type Agent } from './harness.js';

const missing = missingPrerequisite();
const POSTURE: DecisionOptions = { callerVersion: '1.0', dedup: 'timestamp', requires: ['streaming'] };

describe('caller kit against cardgate', { skip: missing !== undefined && process.env['CARDGATE_IT_OPTIONAL'] === '1' ? missing : false }, () => {
  let cg: Cardgate;
  let reporterKey: string;
  let readerKey: string;
  let dup: Agent; // two terminal events on FAULT turns
  let late: Agent; // an artifact after the terminal status on FAULT turns
  let watched: Agent; // demoted while a second caller watches
  let bad: Agent; // two terminal events always: fails its probe
  let js: Agent; // the JS SDK agent: conformant
  const ids = new Map<Agent, string>();
  const registries: Registry[] = [];
  const registry = (apiKey: string, options: ConstructorParameters<typeof Registry>[1] = {}): Registry => {
    const r = new Registry(cg.url, { apiKey, ...options });
    registries.push(r);
    return r;
  };

  before(async () => {
    if (missing !== undefined) throw new Error(`integration prerequisites: ${missing}`);
    cg = await Cardgate.start();
    [dup, late, watched, bad, js] = await Promise.all([
      startFakeAgent('two-terminal-events', 'FAULT'),
      startFakeAgent('event-after-terminal', 'FAULT'),
      startFakeAgent('two-terminal-events', 'FAULT'),
      startFakeAgent('two-terminal-events'),
      startJsAgent(),
    ]);
    [reporterKey, readerKey] = await Promise.all([cg.key('reporter'), cg.key('reader')]);
    for (const a of [dup, late, watched, bad, js]) ids.set(a, await cg.register(a.cardUrl));
    await Promise.all([
      ...[dup, late, watched, js].map((a) => cg.waitTrusted(a.cardUrl)),
      cg.waitFor(bad.cardUrl, 'its lifecycle probe to fail', (d) =>
        (d['conditions'] as { id: string; status: string }[]).some((c) => c.id === 'lifecycle-probe' && c.status === 'fail'),
      ),
    ]);
  }, { timeout: 150_000 });

  after(async () => {
    await Promise.all(registries.map((r) => r.close()));
    await Promise.all([dup, late, watched, bad, js].filter((a) => a !== undefined).map((a) => a.stop()));
    await cg?.stop();
  });

  for (const [name, agent, fault] of [
    ['a duplicate terminal', () => dup, 'two terminal events'],
    ['an event after the end', () => late, 'an artifact update after the terminal status'],
  ] as const) {
    it(`safe mode delivers one terminal and nothing after it, reports ${name}, and the agent is demoted`, async () => {
      const a = agent();
      const plain = await sdkClient(a.origin);
      // Control: the plain SDK client hands the app the violation.
      const control = await collect(plain.sendMessageStream(message('FAULT, please')));
      const last = summarize(control).slice(-2);
      if (fault === 'two terminal events') {
        assert.equal(terminals(control), 2, `control: ${summarize(control).join(' ')}`);
      } else {
        assert.deepEqual(last, ['status-update:completed', 'artifact-update'], `control: ${summarize(control).join(' ')}`);
      }

      const r = registry(reporterKey);
      const before = await r.decision(a.cardUrl, POSTURE);
      assert.equal(before.authoritative, true);
      // The record of the probe cycle that promoted it: its trials, clean.
      const record = before.evidence.trackRecord;
      assert.ok(record !== null && record.trials >= 1 && record.clean === record.trials, JSON.stringify(record));
      const unproven = await r.decision(a.cardUrl, { ...POSTURE, minTrials: 1000 });
      assert.equal(unproven.authoritative, false);
      assert.equal(unproven.conditions.find((c) => c.id === 'track-record')?.status, 'unknown');
      const guarded = r.guard(plain, { cardUrl: a.cardUrl, ...POSTURE, mode: 'safe' });
      const events = await collect(guarded.sendMessageStream(message('FAULT, please')));
      assert.equal(terminals(events), 1, summarize(events).join(' '));
      assert.equal(summarize(events).at(-1), 'status-update:completed', 'the terminal state is the last event');
      assert.equal(events.length, control.length - 1);

      const calleeId = ids.get(a) ?? '';
      const reports = await poll('the report', 15_000, async () => {
        const list = await cg.reports(calleeId);
        return list.length > 0 ? list : undefined;
      });
      assert.equal(reports.length, 1);
      assert.equal(reports[0]?.['trigger'], 'duplicate-terminal');
      assert.equal(reports[0]?.['outcome'], 'demoted');
      const observed = (reports[0]?.['evidence'] as { observed: unknown[] }).observed;
      assert.equal(observed.length, 2);
      assert.ok(summarize(observed)[0] === 'status-update:completed');
      // The decision follows the report within moments (GET /v1/trust reads a read model
      // that is updated right after the ledger write that the report listing already shows).
      const decision = await cg.waitFor(a.cardUrl, 'demoted', (d) => d['gate_state'] === 'demoted', 10_000);
      assert.equal(decision['authoritative'], false);
      await poll('the client to see the demotion', 5000, async () => ((await r.decision(a.cardUrl, POSTURE)).authoritative ? undefined : true));
      assert.deepEqual(
        { sent: r.stats().reportsSent, dropped: r.stats().reportsDropped, queued: r.stats().reportsQueued },
        { sent: 1, dropped: 0, queued: 0 },
      );
    });
  }

  it('a demotion reaches a second caller, which answered from memory until then, within 1 s', async (t) => {
    const watcherKey = await cg.key('reader');
    const watcher = registry(watcherKey);
    assert.equal((await watcher.decision(watched.cardUrl, POSTURE)).authoritative, true);
    await poll('the watcher to follow events', 5000, () => Promise.resolve(watcher.stats().followerConnected || undefined), 5);
    await watcher.decision(watched.cardUrl, POSTURE); // stored while following
    const calls = watcher.stats().registryCalls;
    for (let i = 0; i < 10; i++) assert.equal((await watcher.decision(watched.cardUrl, POSTURE)).authoritative, true);
    assert.equal(watcher.stats().registryCalls, calls, 'answered from memory');

    let seenAt = 0;
    const watching = (async () => {
      for (;;) {
        if (!(await watcher.decision(watched.cardUrl, POSTURE)).authoritative) return (seenAt = performance.now());
        await sleep(1);
      }
    })();
    let acceptedAt = 0;
    // The report queue logs (info) the moment the registry's 201 is read.
    const reporter = registry(reporterKey, { logger: { info: (m) => (acceptedAt ||= m.includes('reported') ? performance.now() : 0) } });
    const guarded = reporter.guard(await sdkClient(watched.origin), { cardUrl: watched.cardUrl, ...POSTURE });
    assert.equal(terminals(await collect(guarded.sendMessageStream(message('FAULT again')))), 1);
    await poll('the report to be accepted', 15_000, () => Promise.resolve(acceptedAt || undefined), 1);
    await Promise.race([watching, sleep(10_000).then(() => assert.fail('the watcher never saw the demotion'))]);
    const latency = seenAt - acceptedAt;
    // Negative: the event reached the watcher before the reporter had read the registry's 201.
    t.diagnostic(`demotion reached the second caller ${latency.toFixed(1)} ms after the report was accepted`);
    assert.ok(watcher.stats().eventsSeen > 0, 'through the event stream');
    assert.ok(latency < 1000, `took ${latency} ms`);
  });

  it('strict mode refuses an advisory agent before sending it anything', async () => {
    let agentCalls = 0;
    const counting: typeof fetch = (input, init) => {
      agentCalls++;
      return fetch(input, init);
    };
    const client: Client = await sdkClient(bad.origin, counting);
    const r = registry(readerKey);
    const guarded = r.guard(client, { cardUrl: bad.cardUrl, ...POSTURE, mode: 'strict' });
    const check = (e: unknown): boolean => {
      assert.ok(e instanceof CardLifecycleMismatchError, String(e));
      assert.equal(e.name, 'CardLifecycleMismatchError');
      assert.equal(e.cardUrl, bad.cardUrl);
      assert.equal(e.decision?.authoritative, false);
      assert.ok(e.conditions.length > 0);
      assert.ok(e.conditions.every((c) => c.status !== 'pass'));
      assert.ok(e.conditions.some((c) => c.id === 'lifecycle-probe' && c.status === 'fail'), JSON.stringify(e.conditions));
      return true;
    };
    await assert.rejects(collect(guarded.sendMessageStream(message('hello'))), check);
    await assert.rejects(guarded.sendMessage(message('hello')), check);
    assert.equal(agentCalls, 0, 'the agent received nothing');
    // The counter does count: the same client unguarded reaches the agent.
    await client.sendMessage(message('hello'));
    assert.ok(agentCalls > 0);
  });

  it('the authoritative path passes everything through (the JS SDK agent)', async () => {
    const r = registry(readerKey);
    const d = await r.decision(js.cardUrl, POSTURE);
    assert.equal(d.authoritative, true);
    assert.equal(d.gateState, 'lifecycle-trusted');
    assert.equal(d.calleeId, ids.get(js));
    assert.ok(d.conditions.every((c) => c.status === 'pass'));
    assert.equal(typeof d.evidence.ledgerSeq, 'number');

    const plain = await sdkClient(js.origin);
    const expected = summarize(await collect(plain.sendMessageStream(message('hello'))));
    assert.deepEqual(expected, ['task:submitted', 'status-update:working', 'artifact-update', 'status-update:completed']);

    // A client that records what the SDK yields, to check the guard hands over the same objects.
    const recorded: unknown[] = [];
    const recorder = {
      sendMessage: (...args: Parameters<Client['sendMessage']>) => plain.sendMessage(...args),
      async *sendMessageStream(...args: Parameters<Client['sendMessageStream']>) {
        for await (const e of plain.sendMessageStream(...args)) {
          recorded.push(e);
          yield e;
        }
      },
    };
    for (const mode of ['safe', 'strict', 'observe'] as const) {
      recorded.length = 0;
      const guarded = r.guard(recorder, { cardUrl: js.cardUrl, ...POSTURE, mode });
      const events = await collect(guarded.sendMessageStream(message('hello')));
      assert.deepEqual(summarize(events), expected, mode);
      assert.equal(events.length, recorded.length);
      events.forEach((e, i) => assert.equal(e, recorded[i], `${mode}: event ${i} is the SDK's own object`));
    }
    const guardedClient = r.guard(plain, { cardUrl: js.cardUrl, ...POSTURE });
    const task = await guardedClient.sendMessage(message('hello'));
    assert.ok('id' in task && task.status?.state === TaskState.TASK_STATE_COMPLETED, JSON.stringify(task));
    assert.equal(guardedClient.protocolVersion, plain.protocolVersion);
    const card = await guardedClient.getAgentCard();
    assert.equal(card.name, (await plain.getAgentCard()).name);
    assert.deepEqual({ sent: r.stats().reportsSent, queued: r.stats().reportsQueued }, { sent: 0, queued: 0 });
  });
});
