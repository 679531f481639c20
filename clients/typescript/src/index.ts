/**
 * `@cardgate/caller`: ask a cardgate registry whether an A2A agent's task lifecycle may be
 * relied on, and guard an `@a2a-js/sdk` client accordingly.
 *
 * @packageDocumentation
 */

export { Registry, parseDecision, type RegistryOptions, type RegistryStats } from './registry.js';
export type { GuardMode, GuardOptions, GuardableClient } from './guard.js';
export {
  CardgateError,
  CardLifecycleMismatchError,
  RegistryRequestError,
  RegistryUnavailableError,
} from './errors.js';
export type {
  Capability,
  Condition,
  Decision,
  DecisionOptions,
  Dedup,
  Evidence,
  Logger,
  Percentiles,
  TrackRecord,
  Trigger,
} from './types.js';
export type { ReportQueueOptions, ReportStats } from './reports.js';
export {
  TaskLifecycle,
  describeEvent,
  isTerminalState,
  namesInstant,
  normalizeState,
  type EventFacts,
  type EventKind,
  type Finding,
  type Verdict,
} from './lifecycle.js';
