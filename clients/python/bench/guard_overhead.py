"""What the guard costs on the authoritative path, against the official SDK's agent.

Plain and guarded calls alternate in one run (the machine is shared and noisy: only the
ratio and the difference within one run mean anything). Run from clients/python with the
binaries built (`cargo test --no-run`):

    python bench/guard_overhead.py [calls]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from a2a.client import ClientConfig, create_client
from a2a_helpers import request
from harness import Cardgate, sdk_agent

import cardgate


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(calls: int) -> None:
    server = Cardgate()
    await server.start()
    agent = await sdk_agent()
    try:
        _, card_url = await server.register(agent.origin, dedup="none")
        async with cardgate.Registry(server.url, await server.key("reporter")) as registry:
            for streaming in (True, False):
                client = await create_client(agent.origin, ClientConfig(streaming=streaming))
                guarded = registry.guard(client, card_url=card_url, dedup="none")
                times: dict[str, list[float]] = {"plain": [], "guarded": []}
                for i in range(calls + 20):
                    for name, c in (("plain", client), ("guarded", guarded)):
                        start = time.perf_counter()
                        async for _ in c.send_message(request("hello")):
                            pass
                        if i >= 20:  # warm-up
                            times[name].append((time.perf_counter() - start) * 1000)
                assert guarded.last_decision is not None and guarded.last_decision.authoritative
                p = {n: (percentile(t, 0.5), percentile(t, 0.95)) for n, t in times.items()}
                diff = statistics.median(
                    g - q for g, q in zip(times["guarded"], times["plain"], strict=True)
                )
                mode = "stream" if streaming else "unary"
                print(
                    f"{mode}: plain p50 {p['plain'][0]:.2f} ms p95 {p['plain'][1]:.2f} ms | "
                    f"guarded p50 {p['guarded'][0]:.2f} ms p95 {p['guarded'][1]:.2f} ms | "
                    f"p50 overhead {p['guarded'][0] - p['plain'][0]:+.3f} ms, "
                    f"median pairwise {diff:+.3f} ms ({calls} calls each)"
                )
                await client.close()
            # The decision itself, from the cache (the guard's per-call lookup).
            n = 10_000
            start = time.perf_counter()
            for _ in range(n):
                await registry.decision(card_url, dedup="none")
            per = (time.perf_counter() - start) / n * 1e6
            print(f"cached decision: {per:.1f} µs per lookup (following: {registry.following})")
    finally:
        await agent.stop()
        await server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
