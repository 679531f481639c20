import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { CardLifecycleMismatchError, RegistryUnavailableError } from '../../src/errors.js';
import { createGuard, type GuardHost } from '../../src/guard.js';
import type { ViolationReport } from '../../src/reports.js';
import type { Decision } from '../../src/types.js';
import { toWire } from '../../src/wire.js';

const TS = '2026-12-03T08:31:36.039Z';
const status = (taskId: string, state: number, timestamp: string | null = TS) => ({
  payload: { $case: 'statusUpdate' as const, value: { taskId, contextId: 'c', status: { state, message: undefined, timestamp: timestamp ?? undefined }, metadata: undefined } },
});
const artifact = (taskId: string) => ({
  payload: { $case: 'artifactUpdate' as const, value: { taskId, contextId: 'c', artifact: undefined, append: false, lastChunk: true, metadata: undefined } },
});

function decision(authoritative: boolean, ledgerSeq = 5): Decision {
  return {
    calleeId: 'callee-1',
    callerVersion: '1.0',
    dedup: 'timestamp',
    requires: [],
    authoritative,
    gateState: authoritative ? 'lifecycle-trusted' : 'demoted',
    conditions: [
      { id: 'card-trusted', status: 'pass', reason: '' },
      { id: 'not-demoted', status: authoritative ? 'pass' : 'fail', reason: 'demoted' },
    ],
    evidence: { cardSnapshotId: null, probeRunId: null, ledgerSeq, ledgerHash: null, rulebook: null, trackRecord: null },
  };
}

/** A host whose decision is whatever `answer` holds (or throws it). */
function host(answer: { value: Decision | Error }) {
  const reports: ViolationReport[] = [];
  const local = new Map<string, number | null>();
  let decisions = 0;
  const h: GuardHost = {
    decision() {
      decisions++;
      return answer.value instanceof Error ? Promise.reject(answer.value) : Promise.resolve(answer.value);
    },
    report: (r) => reports.push(r),
    demoteLocally: (cardUrl, v, seq) => local.set(`${cardUrl}\n${v}`, seq),
    isDemotedLocally: (cardUrl, v, d) => {
      const k = `${cardUrl}\n${v}`;
      if (!local.has(k)) return false;
      if (d.authoritative && local.get(k) !== d.evidence.ledgerSeq) {
        local.delete(k);
        return false;
      }
      return true;
    },
    logger: {},
  };
  return { h, reports, calls: () => decisions };
}

/** A client that yields `events` and records how it was called. */
function client(events: unknown[], unary?: unknown) {
  const calls: unknown[][] = [];
  return {
    calls,
    label: 'the client',
    sendMessage(...args: unknown[]): Promise<unknown> {
      calls.push(['sendMessage', ...args]);
      return Promise.resolve(unary);
    },
    async *sendMessageStream(...args: unknown[]): AsyncGenerator<unknown, void, undefined> {
      calls.push(['sendMessageStream', ...args]);
      await Promise.resolve();
      yield* events;
    },
    getTask(id: string) {
      return `task ${id} via ${this.label}`;
    },
  };
}

async function collect(it: AsyncIterable<unknown>): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const e of it) out.push(e);
  return out;
}

const CARD = 'http://agent/.well-known/agent-card.json';

