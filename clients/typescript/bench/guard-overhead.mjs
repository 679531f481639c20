#!/usr/bin/env node
// What the guard adds to a call on the authoritative path: plain @a2a-js/sdk calls and
// guarded ones, interleaved in one run, against the JS SDK test agent registered (and
// lifecycle-trusted) in a local cardgate.
//
//   npm run bench            # N=300
//   BENCH_N=1000 npm run bench
//
// Needs the same binaries as the integration tests (CARDGATE_BIN, or $CARGO_TARGET_DIR/debug/cardgate).

import { Registry } from '../dist/index.js';
import { message, sdkClient } from '../build/tests/it/a2a.js';
import { Cardgate, missingPrerequisite, poll, startJsAgent } from '../build/tests/it/harness.js';

const N = Number(process.env.BENCH_N ?? 300);
const WARMUP = 50;

const missing = missingPrerequisite();
if (missing) {
  console.error(`bench: ${missing}`);
  process.exit(2);
}

const ms = (ns) => Number(ns) / 1e6;
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function timed(fn) {
  const t = process.hrtime.bigint();
  await fn();
  return ms(process.hrtime.bigint() - t);
}

async function drain(stream) {
  let n = 0;
  for await (const event of stream) if (event) n++;
  if (n !== 4) throw new Error(`expected 4 events, got ${n}`);
}

const cg = await Cardgate.start();
const agent = await startJsAgent();
let registry;
try {
  await cg.register(agent.cardUrl);
  const key = await cg.key('reporter');
  await cg.waitTrusted(agent.cardUrl);

  registry = new Registry(cg.url, { apiKey: key });
  const posture = { callerVersion: '1.0', dedup: 'timestamp', requires: ['streaming'] };
  const decision = await registry.decision(agent.cardUrl, posture);
  if (!decision.authoritative) throw new Error('the agent is not authoritative');
  await poll('the event follower', 5000, async () => registry.stats().followerConnected || undefined, 5);
  await registry.decision(agent.cardUrl, posture);

  const plain = await sdkClient(agent.origin);
  const guarded = registry.guard(plain, { cardUrl: agent.cardUrl, ...posture, mode: 'safe' });

  const cases = {
    'sendMessage plain': () => plain.sendMessage(message('bench')),
    'sendMessage guarded': () => guarded.sendMessage(message('bench')),
    'sendMessageStream plain': () => drain(plain.sendMessageStream(message('bench'))),
    'sendMessageStream guarded': () => drain(guarded.sendMessageStream(message('bench'))),
  };
  const names = Object.keys(cases);
  const samples = Object.fromEntries(names.map((n) => [n, []]));
  for (let i = 0; i < WARMUP; i++) for (const n of names) await cases[n]();
  const callsBefore = registry.stats().registryCalls;
  for (let i = 0; i < N; i++) {
    // Alternate the order (ABBA) so that neither side always runs first.
    const order = i % 2 === 0 ? names : [...names].reverse();
    for (const n of order) samples[n].push(await timed(cases[n]));
  }
  const registryCalls = registry.stats().registryCalls - callsBefore;

  // The hot path alone: a cached decision.
  const K = 100_000;
  const t = process.hrtime.bigint();
  for (let i = 0; i < K; i++) await registry.decision(agent.cardUrl, posture);
  const perDecisionUs = (ms(process.hrtime.bigint() - t) * 1000) / K;

  // The guard's own cost, without network noise: a stub client that replays one real
  // stream's events (and answer) from memory, plain and guarded.
  const recorded = [];
  for await (const e of plain.sendMessageStream(message('bench'))) recorded.push(e);
  const answer = await plain.sendMessage(message('bench'));
  const stub = {
    sendMessage: async () => answer,
    async *sendMessageStream() {
      yield* recorded;
    },
  };
  const guardedStub = registry.guard(stub, { cardUrl: agent.cardUrl, ...posture, mode: 'safe' });
  const M = 50_000;
  const perCallUs = async (fn) => {
    for (let i = 0; i < 1000; i++) await fn();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < M; i++) await fn();
    return (ms(process.hrtime.bigint() - t0) * 1000) / M;
  };
  const stubCosts = {
    'sendMessage (stub) plain': await perCallUs(() => stub.sendMessage()),
    'sendMessage (stub) guarded': await perCallUs(() => guardedStub.sendMessage()),
    'sendMessageStream (stub, 4 events) plain': await perCallUs(() => drain(stub.sendMessageStream())),
    'sendMessageStream (stub, 4 events) guarded': await perCallUs(() => drain(guardedStub.sendMessageStream())),
  };

  const row = (n) => {
    const s = [...samples[n]].sort((a, b) => a - b);
    return { p50: pct(s, 50), p95: pct(s, 95) };
  };
  console.log(`guard overhead, authoritative path, N=${N} interleaved (warm-up ${WARMUP}), node ${process.version}`);
  console.log('case                          p50 ms   p95 ms');
  for (const n of names) {
    const r = row(n);
    console.log(`${n.padEnd(28)} ${r.p50.toFixed(3).padStart(7)}  ${r.p95.toFixed(3).padStart(7)}`);
  }
  for (const kind of ['sendMessage', 'sendMessageStream']) {
    const d = row(`${kind} guarded`).p50 - row(`${kind} plain`).p50;
    console.log(`${kind}: p50 difference guarded - plain = ${d.toFixed(3)} ms (budget 1 ms)`);
  }
  console.log(`cached decision(): ${perDecisionUs.toFixed(2)} µs per call (${K} calls)`);
  for (const [n, us] of Object.entries(stubCosts)) console.log(`${n.padEnd(44)} ${us.toFixed(2)} µs per call (mean of ${M})`);
  console.log(`registry calls during the timed run: ${registryCalls}`);
} finally {
  await registry?.close();
  await agent.stop();
  await cg.stop();
}
