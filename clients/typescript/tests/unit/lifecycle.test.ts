import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  TaskLifecycle,
  describeEvent,
  isTerminalState,
  namesInstant,
  normalizeState,
} from '../../src/lifecycle.js';

const TS = '2026-12-03T08:31:36.039Z';

// SDK 1.3 shapes (ts-proto, numeric TaskState: 1 submitted, 2 working, 3 completed, 4 failed).
const sdkTask = (id: string, state: number, timestamp: string | null = TS) => ({
  payload: { $case: 'task', value: { id, contextId: 'c', status: { state, message: undefined, timestamp: timestamp ?? undefined }, artifacts: [], history: [], metadata: undefined } },
});
const sdkStatus = (taskId: string, state: number, timestamp: string | null = TS) => ({
  payload: { $case: 'statusUpdate', value: { taskId, contextId: 'c', status: { state, message: undefined, timestamp: timestamp ?? undefined }, metadata: undefined } },
});
const sdkArtifact = (taskId: string) => ({
  payload: { $case: 'artifactUpdate', value: { taskId, contextId: 'c', artifact: { artifactId: 'a', parts: [] }, append: false, lastChunk: true, metadata: undefined } },
});
const sdkMessage = (taskId = '') => ({
  payload: { $case: 'message', value: { messageId: 'm', contextId: 'c', taskId, role: 2, parts: [] } },
});

function run(events: unknown[], checkTimestamps = true) {
  const l = new TaskLifecycle(checkTimestamps);
  const delivered: unknown[] = [];
  const findings: { trigger: string; taskId: string; observed: readonly unknown[] }[] = [];
  for (const e of events) {
    const v = l.observe(e);
    if (v.deliver) delivered.push(e);
    findings.push(...v.findings);
  }
  return { delivered, findings };
}

describe('normalizeState / isTerminalState', () => {
  it('reads every spelling', () => {
    assert.equal(normalizeState(3), 'completed');
    assert.equal(normalizeState(6), 'input-required');
    assert.equal(normalizeState('TASK_STATE_INPUT_REQUIRED'), 'input-required');
    assert.equal(normalizeState('completed'), 'completed');
    assert.equal(normalizeState(''), undefined);
    assert.equal(normalizeState(null), undefined);
    for (const s of [3, 4, 5, 7, 'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED', 'completed', 'failed', 'canceled', 'rejected']) {
      assert.ok(isTerminalState(s), String(s));
    }
    for (const s of [0, 1, 2, 6, 8, 'TASK_STATE_WORKING', 'input-required', 'auth-required', 'submitted', 'unknown', undefined]) {
      assert.ok(!isTerminalState(s), String(s));
    }
  });
});

describe('namesInstant', () => {
  it('wants RFC 3339 with a zone', () => {
    assert.ok(namesInstant(TS));
    assert.ok(namesInstant('2026-12-03T08:31:36+00:00'));
    assert.ok(!namesInstant(undefined));
    assert.ok(!namesInstant(''));
    assert.ok(!namesInstant('2026-12-03T08:31:36'));
    assert.ok(!namesInstant('yesterday'));
    assert.ok(!namesInstant('2026-13-45T99:99:99Z'));
  });
});

describe('describeEvent', () => {
  it('reads the SDK 1.3, v1.0 wire, v0.3 and bare shapes alike', () => {
    const shapes: [unknown, string, string | undefined, boolean][] = [
      [sdkTask('t', 1), 'task', 't', false],
      [sdkStatus('t', 3), 'status-update', 't', true],
      [sdkArtifact('t'), 'artifact-update', 't', false],
      [sdkMessage('t'), 'message', undefined, false],
      [{ statusUpdate: { taskId: 't', status: { state: 'TASK_STATE_FAILED' } } }, 'status-update', 't', true],
      [{ task: { id: 't', status: { state: 'TASK_STATE_WORKING' } } }, 'task', 't', false],
      [{ artifactUpdate: { taskId: 't', artifact: {} } }, 'artifact-update', 't', false],
      [{ kind: 'status-update', taskId: 't', status: { state: 'canceled' }, final: true }, 'status-update', 't', true],
      [{ kind: 'task', id: 't', status: { state: 'rejected' } }, 'task', 't', true],
      [{ kind: 'artifact-update', taskId: 't', artifact: {} }, 'artifact-update', 't', false],
      [{ id: 't', contextId: 'c', status: { state: 3, timestamp: TS }, artifacts: [] }, 'task', 't', true],
      [{ messageId: 'm', role: 2, parts: [] }, 'message', undefined, false],
      [{ hello: 1 }, 'other', undefined, false],
      [null, 'other', undefined, false],
    ];
    for (const [event, kind, taskId, terminal] of shapes) {
      const f = describeEvent(event);
      assert.deepEqual([f.kind, f.taskId, f.terminal], [kind, taskId, terminal], JSON.stringify(event));
    }
  });
});

