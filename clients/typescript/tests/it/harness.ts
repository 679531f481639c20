/**
 * Real processes on loopback for the integration tests: cardgate (`cardgate serve` on
 * SQLite in a temp dir), the fake agent and the JS SDK test agent, plus the admin calls
 * that set them up.
 */

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** clients/typescript (this file is compiled to build/tests/it/). */
export const PACKAGE_DIR = fileURLToPath(new URL('../../../', import.meta.url));
export const REPO_DIR = join(PACKAGE_DIR, '..', '..');
const TARGET = process.env['CARGO_TARGET_DIR'] ?? '/work/target';
export const CARDGATE_BIN = process.env['CARDGATE_BIN'] ?? join(TARGET, 'debug', 'cardgate');
export const FAKE_AGENT_BIN = process.env['CARDGATE_FAKE_AGENT_BIN'] ?? join(TARGET, 'debug', 'examples', 'fake-agent');
export const JS_AGENT = join(REPO_DIR, 'tests', 'agents', 'js', 'agent.mjs');

const ADMIN_TOKEN = 'caller-kit-it-admin-token-0123456789abcdef';

/** Why the integration tests cannot run here, or undefined. */
export function missingPrerequisite(): string | undefined {
  if (!existsSync(CARDGATE_BIN)) return `no cardgate binary at ${CARDGATE_BIN} (cargo build; or set CARDGATE_BIN)`;
  if (!existsSync(FAKE_AGENT_BIN)) {
    return `no fake agent at ${FAKE_AGENT_BIN} (cargo build --example fake-agent; or set CARDGATE_FAKE_AGENT_BIN)`;
  }
  const help = spawnSync(FAKE_AGENT_BIN, ['--help'], { encoding: 'utf8' });
  if (!help.stdout.includes('--fault-on')) return `${FAKE_AGENT_BIN} has no --fault-on (rebuild it)`;
  if (!existsSync(join(REPO_DIR, 'tests', 'agents', 'js', 'node_modules', '@a2a-js', 'sdk'))) {
    return 'the JS SDK test agent has no node_modules (cd tests/agents/js && npm ci)';
  }
  return undefined;
}

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns a value other than undefined. */
export async function poll<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, everyMs = 100): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last instanceof Error ? ` (last error: ${last.message})` : ''}`);
    }
    await sleep(everyMs);
  }
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}

/** Reads lines of a child's stdout until `pattern` matches one. */
function waitForLine(child: ChildProcess, pattern: RegExp, timeoutMs: number, what: string): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error(`${what}: no line matching ${pattern} within ${timeoutMs} ms; got ${buffer.slice(0, 500)}`)), timeoutMs);
    const onData = (chunk: Buffer): void => {
      buffer += chunk.toString('utf8');
      const m = pattern.exec(buffer);
      if (m !== null) {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        child.stdout?.resume();
        resolve(m);
      }
    };
    child.stdout?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code}) before printing ${pattern}: ${buffer.slice(0, 500)}`));
    });
  });
}

/** A running cardgate. */
export class Cardgate {
  readonly dir: string;
  readonly logPath: string;
  port = 0;
  #child: ChildProcess | undefined;

