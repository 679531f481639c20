/**
 * Events as the wire carries them, for the evidence of a witness report: the SDK 1.3
 * objects through the SDK's own proto-JSON codecs (`{"statusUpdate": {…}}`,
 * `"TASK_STATE_COMPLETED"`), anything else (v0.3 objects, already-JSON values) as its JSON.
 */

import { StreamResponse, Task } from '@a2a-js/sdk';

type Obj = Record<string, unknown>;

function clone(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value ?? null)) as unknown;
}

/** The wire JSON of one event as a client yielded it. */
export function toWire(event: unknown): unknown {
  if (typeof event !== 'object' || event === null) return clone(event);
  const o = event as Obj;
  try {
    const payload = o['payload'];
    if (typeof payload === 'object' && payload !== null && '$case' in payload) {
      return StreamResponse.toJSON(event);
    }
    if (!('kind' in o) && 'id' in o && 'status' in o) {
      const status = o['status'] as Obj | undefined;
      // A ts-proto Task (numeric state) as a unary sendMessage returns it.
      if (typeof status?.['state'] === 'number') return { task: Task.toJSON(event as Task) };
      return { task: clone(event) };
    }
  } catch {
    // Not what it looked like: fall back to its plain JSON.
  }
  return clone(event);
}
