#!/usr/bin/env node
/**
 * A small, real A2A agent built on the official JS SDK (@a2a-js/sdk 1.3.0).
 *
 * It exists for the integration tests: it serves the agent card, the JSON-RPC
 * and HTTP+JSON bindings in protocol version 1.0 plus the SDK's opt-in v0.3
 * compatibility layer on the same URLs, and push notifications. Everything
 * protocol-related comes from the SDK (DefaultRequestHandler,
 * InMemoryTaskStore, InMemoryPushNotificationStore, the push sender, the
 * Express card / JSON-RPC / REST handlers); the agent only decides which
 * events to publish, and publishes them at once (no artificial delays).
 *
 * Behaviour, chosen by the first text part of the user's message:
 *
 *   any text     submitted -> working -> artifact "echo: <text>" -> completed
 *   need-input   submitted -> working -> input-required (agent asks for more);
 *                a follow-up on the same task (taskId + contextId) is handled
 *                like any other message: working -> artifact -> completed
 *   CancelTask on an input-required task -> canceled
 *
 * With --grpc-only the agent speaks A2A only over the gRPC binding
 * (`lf.a2a.v1.A2AService`, protocol version 1.0, the SDK's `grpcService` on
 * @grpc/grpc-js): the same executor, handler, task store and push sender. The
 * card (signed as always) then lists one interface, `GRPC` 1.0 at
 * `http://<host>:<port>`, the card's own origin: a small front on the one
 * public port sends each connection that starts with the HTTP/2 client
 * preface to the gRPC server and all others to the card's HTTP server, both
 * on internal loopback ports.
 *
 * With --security JSON the card declares security schemes and requirements,
 * given in the A2A v1.0 proto-JSON shape:
 *
 *   {"securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
 *    "securityRequirements": [{"schemes": {"bearer": {"list": []}}}]}
 *
 * They are read with the SDK's own `SecurityScheme.fromJSON` /
 * `SecurityRequirement.fromJSON` and are part of the card before it is signed,
 * so the signature covers them and the SDK's v0.3 card renders them in v0.3
 * form (`securitySchemes` with `type`, `security`). The agent enforces none of
 * them: whatever sits in front of it does.
 *
 * Usage:
 *
 *   node agent.mjs [--host 127.0.0.1] [--port 0] [--public-url URL] [--grpc-only] [--security JSON]
 *
 * The agent binds its own socket (port 0 picks a free port), prints exactly
 * one line `READY http://<host>:<port>` on stdout once it accepts connections
 * and runs until SIGTERM/SIGINT, on which it shuts down and exits with
 * status 0. Everything else (its own logs and the SDK's console output) goes
 * to stderr.
 */

import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { parseArgs } from 'node:util';

import * as grpc from '@grpc/grpc-js';

import express from 'express';

import {
  A2A_PROTOCOL_VERSION,
  AGENT_CARD_PATH,
  Role,
  SecurityRequirement,
  SecurityScheme,
  TaskState,
  generateAgentCardSignature,
} from '@a2a-js/sdk';
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
} from '@a2a-js/sdk/server';
import {
  UserBuilder,
  agentCardHandler,
  jsonRpcHandler,
  restHandler,
} from '@a2a-js/sdk/server/express';
import { A2AService, grpcService } from '@a2a-js/sdk/server/grpc';
import { duplicateInterfacesForLegacy } from '@a2a-js/sdk/compat/v0_3';
import { createLegacyAwarePushNotificationSender } from '@a2a-js/sdk/compat/v0_3/server';

// The SDK logs with console.log/console.info (e.g. every push delivery);
// stdout is reserved for the READY line, so send all console output to stderr.
for (const method of ['log', 'info', 'debug']) {
  console[method] = console.error.bind(console);
}

function log(message) {
  console.error(`${new Date().toISOString()} js-sdk-agent: ${message}`);
}

// Paths served by this agent.
const JSONRPC_PATH = '/a2a/jsonrpc';
const REST_PATH = '/a2a/rest';
const JWKS_PATH = '/.well-known/jwks.json';
const SIGNING_KID = 'js-agent-key-1';

// Texts the agent puts in its status messages (same as the Python agent).
const WORKING_TEXT = 'Working...';
const NEED_INPUT_TEXT = 'Please send the missing input.';

