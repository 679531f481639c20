#!/usr/bin/env node
/**
 * An OpenID Connect / OAuth 2.0 authorization server for the integration
 * tests, built on `oidc-provider` (an OpenID-certified implementation; the
 * exact version is pinned in package.json).
 *
 * It registers up to two confidential clients and enables only what the tests
 * need, all with the library's own behaviour:
 *
 *   - discovery:          <issuer>/.well-known/openid-configuration
 *   - client_credentials: for the client (--client-id/--client-secret), which
 *                         may ask for --scope; client_secret_basic and
 *                         client_secret_post are both accepted. The access
 *                         tokens are opaque and live --token-ttl seconds.
 *   - introspection:      RFC 7662, for the introspector client
 *                         (--introspector-id/--introspector-secret), which
 *                         can introspect any token; the client can
 *                         introspect its own tokens. Any other caller, an
 *                         unknown or expired token all get {"active": false}.
 *
 * Everything is in memory and over plain http (it is a test server; the
 * library does not require https for the issuer).
 *
 * Usage:
 *
 *   node oidc.mjs [--host 127.0.0.1] [--port 0] --client-id ID --client-secret SECRET
 *                 [--scope a2a.invoke] [--token-ttl 300]
 *                 [--introspector-id ID --introspector-secret SECRET]
 *
 * It binds its own socket (port 0 picks a free port), prints exactly one line
 * `READY http://<host>:<port>` (the issuer, no trailing slash) on stdout once
 * it accepts connections and runs until SIGTERM/SIGINT, on which it exits
 * with status 0. Logs (its own and the library's notices) go to stderr. A
 * port already in use exits with status 1, a bad command line with status 2.
 */

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import http from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

// oidc-provider prints its notices with console.info; stdout is reserved for
// the READY line.
for (const method of ['log', 'info', 'debug']) {
  console[method] = console.error.bind(console);
}

function log(message) {
  console.error(`${new Date().toISOString()} oidc: ${message}`);
}

const USAGE =
  'usage: node oidc.mjs [--host 127.0.0.1] [--port 0] --client-id ID --client-secret SECRET ' +
  '[--scope a2a.invoke] [--token-ttl 300] [--introspector-id ID --introspector-secret SECRET]';

function parseCommandLine() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'client-id': { type: 'string' },
      'client-secret': { type: 'string' },
      scope: { type: 'string', default: 'a2a.invoke' },
      'token-ttl': { type: 'string', default: '300' },
      'introspector-id': { type: 'string' },
      'introspector-secret': { type: 'string' },
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
  const tokenTtl = Number(values['token-ttl']);
  if (!Number.isInteger(tokenTtl) || tokenTtl < 1) {
    throw new Error(`invalid --token-ttl ${values['token-ttl']} (whole seconds, at least 1)`);
  }
  if (!values['client-id'] || !values['client-secret']) {
    throw new Error('--client-id and --client-secret are required');
  }
  if (!values['introspector-id'] !== !values['introspector-secret']) {
    throw new Error('--introspector-id and --introspector-secret go together');
  }
  if (values['introspector-id'] === values['client-id']) {
    throw new Error('--introspector-id must differ from --client-id');
  }
  const scopes = values.scope.split(' ').filter(Boolean);
  if (scopes.length === 0) {
    throw new Error('--scope must name at least one scope');
  }
  return {
    host: values.host,
    port,
    clientId: values['client-id'],
    clientSecret: values['client-secret'],
    scopes,
    tokenTtl,
    introspectorId: values['introspector-id'],
    introspectorSecret: values['introspector-secret'],
  };
}

/** The provider for `issuer`, configured from the command line options. */
function buildProvider(issuer, options) {
  const clients = [
    {
      client_id: options.clientId,
      client_secret: options.clientSecret,
      // The registered method; the library accepts client_secret_post for a
      // client_secret_basic client as well (and the other way round).
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope: options.scopes.join(' '),
    },
  ];
  if (options.introspectorId) {
    clients.push({
      client_id: options.introspectorId,
      client_secret: options.introspectorSecret,
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: [],
      response_types: [],
      redirect_uris: [],
    });
  }

  // Our own signing key (for ID tokens / JWT responses, which the tests do
  // not use) and cookie keys, instead of the library's development defaults.
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'oidc-test-key-1', alg: 'ES256', use: 'sig' };

  return new Provider(issuer, {
    clients,
    scopes: ['openid', ...options.scopes],
    jwks: { keys: [signingKey] },
    // The library's default (RS256) needs an RSA key; this one is P-256.
    clientDefaults: { id_token_signed_response_alg: 'ES256' },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    features: {
      clientCredentials: { enabled: true },
      // The introspector may introspect any token, a client its own ones
      // (the library's default lets any confidential client see any token).
      introspection: {
        enabled: true,
        allowedPolicy: (_ctx, caller, token) =>
          caller.clientId === options.introspectorId || caller.clientId === token.clientId,
      },
      // No login/consent pages: there is no end user here.
      devInteractions: { enabled: false },
    },
    ttl: { ClientCredentials: options.tokenTtl },
  });
}

function main() {
  let options;
  try {
    options = parseCommandLine();
  } catch (error) {
    console.error(`${USAGE}\n${error.message}`);
    process.exit(2);
  }

  // Bind first, so that the issuer can carry the real port when port is 0;
  // the provider is attached in the 'listening' callback, before the event
  // loop can dispatch any request.
  const server = http.createServer();
  server.on('error', (error) => {
    console.error(`cannot bind ${options.host}:${options.port}: ${error.message}`);
    process.exit(1);
  });
  server.listen(options.port, options.host, () => {
    const { port } = server.address();
    const issuer = `http://${options.host}:${port}`;
    let provider;
    try {
      provider = buildProvider(issuer, options);
    } catch (error) {
      console.error(`cannot start: ${error.stack ?? error}`);
      process.exit(1);
    }
    // Log every error response, with the library's own description.
    for (const event of ['grant.error', 'introspection.error', 'server_error']) {
      provider.on(event, (ctx, error) => {
        const detail = error.error_detail ? ` (${error.error_detail})` : '';
        log(`${event}: ${ctx.method} ${ctx.path}: ${error.error ?? error.name}: ${error.error_description ?? error.message}${detail}`);
      });
    }
    provider.on('grant.success', (ctx) => {
      log(`token issued to ${ctx.oidc.client?.clientId} (scope ${JSON.stringify(ctx.body?.scope ?? '')})`);
    });
    server.on('request', provider.callback());
    log(
      `issuer ${issuer}: client ${options.clientId} (scope ${options.scopes.join(' ')}, ` +
        `token ttl ${options.tokenTtl}s)` +
        (options.introspectorId ? `, introspector ${options.introspectorId}` : '')
    );
    process.stdout.write(`READY ${issuer}\n`);
  });

  let stopping = false;
  const shutdown = (signal) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down`);
    server.close(() => process.exit(0));
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main();
