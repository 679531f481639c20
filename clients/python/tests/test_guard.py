"""The guard against real processes: cardgate, its fake agent's fault modes, the SDK agent."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from a2a_helpers import CountingInterceptor, after_end, client_for, collect, request, terminals
from conftest import Agents
from harness import Cardgate

import cardgate

FAULT = "misbehave"
T = TypeVar("T")


async def until(predicate: Callable[[], Awaitable[T]], timeout: float, every: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := await predicate():
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"not within {timeout}s")


def sync(predicate: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """A plain predicate, for `until`."""
    return lambda: asyncio.sleep(0, predicate())


@pytest.mark.parametrize("behaviour", ["two-terminal-events", "event-after-terminal"])
async def test_the_app_sees_one_terminal_and_nothing_after(
    server: Cardgate, agents: Agents, behaviour: str
):
    agent = await agents.fake(behaviour, fault_on=FAULT)
    callee_id, card_url = await server.register(agent.origin)
    client = await client_for(agent.origin)

    # The control: the plain client hands the application the fault.
    plain = await collect(client.send_message(request(f"please {FAULT}")))
    assert terminals(plain) + after_end(plain) >= 2, plain

    async with cardgate.Registry(server.url, await server.key("reporter")) as registry:
        guarded = registry.guard(client, card_url=card_url, caller_version="1.0")
        seen = await collect(guarded.send_message(request(f"again {FAULT}")))
        assert terminals(seen) == 1, seen
        assert after_end(seen) == 0, seen
        assert guarded.last_decision is not None and guarded.last_decision.authoritative

        # What the guard saw demotes the agent for everyone.
        reports = await until(lambda: server.reports(callee_id), 10)
        assert reports[0]["trigger"] == "duplicate-terminal"
        assert reports[0]["outcome"] == "demoted", reports[0]
        # The server may list the report before this client has read the answer to it (which
        # is what tells the client its cached decision is stale): wait for that answer.
        await until(sync(lambda: registry.stats.sent == 1), 10, every=0.001)
        d = await registry.decision(card_url, "1.0")
        assert not d.authoritative
        assert d.gate_state == "demoted"
    await client.close()


async def test_a_demotion_reaches_a_second_caller_within_a_second(server: Cardgate, agents: Agents):
    agent = await agents.fake("two-terminal-events", fault_on=FAULT)
    _, card_url = await server.register(agent.origin)
    client = await client_for(agent.origin)
    async with (
        cardgate.Registry(server.url, await server.key("reporter")) as witness,
        cardgate.Registry(server.url, await server.key("reader")) as other,
    ):
        assert (await other.decision(card_url, "1.0")).authoritative
        await until(sync(lambda: other.following), 5)
        # Cached and followed: the next answers come from memory.
        assert (await other.decision(card_url, "1.0")).authoritative

        guarded = witness.guard(client, card_url=card_url, caller_version="1.0")
        await collect(guarded.send_message(request(FAULT)))
        await until(sync(lambda: witness.stats.sent == 1), 10, every=0.001)
        sent = time.monotonic()

        async def advisory() -> bool:
            return not (await other.decision(card_url, "1.0")).authoritative

        await until(advisory, 5, every=0.005)
        latency = time.monotonic() - sent
        print(f"report accepted -> second caller advisory in {latency * 1000:.0f} ms")
        assert latency < 1.0, f"the demotion took {latency:.3f}s to reach the second caller"
    await client.close()


async def test_strict_refuses_an_advisory_agent_before_sending(server: Cardgate, agents: Agents):
    # Faulty on every turn: its probes fail and it never becomes lifecycle-trusted.
    agent = await agents.fake("two-terminal-events")
    callee = await server.admin("POST", "/v1/callees", {"card_url": agent.origin})
    card_url = callee["card_url"]
    async with cardgate.Registry(server.url, await server.key("reader")) as registry:

        async def probed() -> bool:
            d = await registry.decision(card_url, "1.0")
            return any(c.id == "lifecycle-probe" and c.status == "fail" for c in d.conditions)

        await until(probed, 60, every=0.25)
        counter = CountingInterceptor()
        client = await client_for(agent.origin, [counter])
        guarded = registry.guard(client, card_url=card_url, caller_version="1.0", mode="strict")
        with pytest.raises(cardgate.CardLifecycleMismatchError) as refused:
            await collect(guarded.send_message(request("hello")))
        assert any(c.id == "lifecycle-probe" for c in refused.value.conditions)
        assert all(c.status != "pass" for c in refused.value.conditions)
        assert counter.calls == 0, "strict mode let a call through"

        # Safe mode, on the same advisory agent, still hands over one terminal.
        safe = registry.guard(client, card_url=card_url, caller_version="1.0")
        seen = await collect(safe.send_message(request("hello")))
        assert terminals(seen) == 1 and after_end(seen) == 0, seen
        await client.close()


async def test_observe_passes_everything_and_reports(server: Cardgate, agents: Agents):
    agent = await agents.fake("two-terminal-events", fault_on=FAULT)
    callee_id, card_url = await server.register(agent.origin)
    client = await client_for(agent.origin)
    async with cardgate.Registry(server.url, await server.key("reporter")) as registry:
        guarded = registry.guard(client, card_url=card_url, mode="observe")
        seen = await collect(guarded.send_message(request(FAULT)))
        assert terminals(seen) == 2, seen
        reports = await until(lambda: server.reports(callee_id), 10)
        assert reports[0]["trigger"] == "duplicate-terminal"
    await client.close()


async def test_the_registry_down_breaks_nothing_and_reports_wait_for_it(agents: Agents):
    server = Cardgate()
    await server.start()
    try:
        agent = await agents.fake("two-terminal-events", fault_on=FAULT)
        callee_id, card_url = await server.register(agent.origin)
        client = await client_for(agent.origin)
        async with cardgate.Registry(server.url, await server.key("reporter")) as registry:
            assert (await registry.decision(card_url, "1.0")).authoritative
            await server.stop()

            guarded = registry.guard(client, card_url=card_url, caller_version="1.0")
            seen = await collect(guarded.send_message(request(FAULT)))
            assert terminals(seen) == 1 and after_end(seen) == 0, seen
            assert guarded.last_decision is None  # it could not ask, and went on safely
            with pytest.raises(cardgate.RegistryUnavailableError):
                await registry.decision(card_url, "1.0")
            await asyncio.sleep(0.5)
            assert registry.stats.sent == 0 and registry.stats.queued == 1

            await server.start()
            await until(sync(lambda: registry.stats.sent == 1), 15, every=0.05)
            reports = await server.reports(callee_id)
            assert [r["trigger"] for r in reports] == ["duplicate-terminal"]
            assert not (await registry.decision(card_url, "1.0")).authoritative
        await client.close()
    finally:
        await server.stop()


async def test_the_authoritative_path_passes_everything_through(server: Cardgate, agents: Agents):
    # The SDK's agent sends `submitted` without a timestamp (the probe finds it), so its card
    # is authoritative for a caller that does not deduplicate by timestamp.
    agent = await agents.sdk()
    callee_id, card_url = await server.register(agent.origin, dedup="none")
    client = await client_for(agent.origin)
    async with cardgate.Registry(server.url, await server.key("reporter")) as registry:
        guarded = registry.guard(client, card_url=card_url, dedup="none", requires=["streaming"])
        for text in ["hello", "fail", "need-input"]:
            plain = await collect(client.send_message(request(text)))
            through = await collect(guarded.send_message(request(text)))
            assert through == plain, (text, plain, through)
        assert guarded.last_decision is not None and guarded.last_decision.authoritative
        assert registry.stats.queued == 0 and registry.stats.sent == 0
        assert await server.reports(callee_id) == []
    await client.close()


async def test_the_readme_example_gets_one_end_from_an_agent_that_sends_two(
    server: Cardgate, agents: Agents
):
    # The example says "Hello": this agent answers it with two terminal events.
    agent = await agents.fake("two-terminal-events", fault_on="Hello")
    callee_id, _ = await server.register(agent.origin)
    env = {
        **os.environ,
        "CARDGATE_URL": server.url,
        "CARDGATE_API_KEY": await server.key("reporter"),
    }
    example = Path(__file__).parents[1] / "examples" / "guard.py"
    run = await asyncio.create_subprocess_exec(
        sys.executable, str(example), agent.origin, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await run.communicate()
    assert run.returncode == 0
    assert out.decode().count("TASK_STATE_COMPLETED") == 1, out.decode()
    # It reported what it withheld before it exited.
    reports = await server.reports(callee_id)
    assert [r["trigger"] for r in reports] == ["duplicate-terminal"]


async def test_a_caller_can_ask_for_a_track_record_and_freshness(server: Cardgate, agents: Agents):
    agent = await agents.fake("conformant")
    _, card_url = await server.register(agent.origin)
    async with cardgate.Registry(server.url, await server.key("reader")) as registry:
        plain = await registry.decision(card_url, "1.0")
        record = plain.evidence.track_record
        assert record is not None and record.trials >= 3 and record.class_ in ("new", "stable")
        assert record.latency["first_event"] is not None, record
        # More trials than one probe cycle has: the record is not established yet.
        asked = await registry.decision(card_url, "1.0", record=cardgate.RecordAsk(min_trials=100))
        condition = next(c for c in asked.conditions if c.id == "track-record")
        assert condition.status == "unknown" and not asked.authoritative
        # Fresh within an hour; never within zero seconds once a second has passed.
        fresh = await registry.decision(card_url, "1.0", record=cardgate.RecordAsk(max_age=3600))
        assert fresh.authoritative, fresh.failing
        await asyncio.sleep(1.1)
        stale = await registry.decision(card_url, "1.0", record=cardgate.RecordAsk(max_age=0))
        assert [c.id for c in stale.failing] == ["fresh"] and not stale.authoritative