// --------------------------------------------------------------------------
// Agent logic
// --------------------------------------------------------------------------

function textPart(text) {
  return {
    content: { $case: 'text', value: text },
    metadata: undefined,
    filename: '',
    mediaType: 'text/plain',
  };
}

function firstText(message) {
  for (const part of message?.parts ?? []) {
    if (part.content?.$case === 'text') {
      return part.content.value;
    }
  }
  return '';
}

function agentMessage(taskId, contextId, text) {
  return {
    role: Role.ROLE_AGENT,
    messageId: crypto.randomUUID(),
    parts: [textPart(text)],
    taskId,
    contextId,
    extensions: [],
    metadata: undefined,
    referenceTaskIds: [],
  };
}

// The SDK does not stamp statuses published by an executor; like the SDK's
// own samples, every status carries the time it was published.
function taskStatus(state, message = undefined) {
  return { state, message, timestamp: new Date().toISOString() };
}

function statusUpdate(taskId, contextId, state, message = undefined) {
  return AgentEvent.statusUpdate({
    taskId,
    contextId,
    status: taskStatus(state, message),
    metadata: undefined,
  });
}

/** Echoes the user's text; `need-input` ends the turn in input-required. */
class EchoAgentExecutor {
  // Tasks left in input-required: taskId -> contextId (for cancelTask, which
  // only receives the taskId).
  #interrupted = new Map();

  async execute(requestContext, eventBus) {
    const { taskId, contextId, userMessage } = requestContext;
    const text = firstText(userMessage);
    log(`task ${taskId}: message ${userMessage.messageId} ${JSON.stringify(text)}`);
    this.#interrupted.delete(taskId);

    // The SDK requires every turn to start with a Task (or Message) event.
    // A follow-up carries the taskId of an existing task, which the SDK has
    // loaded (with the new message appended to its history); re-publish it.
    const task = requestContext.task ?? {
      id: taskId,
      contextId,
      status: taskStatus(TaskState.TASK_STATE_SUBMITTED),
      artifacts: [],
      history: [userMessage],
      metadata: userMessage.metadata,
    };
    eventBus.publish(AgentEvent.task(task));

    eventBus.publish(
      statusUpdate(
        taskId,
        contextId,
        TaskState.TASK_STATE_WORKING,
        agentMessage(taskId, contextId, WORKING_TEXT)
      )
    );

    if (text.trim() === 'need-input') {
      // Interrupted state: the SDK keeps the task's event bus alive for the
      // follow-up (or a cancel).
      this.#interrupted.set(taskId, contextId);
      eventBus.publish(
        statusUpdate(
          taskId,
          contextId,
          TaskState.TASK_STATE_INPUT_REQUIRED,
          agentMessage(taskId, contextId, NEED_INPUT_TEXT)
        )
      );
      return;
    }

    eventBus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: crypto.randomUUID(),
          name: 'response',
          description: '',
          parts: [textPart(`echo: ${text}`)],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      })
    );
    eventBus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED));
  }

  // Called by DefaultRequestHandler.cancelTask with the task's live event
  // bus; the handler then waits on that bus for the canceled state. Only
  // input-required tasks can get here (every other turn ends at once in a
  // terminal state, which the SDK refuses to cancel).
  async cancelTask(taskId, eventBus) {
    log(`task ${taskId}: cancel requested`);
    const contextId = this.#interrupted.get(taskId) ?? '';
    this.#interrupted.delete(taskId);
    eventBus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_CANCELED));
  }
}

// --------------------------------------------------------------------------
// --security: the card's security schemes and requirements
// --------------------------------------------------------------------------

/**
 * Paths of `input` that `normalized` lacks: members the SDK's fromJSON did not
 * read (a misspelt field, a v0.3 field name). Empty strings are proto3
 * defaults, which toJSON leaves out, so they are not reported.
 */
function unreadPaths(input, normalized, path) {
  if (input === null || typeof input !== 'object') return [];
  if (normalized === null || typeof normalized !== 'object') return [path];
  return Object.entries(input).flatMap(([key, value]) => {
    if (value === '') return [];
    const inner = `${path}.${key}`;
    return key in normalized ? unreadPaths(value, normalized[key], inner) : [inner];
  });
}