describe('TaskLifecycle', () => {
  it('passes a conformant stream whole, the same objects', () => {
    const events = [sdkTask('t', 1), sdkStatus('t', 2), sdkArtifact('t'), sdkStatus('t', 3)];
    const { delivered, findings } = run(events);
    assert.equal(delivered.length, 4);
    delivered.forEach((e, i) => assert.equal(e, events[i]));
    assert.deepEqual(findings, []);
  });

  it('delivers the terminal state once and withholds the duplicate, with the evidence', () => {
    const first = sdkStatus('t', 3);
    const second = sdkStatus('t', 3);
    const { delivered, findings } = run([sdkTask('t', 1), first, second]);
    assert.equal(delivered.length, 2);
    assert.equal(delivered[1], first);
    assert.equal(findings.length, 1);
    assert.equal(findings[0]?.trigger, 'duplicate-terminal');
    assert.equal(findings[0]?.taskId, 't');
    assert.equal(findings[0]?.observed[0], first);
    assert.equal(findings[0]?.observed[1], second);
  });

  it('withholds any event after the end (artifact, status, task), reporting once per task', () => {
    const events = [sdkStatus('t', 4), sdkArtifact('t'), sdkStatus('t', 2), sdkTask('t', 3)];
    const { delivered, findings } = run(events);
    assert.deepEqual(delivered, [events[0]]);
    assert.equal(findings.length, 1);
    assert.equal(findings[0]?.observed[1], events[1]);
  });

  it('keeps tasks apart', () => {
    const events = [sdkStatus('a', 3), sdkStatus('b', 2), sdkStatus('b', 3), sdkStatus('a', 3), sdkArtifact('b')];
    const { delivered, findings } = run(events);
    assert.deepEqual(delivered, events.slice(0, 3));
    assert.deepEqual(findings.map((f) => f.taskId), ['a', 'b']);
  });

  it('never drops an event because its timestamp repeats, and ignores history length', () => {
    const events = [sdkTask('t', 1, TS), sdkStatus('t', 2, TS), sdkStatus('t', 2, TS), sdkStatus('t', 3, TS)];
    assert.equal(run(events).delivered.length, 4);
  });

  it('delivers a terminal state without timestamp but reports it when deduplicating by timestamp', () => {
    const end = sdkStatus('t', 3, null);
    let r = run([sdkStatus('t', 2), end]);
    assert.equal(r.delivered.length, 2);
    assert.deepEqual(r.findings, [{ trigger: 'terminal-without-timestamp', taskId: 't', observed: [end] }]);
    r = run([sdkStatus('t', 2), end], false);
    assert.equal(r.delivered.length, 2);
    assert.deepEqual(r.findings, []);
  });

  it('lets messages through: they have no lifecycle', () => {
    const events = [sdkStatus('t', 3), sdkMessage('t'), sdkMessage()];
    assert.equal(run(events).delivered.length, 3);
  });

  it('reads v0.3 streams too', () => {
    const events = [
      { kind: 'task', id: 't', status: { state: 'submitted', timestamp: TS } },
      { kind: 'status-update', taskId: 't', status: { state: 'completed', timestamp: TS }, final: true },
      { kind: 'status-update', taskId: 't', status: { state: 'completed', timestamp: TS }, final: true },
    ];
    const { delivered, findings } = run(events);
    assert.equal(delivered.length, 2);
    assert.equal(findings[0]?.trigger, 'duplicate-terminal');
  });
});
