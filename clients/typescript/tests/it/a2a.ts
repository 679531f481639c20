/** Small helpers around the official JS SDK client for the integration tests. */

import { Role, type SendMessageRequest } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, type Client } from '@a2a-js/sdk/client';

import { describeEvent } from '../../src/lifecycle.js';

/** An SDK client for the agent at `origin` (its card at the well-known path). */
export async function sdkClient(origin: string, fetchImpl?: typeof fetch): Promise<Client> {
  const factory =
    fetchImpl === undefined
      ? new ClientFactory()
      : new ClientFactory(
          ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
            // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- the SDK types its options as a class
            transports: [new JsonRpcTransportFactory({ fetchImpl })],
          }),
        );
  return factory.createFromUrl(origin);
}

/** A v1.0 SendMessageRequest with one text part. */
export function message(text: string): SendMessageRequest {
  return {
    tenant: '',
    message: {
      messageId: crypto.randomUUID(),
      contextId: '',
      taskId: '',
      role: Role.ROLE_USER,
      parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
  };
}

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const e of it) out.push(e);
  return out;
}

/** Each event as `kind` or `kind:state`, e.g. `status-update:completed`. */
export function summarize(events: readonly unknown[]): string[] {
  return events.map((e) => {
    const f = describeEvent(e);
    return f.state === undefined ? f.kind : `${f.kind}:${f.state}`;
  });
}

/** How many events end a task (terminal states). */
export function terminals(events: readonly unknown[]): number {
  return events.filter((e) => describeEvent(e).terminal).length;
}