/**
 * Parses `--security`: `{"securitySchemes": {name: SecurityScheme},
 * "securityRequirements": [SecurityRequirement]}` in A2A v1.0 proto-JSON.
 * Returns both in the SDK's own (ts-proto) types, which the request handler
 * and the v0.3 card renderer read. Throws on anything the SDK would not read.
 */
function parseSecurity(text) {
  let json;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`--security is not JSON: ${error.message}`);
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new Error('--security must be a JSON object');
  }
  const extra = Object.keys(json).filter((key) => !['securitySchemes', 'securityRequirements'].includes(key));
  if (extra.length > 0) {
    throw new Error(`--security: unknown member(s) ${extra.join(', ')}`);
  }
  const schemesJson = json.securitySchemes ?? {};
  const requirementsJson = json.securityRequirements ?? [];
  if (typeof schemesJson !== 'object' || Array.isArray(schemesJson) || !Array.isArray(requirementsJson)) {
    throw new Error('--security: securitySchemes must be an object, securityRequirements an array');
  }

  const securitySchemes = {};
  for (const [name, schemeJson] of Object.entries(schemesJson)) {
    const scheme = SecurityScheme.fromJSON(schemeJson);
    const unread = unreadPaths(schemeJson, SecurityScheme.toJSON(scheme), `securitySchemes.${name}`);
    if (!scheme.scheme || unread.length > 0) {
      throw new Error(`--security: securitySchemes.${name} is not an A2A v1.0 SecurityScheme (unread: ${unread.join(', ') || 'all'})`);
    }
    // The SDK's v1.0 card route serves `JSON.stringify(card)`, which would
    // print this ts-proto object as it is held in memory (the oneof as
    // `{"scheme": {"$case": ..., "value": ...}}`); render it in proto-JSON,
    // as the SDK's own `SecurityScheme.toJSON` does.
    Object.defineProperty(scheme, 'toJSON', {
      value() {
        return SecurityScheme.toJSON(this);
      },
    });
    securitySchemes[name] = scheme;
  }

  const securityRequirements = requirementsJson.map((requirementJson, i) => {
    const requirement = SecurityRequirement.fromJSON(requirementJson);
    const unread = unreadPaths(requirementJson, requirement, `securityRequirements[${i}]`);
    if (unread.length > 0) {
      throw new Error(`--security: securityRequirements[${i}] is not an A2A v1.0 SecurityRequirement (unread: ${unread.join(', ')})`);
    }
    for (const name of Object.keys(requirement.schemes)) {
      if (!(name in securitySchemes)) {
        throw new Error(`--security: securityRequirements[${i}] names the undeclared scheme ${name}`);
      }
    }
    return requirement;
  });
  return { securitySchemes, securityRequirements };
}

// --------------------------------------------------------------------------
// Agent card and application
// --------------------------------------------------------------------------

