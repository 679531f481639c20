/**
 * The per-task lifecycle rules of an A2A caller, as pure functions over the events a client
 * yields: no I/O, no clock.
 *
 * Events are read in every shape the JS SDK and the wire use: the SDK 1.3 objects
 * (`{payload: {$case, value}}`, numeric `TaskState`), v1.0 proto-JSON wrappers
 * (`{statusUpdate: …}`, `TASK_STATE_COMPLETED`), v0.3 objects with `kind` (`completed`), and a
 * bare Task or Message (what a unary `sendMessage` returns).
 */

import type { Trigger } from './types.js';

/** What kind of A2A object an event is. */
export type EventKind = 'task' | 'status-update' | 'artifact-update' | 'message' | 'other';

/** What the lifecycle rules need to know about one event. */
export interface EventFacts {
  readonly kind: EventKind;
  /** `taskId` of a status or artifact update, `id` of a Task; undefined for a Message. */
  readonly taskId: string | undefined;
  /** The task state, lower-case without prefix (`completed`, `working`, …), if the event has one. */
  readonly state: string | undefined;
  /** Whether `state` is terminal: completed, failed, canceled or rejected. */
  readonly terminal: boolean;
  /** `status.timestamp` as sent, if any. */
  readonly timestamp: unknown;
}

/** SDK 1.3 `TaskState` numbers (ts-proto), by name. */
const NUMERIC_STATES: readonly string[] = [
  'unspecified',
  'submitted',
  'working',
  'completed',
  'failed',
  'canceled',
  'input-required',
  'rejected',
  'auth-required',
];

const TERMINAL = new Set(['completed', 'failed', 'canceled', 'cancelled', 'rejected']);

/**
 * A task state in any spelling (`3`, `TASK_STATE_COMPLETED`, `completed`,
 * `TASK_STATE_INPUT_REQUIRED`, `input-required`) as lower-case kebab (`completed`,
 * `input-required`); undefined if it is not a state.
 */
export function normalizeState(state: unknown): string | undefined {
  if (typeof state === 'number') return NUMERIC_STATES[state];
  if (typeof state !== 'string' || state.length === 0) return undefined;
  let s = state.toLowerCase();
  if (s.startsWith('task_state_')) s = s.slice('task_state_'.length);
  return s.replace(/_/g, '-');
}