describe('guard', () => {
  it('authoritative: a conformant stream passes through untouched (the same objects)', async () => {
    const events = [status('t', 2), artifact('t'), status('t', 3)];
    const { h, reports } = host({ value: decision(true) });
    const c = client(events);
    const g = createGuard(h, c, { cardUrl: CARD });
    const seen = await collect(g.sendMessageStream({ p: 1 }, { o: 2 }));
    assert.equal(seen.length, 3);
    seen.forEach((e, i) => assert.equal(e, events[i]));
    assert.deepEqual(c.calls, [['sendMessageStream', { p: 1 }, { o: 2 }]]);
    assert.equal(reports.length, 0);
  });

  it('authoritative: a violation is withheld, reported in wire shape, and makes the agent advisory locally', async () => {
    const first = status('t', 3);
    const dup = status('t', 3);
    const answer = { value: decision(true, 5) as Decision | Error };
    const { h, reports } = host(answer);
    const g = createGuard(h, client([status('t', 2), first, dup]), { cardUrl: CARD, mode: 'strict' });
    const seen = await collect(g.sendMessageStream({}));
    assert.equal(seen.length, 2);
    assert.equal(seen[1], first);
    assert.equal(reports.length, 1);
    const r = reports[0];
    assert.equal(r?.trigger, 'duplicate-terminal');
    assert.equal(r?.calleeId, 'callee-1');
    assert.equal(r?.taskId, 't');
    assert.deepEqual(r?.observed, [toWire(first), toWire(dup)]);
    assert.deepEqual(r?.observed[0], { statusUpdate: { taskId: 't', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED', timestamp: TS } } });
    // Strict now refuses: the same (authoritative) decision is advisory locally…
    await assert.rejects(collect(g.sendMessageStream({})), (e: unknown) => {
      assert.ok(e instanceof CardLifecycleMismatchError);
      assert.equal(e.conditions[0]?.id, 'local-violation');
      return true;
    });
    // …until the registry answers authoritative again with another ledger seq.
    answer.value = decision(true, 9);
    assert.equal((await collect(g.sendMessageStream({}))).length, 2);
  });

  it('advisory: each task ends once and nothing follows, timestamps notwithstanding', async () => {
    const events = [status('t', 2), status('t', 4), status('t', 4), artifact('t'), status('u', 3)];
    const { h, reports } = host({ value: decision(false) });
    const seen = await collect(createGuard(h, client(events), { cardUrl: CARD }).sendMessageStream({}));
    assert.deepEqual(seen, [events[0], events[1], events[4]]);
    assert.equal(reports.length, 1);
  });

  it('registry unreachable: safe mode uses caller semantics and does not throw', async () => {
    const events = [status('t', 3), status('t', 3)];
    const { h, reports } = host({ value: new RegistryUnavailableError('down') });
    const seen = await collect(createGuard(h, client(events), { cardUrl: CARD }).sendMessageStream({}));
    assert.deepEqual(seen, [events[0]]);
    assert.equal(reports[0]?.calleeId, undefined);
  });

  it('strict: advisory or unreachable is refused before anything is sent', async () => {
    for (const value of [decision(false), new RegistryUnavailableError('down')]) {
      const { h } = host({ value });
      const c = client([status('t', 3)]);
      const g = createGuard(h, c, { cardUrl: CARD, mode: 'strict' });
      await assert.rejects(collect(g.sendMessageStream({})), (e: unknown) => {
        assert.ok(e instanceof CardLifecycleMismatchError);
        assert.equal(e.name, 'CardLifecycleMismatchError');
        assert.equal(e.cardUrl, CARD);
        if (value instanceof Error) {
          assert.equal(e.decision, undefined);
          assert.equal(e.cause, value);
        } else {
          assert.deepEqual(e.conditions.map((x) => x.id), ['not-demoted']);
          assert.equal(e.decision, value);
        }
        return true;
      });
      await assert.rejects(g.sendMessage({}), CardLifecycleMismatchError);
      assert.deepEqual(c.calls, []);
    }
  });

  it('observe: everything passes, violations are reported, no decision is asked', async () => {
    const events = [status('t', 3), status('t', 3, null), artifact('t')];
    const { h, reports, calls } = host({ value: new RegistryUnavailableError('down') });
    const seen = await collect(createGuard(h, client(events), { cardUrl: CARD, mode: 'observe' }).sendMessageStream({}));
    assert.deepEqual(seen, events);
    assert.equal(reports.length, 1);
    assert.equal(calls(), 0);
  });

  it('sendMessage passes the answer through and reports a terminal Task without timestamp', async () => {
    const task = { id: 't', contextId: 'c', status: { state: 3, message: undefined, timestamp: undefined }, artifacts: [], history: [], metadata: undefined };
    const { h, reports } = host({ value: decision(true) });
    const c = client([], task);
    const g = createGuard(h, c, { cardUrl: CARD, dedup: 'timestamp' });
    assert.equal(await g.sendMessage({ m: 1 }), task);
    assert.equal(reports[0]?.trigger, 'terminal-without-timestamp');
    assert.deepEqual(reports[0]?.observed, [{ task: { id: 't', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED' } } }]);
    const quiet = host({ value: decision(true) });
    await createGuard(quiet.h, client([], task), { cardUrl: CARD, dedup: 'none' }).sendMessage({});
    assert.equal(quiet.reports.length, 0);
  });

  it('delegates every other member to the client, bound to it', () => {
    const { h } = host({ value: decision(true) });
    const c = client([]);
    const g = createGuard(h, c, { cardUrl: CARD });
    assert.equal(g.getTask('x'), 'task x via the client');
    assert.equal(g.label, 'the client');
    // eslint-disable-next-line @typescript-eslint/unbound-method -- the same bound function each time
    assert.equal(g.getTask, g.getTask);
  });

  it('guards resubscribeTask like sendMessageStream', async () => {
    const end = status('t', 5);
    const c = {
      ...client([]),
      async *resubscribeTask(id: string): AsyncGenerator<unknown, void, undefined> {
        await Promise.resolve();
        yield end;
        yield status(id, 5);
      },
    };
    const { h, reports } = host({ value: decision(false) });
    const seen = await collect(createGuard(h, c, { cardUrl: CARD }).resubscribeTask('t'));
    assert.deepEqual(seen, [end]);
    assert.equal(reports.length, 1);
  });

  it('closes the client stream when the app stops reading', async () => {
    let closed = false;
    const c = {
      sendMessage: () => Promise.resolve(undefined),
      async *sendMessageStream(): AsyncGenerator<unknown, void, undefined> {
        await Promise.resolve();
        try {
          yield status('t', 2);
          yield status('t', 3);
        } finally {
          closed = true;
        }
      },
    };
    const { h } = host({ value: decision(true) });
    for await (const e of createGuard(h, c, { cardUrl: CARD }).sendMessageStream()) {
      assert.ok(e);
      break;
    }
    assert.ok(closed);
  });
});