function buildAgentCard(baseUrl, grpcOnly, security = undefined) {
  // Over HTTP: each binding at 1.0, then mirrored at 0.3 (appended after the
  // 1.0 entries) by the SDK's helper: with legacyCompat on, a binding is
  // reachable at 0.3 only if the card lists it at 0.3. gRPC is 1.0 only.
  const supportedInterfaces = grpcOnly
    ? [{ url: baseUrl, protocolBinding: 'GRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }]
    : duplicateInterfacesForLegacy(
        [
          {
            url: `${baseUrl}${JSONRPC_PATH}`,
            protocolBinding: 'JSONRPC',
            tenant: '',
            protocolVersion: A2A_PROTOCOL_VERSION,
          },
          {
            url: `${baseUrl}${REST_PATH}`,
            protocolBinding: 'HTTP+JSON',
            tenant: '',
            protocolVersion: A2A_PROTOCOL_VERSION,
          },
        ],
        ['JSONRPC', 'HTTP+JSON']
      );
  return {
    name: 'JS SDK Agent',
    description: 'Test agent built on the official JS SDK, @a2a-js/sdk 1.3.0: echo, need-input.',
    supportedInterfaces,
    provider: undefined,
    version: '1.0.0',
    capabilities: {
      streaming: true,
      pushNotifications: true,
      extensions: [],
      extendedAgentCard: false,
    },
    securitySchemes: security?.securitySchemes ?? {},
    securityRequirements: security?.securityRequirements ?? [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [
      {
        id: 'echo',
        name: 'Echo',
        description: 'Echoes the text; "need-input" asks for more input first.',
        tags: ['test'],
        examples: ['hi', 'need-input'],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
}

/**
 * Signs the card with the SDK's own signer (JWS over its JCS canonicalization), with a fresh
 * P-256 key per run whose public half is served at JWKS_PATH and named by `jku`, like the
 * Python agent's card.
 *
 * The signer is given the card as served at v1.0 (`JSON.stringify` of it, parsed): the SDK's
 * canonicalization reads its input with `AgentCard.fromJSON`, i.e. as proto-JSON, and would
 * drop the security schemes of the in-memory ts-proto card (their oneof is held as `$case`),
 * so they would not be signed. The signatures go onto the in-memory card.
 */
async function signCard(card, baseUrl) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const sign = generateAgentCardSignature(privateKey, {
    alg: 'ES256',
    kid: SIGNING_KID,
    typ: 'JOSE',
    jku: `${baseUrl}${JWKS_PATH}`,
  });
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: SIGNING_KID, alg: 'ES256', use: 'sig' };
  const { signatures } = await sign(JSON.parse(JSON.stringify(card)));
  return { card: { ...card, signatures }, jwks: { keys: [jwk] } };
}

/**
 * The card's HTTP app and the request handler behind it. With `grpcOnly` the
 * app serves only the card and its key set: A2A itself is the gRPC server's.
 */
async function buildApp(baseUrl, grpcOnly = false, security = undefined) {
  const { card, jwks } = await signCard(buildAgentCard(baseUrl, grpcOnly, security), baseUrl);

  // Push notifications: the SDK's in-memory config store and its
  // DefaultPushNotificationSender (default timeout and token header), built
  // by the compat helper so that webhooks registered over v0.3 get v0.3
  // bodies; v1.0 registrations get the built-in v1.0 serializer.
  const pushStore = new InMemoryPushNotificationStore();
  const pushSender = createLegacyAwarePushNotificationSender(pushStore);

  const requestHandler = new DefaultRequestHandler(
    card,
    new InMemoryTaskStore(),
    new EchoAgentExecutor(),
    undefined, // default event bus manager
    pushStore,
    pushSender
  );

  // gRPC is 1.0 only: the card then lists no 0.3 interface, which the compat
  // layer's card handler refuses to serve.
  const legacyCompat = { enabled: !grpcOnly };
  const userBuilder = UserBuilder.noAuthentication;
  const app = express();
  app.disable('x-powered-by');
  app.get(JWKS_PATH, (_req, res) => res.json(jwks));
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler, legacyCompat }));
  if (!grpcOnly) {
    app.use(JSONRPC_PATH, jsonRpcHandler({ requestHandler, userBuilder, legacyCompat }));
    app.use(REST_PATH, restHandler({ requestHandler, userBuilder, legacyCompat }));
  }
  return { app, requestHandler, userBuilder };
}

// --------------------------------------------------------------------------
// --grpc-only: the card over HTTP/1.1 and gRPC, on one port
// --------------------------------------------------------------------------

/** The HTTP/2 client preface's first bytes: no HTTP/1.1 request starts so. */
const H2_PREFACE_START = Buffer.from('PRI * HTTP/2.0');

/** Starts the SDK's gRPC service on an internal loopback port; resolves to [server, port]. */
function startGrpc(requestHandler, userBuilder) {
  const server = new grpc.Server();
  server.addService(A2AService, grpcService({ requestHandler, userBuilder }));
  return new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve([server, port])
    );
  });
}

/**
 * Accepts on `front` and splices each connection to the gRPC port if it opens
 * with the HTTP/2 preface, else to the card's HTTP port. The first chunk is
 * enough to tell: it holds at least a request line or the preface's start.
 */
function spliceByPreface(front, grpcPort, httpPort) {
  front.on('connection', (socket) => {
    socket.once('data', (first) => {
      socket.pause();
      const h2 = first.subarray(0, H2_PREFACE_START.length).equals(H2_PREFACE_START);
      const target = { port: h2 ? grpcPort : httpPort, host: '127.0.0.1', noDelay: true };
      const upstream = net.connect(target, () => {
        upstream.write(first);
        socket.pipe(upstream).pipe(socket);
        socket.resume();
      });
      upstream.on('error', () => socket.destroy());
      socket.on('error', () => upstream.destroy());
      socket.on('close', () => upstream.destroy());
      upstream.on('close', () => socket.destroy());
    });
  });
}