  private constructor(dir: string) {
    this.dir = dir;
    this.logPath = join(dir, 'cardgate.log');
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Starts `cardgate serve` in a fresh temp dir. */
  static async start(): Promise<Cardgate> {
    const cg = new Cardgate(mkdtempSync(join(tmpdir(), 'cardgate-caller-it-')));
    await cg.restart();
    return cg;
  }

  /** (Re)starts it in the same dir, on the same port once it has one. */
  async restart(): Promise<void> {
    const log = openSync(this.logPath, 'a');
    const offset = readFileSync(this.logPath).length;
    const child = track(
      spawn(CARDGATE_BIN, ['serve'], {
        cwd: this.dir,
        stdio: ['ignore', log, log],
        env: {
          ...process.env,
          CARDGATE_LISTEN: `127.0.0.1:${this.port}`,
          CARDGATE_ALLOW_NETWORKS: '127.0.0.0/8',
          CARDGATE_HOST_CONCURRENCY: '64',
          CARDGATE_HOST_INTERVAL_MS: '0',
          CARDGATE_ADMIN_TOKEN: ADMIN_TOKEN,
          CARDGATE_PROBE_DEADLINE_SECS: '20',
          RUST_LOG: 'info',
        },
      }),
    );
    closeSync(log);
    this.#child = child;
    const port = await poll('cardgate to listen', 60_000, () => {
      if (child.exitCode !== null) throw new Error(`cardgate exited with ${child.exitCode}; see ${this.logPath}`);
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(readFileSync(this.logPath, 'utf8').slice(offset));
      return Promise.resolve(m === null ? undefined : Number(m[1]));
    }, 50);
    this.port = port;
    await poll('cardgate /readyz', 60_000, async () => ((await fetch(`${this.url}/readyz`)).ok ? true : undefined), 50);
  }

  /** Stops it (SIGTERM, its graceful shutdown). */
  async stop(): Promise<void> {
    if (this.#child !== undefined) await stopChild(this.#child);
  }

  async admin(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const init: RequestInit = { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(`${this.url}${path}`, init);
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`);
    return JSON.parse(text) as Record<string, unknown>;
  }

  /** A new API key with this role. */
  async key(role: 'reader' | 'reporter'): Promise<string> {
    const k = await this.admin('POST', '/v1/keys', { name: `caller-kit-it-${role}-${Math.random().toString(36).slice(2)}`, role });
    return k['key'] as string;
  }

  /** Registers an agent by its card URL; the callee id. */
  async register(cardUrl: string): Promise<string> {
    const c = await this.admin('POST', '/v1/callees', { card_url: cardUrl });
    return c['id'] as string;
  }

  /** The trust decision JSON as the admin sees it (no cache). */
  async trust(cardUrl: string): Promise<Record<string, unknown>> {
    return this.admin('GET', `/v1/trust?card_url=${encodeURIComponent(cardUrl)}&caller_version=1.0`);
  }

  /** Waits until the registry's decision about `cardUrl` satisfies `ok`. */
  async waitFor(cardUrl: string, what: string, ok: (d: Record<string, unknown>) => boolean, timeoutMs = 60_000): Promise<Record<string, unknown>> {
    return poll(`${cardUrl}: ${what}`, timeoutMs, async () => {
      const d = await this.trust(cardUrl);
      return ok(d) ? d : undefined;
    }, 200);
  }

  async waitTrusted(cardUrl: string): Promise<Record<string, unknown>> {
    return this.waitFor(cardUrl, 'lifecycle-trusted', (d) => d['gate_state'] === 'lifecycle-trusted' && d['authoritative'] === true);
  }

  async reports(calleeId: string): Promise<Record<string, unknown>[]> {
    const page = await this.admin('GET', `/v1/callees/${calleeId}/reports`);
    return page['items'] as Record<string, unknown>[];
  }
}

/** A running agent process. */
export interface Agent {
  readonly origin: string;
  readonly cardUrl: string;
  stop(): Promise<void>;
}

/** Starts the fake agent with a behaviour (and `--fault-on`). */
export async function startFakeAgent(behaviour: string, faultOn?: string): Promise<Agent> {
  const args = ['--listen', '127.0.0.1:0', '--behaviour', behaviour];
  if (faultOn !== undefined) args.push('--fault-on', faultOn);
  const child = track(spawn(FAKE_AGENT_BIN, args, { stdio: ['ignore', 'pipe', 'ignore'] }));
  const m = await waitForLine(child, /at (http:\/\/127\.0\.0\.1:\d+)(\/\.well-known\/agent-card\.json)/, 30_000, 'fake-agent');
  const origin = m[1] ?? '';
  return { origin, cardUrl: `${origin}${m[2] ?? ''}`, stop: () => stopChild(child, 'SIGINT') };
}

/** Starts the JS SDK test agent (`tests/agents/js/agent.mjs`). */
export async function startJsAgent(): Promise<Agent> {
  const child = track(spawn(process.execPath, [JS_AGENT, '--port', '0'], { stdio: ['ignore', 'pipe', 'ignore'] }));
  const m = await waitForLine(child, /READY (http:\/\/127\.0\.0\.1:\d+)/, 30_000, 'js agent');
  const origin = m[1] ?? '';
  return { origin, cardUrl: `${origin}/.well-known/agent-card.json`, stop: () => stopChild(child) };
}
