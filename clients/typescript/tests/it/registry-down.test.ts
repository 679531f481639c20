/**
 * The registry goes away: the guarded call still ends once, without an error, and the
 * report it queued reaches the registry once it is back.
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CardLifecycleMismatchError, Registry } from '../../src/index.js';
import { collect, message, sdkClient, summarize, terminals } from './a2a.js';
import { Cardgate, missingPrerequisite, poll, startFakeAgent, type Agent } from './harness.js';

const missing = missingPrerequisite();

describe('registry down', { skip: missing !== undefined && process.env['CARDGATE_IT_OPTIONAL'] === '1' ? missing : false }, () => {
  let cg: Cardgate;
  let agent: Agent;
  let calleeId: string;
  let key: string;
  let registry: Registry | undefined;

  before(async () => {
    if (missing !== undefined) throw new Error(`integration prerequisites: ${missing}`);
    [cg, agent] = await Promise.all([Cardgate.start(), startFakeAgent('two-terminal-events', 'FAULT')]);
    calleeId = await cg.register(agent.cardUrl);
    key = await cg.key('reporter');
    await cg.waitTrusted(agent.cardUrl);
  }, { timeout: 120_000 });

  after(async () => {
    await registry?.close();
    await agent?.stop();
    await cg?.stop();
  });

  it('a guarded call still ends once; the queued report is delivered when cardgate is back', async () => {
    const r = (registry = new Registry(cg.url, { apiKey: key }));
    const plain = await sdkClient(agent.origin);
    await cg.stop();

    const safe = r.guard(plain, { cardUrl: agent.cardUrl, callerVersion: '1.0', dedup: 'timestamp', requires: ['streaming'] });
    const events = await collect(safe.sendMessageStream(message('FAULT while the registry is down')));
    assert.equal(terminals(events), 1, summarize(events).join(' '));
    assert.equal(summarize(events).at(-1), 'status-update:completed');
    assert.equal(r.stats().reportsQueued, 1);

    const strict = r.guard(plain, { cardUrl: agent.cardUrl, mode: 'strict' });
    await assert.rejects(collect(strict.sendMessageStream(message('hello'))), (e: unknown) => {
      assert.ok(e instanceof CardLifecycleMismatchError);
      assert.equal(e.decision, undefined);
      return true;
    });

    await cg.restart(); // same port, same data dir
    const report = await poll('the queued report to arrive', 30_000, async () =>
      (await cg.reports(calleeId)).find((x) => x['trigger'] === 'duplicate-terminal'),
    );
    assert.equal(report['outcome'], 'demoted');
    // The registry lists the report as soon as it has stored it, a moment before its answer
    // reaches the client.
    await poll('the client to count the report', 5000, () => Promise.resolve(r.stats().reportsSent === 1 || undefined), 5);
    assert.equal(r.stats().reportsQueued, 0);
    await r.close();
    assert.equal(r.stats().reportsDropped, 0);
  });
});