// --------------------------------------------------------------------------
// Main
// --------------------------------------------------------------------------

const USAGE = `usage: node agent.mjs [--host 127.0.0.1] [--port 0] [--public-url URL] [--grpc-only] [--security JSON]

  --host HOST        address to listen on (default 127.0.0.1)
  --port PORT        port to listen on; 0 picks a free one (default 0)
  --public-url URL   the origin the card names, when a front sits before the agent
  --grpc-only        serve A2A over gRPC only (card and gRPC share the port)
  --security JSON    security schemes and requirements the card declares, in A2A v1.0
                     proto-JSON: {"securitySchemes": {NAME: SecurityScheme, ...},
                     "securityRequirements": [{"schemes": {NAME: {"list": [SCOPE, ...]}}}, ...]}
                     (signed with the card; not enforced by the agent)`;

function parseCommandLine() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'public-url': { type: 'string' },
      'grpc-only': { type: 'boolean', default: false },
      security: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`invalid --port ${values.port}`);
  }
  return {
    host: values.host,
    port,
    publicUrl: values['public-url']?.replace(/\/+$/, ''),
    grpcOnly: values['grpc-only'],
    security: values.security === undefined ? undefined : parseSecurity(values.security),
  };
}

function main() {
  let options;
  try {
    options = parseCommandLine();
  } catch (error) {
    console.error(`${USAGE.split('\n')[0]}\n${error.message}`);
    process.exit(2);
  }

  // Bind first, so that the card can carry the real port when port is 0.
  // The app is attached in the 'listening' callback, before the event loop
  // can dispatch any request. With --grpc-only the public socket is a plain
  // TCP front (see spliceByPreface).
  // The front writes small HTTP/2 frames both ways: without Nagle's delay, as
  // the servers behind it write them.
  const server = options.grpcOnly ? net.createServer({ noDelay: true }) : http.createServer();
  server.on('error', (error) => {
    console.error(`cannot bind ${options.host}:${options.port}: ${error.message}`);
    process.exit(1);
  });
  let inner = [];
  server.listen(options.port, options.host, () => {
    const { port } = server.address();
    const baseUrl = `http://${options.host}:${port}`;
    // Behind a reverse proxy, the card names the proxy's origin (as a deployed agent's would).
    serve(server, options.publicUrl ?? baseUrl, options.grpcOnly, options.security).then(
      (servers) => {
        inner = servers;
        log(`serving ${options.grpcOnly ? 'gRPC and the card ' : ''}on ${baseUrl}`);
        process.stdout.write(`READY ${baseUrl}\n`);
      },
      (error) => {
        console.error(`cannot start: ${error.stack ?? error}`);
        process.exit(1);
      }
    );
  });

  let stopping = false;
  const shutdown = (signal) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down`);
    server.close(() => {
      log('stopped');
      process.exit(0);
    });
    // Open streams and keep-alive connections would hold close() open.
    server.closeAllConnections?.();
    for (const s of inner) {
      if (s instanceof grpc.Server) s.forceShutdown();
      else {
        s.close();
        s.closeAllConnections();
      }
    }
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

/**
 * Serves the agent behind `server`, which is listening. Over HTTP the app is
 * the server's; with `grpcOnly` the gRPC service and the card's app listen on
 * internal ports behind the front. Resolves to the internal servers.
 */
async function serve(server, cardBaseUrl, grpcOnly, security) {
  const { app, requestHandler, userBuilder } = await buildApp(cardBaseUrl, grpcOnly, security);
  if (!grpcOnly) {
    server.on('request', app);
    return [];
  }
  const [grpcServer, grpcPort] = await startGrpc(requestHandler, userBuilder);
  const cardServer = http.createServer(app);
  await new Promise((resolve) => cardServer.listen(0, '127.0.0.1', resolve));
  spliceByPreface(server, grpcPort, cardServer.address().port);
  log(`internal: grpc ${grpcPort}, http ${cardServer.address().port}`);
  return [grpcServer, cardServer];
}

main();