/** Whether a task state (any spelling) is terminal. */
export function isTerminalState(state: unknown): boolean {
  const s = normalizeState(state);
  return s !== undefined && TERMINAL.has(s);
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$/;

/**
 * Whether `status.timestamp` names an instant (RFC 3339 with a zone), as the registry reads
 * it: a missing, empty, zone-less or unparseable timestamp does not.
 */
export function namesInstant(timestamp: unknown): boolean {
  return typeof timestamp === 'string' && RFC3339.test(timestamp) && !Number.isNaN(Date.parse(timestamp));
}

type Obj = Record<string, unknown>;

function obj(v: unknown): Obj | undefined {
  return typeof v === 'object' && v !== null ? (v as Obj) : undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

const OTHER: EventFacts = Object.freeze({
  kind: 'other',
  taskId: undefined,
  state: undefined,
  terminal: false,
  timestamp: undefined,
});

function facts(kind: EventKind, inner: Obj): EventFacts {
  switch (kind) {
    case 'task':
    case 'status-update': {
      const status = obj(inner['status']);
      const state = normalizeState(status?.['state']);
      return {
        kind,
        taskId: str(kind === 'task' ? inner['id'] : inner['taskId']),
        state,
        terminal: state !== undefined && TERMINAL.has(state),
        timestamp: status?.['timestamp'],
      };
    }
    case 'artifact-update':
      return { kind, taskId: str(inner['taskId']), state: undefined, terminal: false, timestamp: undefined };
    case 'message':
      return { kind, taskId: undefined, state: undefined, terminal: false, timestamp: undefined };
    default:
      return OTHER;
  }
}

const WRAPPERS: ReadonlyArray<readonly [string, EventKind]> = [
  ['statusUpdate', 'status-update'],
  ['artifactUpdate', 'artifact-update'],
  ['task', 'task'],
  ['message', 'message'],
];

/** Reads one event (any supported shape). */
export function describeEvent(event: unknown): EventFacts {
  const o = obj(event);
  if (o === undefined) return OTHER;
  // SDK 1.3: StreamResponse {payload: {$case, value}}.
  const payload = obj(o['payload']);
  if (payload !== undefined && typeof payload['$case'] === 'string') {
    const inner = obj(payload['value']);
    if (inner === undefined) return OTHER;
    const c = payload['$case'];
    for (const [key, kind] of WRAPPERS) if (c === key) return facts(kind, inner);
    return OTHER;
  }
  // v0.3: {kind: ...}.
  const kind = o['kind'];
  if (typeof kind === 'string') {
    if (kind === 'task' || kind === 'status-update' || kind === 'artifact-update' || kind === 'message') {
      return facts(kind, o);
    }
    return OTHER;
  }
  // v1.0 proto-JSON wrapper: exactly one of task / statusUpdate / artifactUpdate / message.
  for (const [key, k] of WRAPPERS) {
    const inner = obj(o[key]);
    if (inner !== undefined && Object.keys(o).length === 1) return facts(k, inner);
  }
  // A bare object, by its fields (what a unary sendMessage returns).
  if ('messageId' in o && 'role' in o) return facts('message', o);
  if ('status' in o && 'id' in o) return facts('task', o);
  if ('status' in o && 'taskId' in o) return facts('status-update', o);
  if ('artifact' in o && 'taskId' in o) return facts('artifact-update', o);
  return OTHER;
}

/** A violation seen on a stream, with the events that show it (as the client gave them). */
export interface Finding {
  readonly trigger: Trigger;
  readonly taskId: string;
  /** `duplicate-terminal`: [the first terminal event, the offending event]; `terminal-without-timestamp`: [that event]. */
  readonly observed: readonly unknown[];
}

/** What to do with one event. */
export interface Verdict {
  /** Whether caller semantics deliver it: false for anything after a task's terminal event. */
  readonly deliver: boolean;
  /** Violations this event shows (none for nearly every event). */
  readonly findings: readonly Finding[];
}

const NONE: readonly Finding[] = Object.freeze([]);
const PASS: Verdict = Object.freeze({ deliver: true, findings: NONE });
const SWALLOW: Verdict = Object.freeze({ deliver: false, findings: NONE });

/**
 * Follows the tasks of one call (a stream, or a unary answer) and says, event by event,
 * what caller semantics deliver: each task's terminal state once, and nothing after it for
 * that task. It never drops an event because its timestamp repeats, and infers nothing from
 * history length. A Message has no lifecycle.
 */
export class TaskLifecycle {
  readonly #checkTimestamps: boolean;
  /** taskId → its first terminal event. */
  readonly #ended = new Map<string, unknown>();
  /** Tasks whose duplicate-terminal finding was given already. */
  readonly #flagged = new Set<string>();

  /**
   * @param checkTimestamps - report a terminal status that lacks `status.timestamp` (a
   *   caller that deduplicates by timestamp, `dedup: 'timestamp'`).
   */
  constructor(checkTimestamps: boolean) {
    this.#checkTimestamps = checkTimestamps;
  }

  /** Whether the task has ended (its terminal event was seen). */
  hasEnded(taskId: string): boolean {
    return this.#ended.has(taskId);
  }

  /** Reads the next event of the call. */
  observe(event: unknown): Verdict {
    const f = describeEvent(event);
    const taskId = f.taskId;
    if (taskId === undefined) return PASS;
    if (this.#ended.size > 0 && this.#ended.has(taskId)) {
      if (this.#flagged.has(taskId)) return SWALLOW;
      this.#flagged.add(taskId);
      return {
        deliver: false,
        findings: [{ trigger: 'duplicate-terminal', taskId, observed: [this.#ended.get(taskId), event] }],
      };
    }
    if (!f.terminal) return PASS;
    this.#ended.set(taskId, event);
    if (this.#checkTimestamps && !namesInstant(f.timestamp)) {
      return { deliver: true, findings: [{ trigger: 'terminal-without-timestamp', taskId, observed: [event] }] };
    }
    return PASS;
  }
}
