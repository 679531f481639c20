// The README's example, type-checked with the package (`npm run lint`); run it with
// `node build/examples/guard.js <agent URL>` after `npm run build:test`.
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role } from '@a2a-js/sdk';
import { Registry } from '../src/index.js';   // in your project: from '@cardgate/caller'

const agentUrl = process.argv[2] ?? 'https://agent.example';
const registry = new Registry();   // CARDGATE_URL, CARDGATE_API_KEY (role reporter)
const agent = registry.guard(await new ClientFactory().createFromUrl(agentUrl), { cardUrl: agentUrl });
const text = { content: { $case: 'text' as const, value: 'Hello' }, metadata: undefined, filename: '', mediaType: 'text/plain' };
const message = { messageId: crypto.randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts: [text], metadata: undefined, extensions: [], referenceTaskIds: [] };
for await (const event of agent.sendMessageStream({ tenant: '', message, configuration: undefined, metadata: undefined })) console.log(event);
await registry.close();            // sends the witness reports still queued
