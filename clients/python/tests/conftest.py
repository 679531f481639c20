"""Fixtures: one cardgate for the session, agents per test (tests/harness.py starts them)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from harness import Agent, Cardgate, fake_agent, sdk_agent


class Agents:
    """Starts agents for one test and stops them after it."""

    def __init__(self) -> None:
        self.started: list[Agent] = []

    async def fake(self, behaviour: str, fault_on: str | None = None) -> Agent:
        self.started.append(await fake_agent(behaviour, fault_on))
        return self.started[-1]

    async def sdk(self) -> Agent:
        self.started.append(await sdk_agent())
        return self.started[-1]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def server() -> AsyncIterator[Cardgate]:
    server = Cardgate()
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def agents() -> AsyncIterator[Agents]:
    started = Agents()
    yield started
    for agent in started.started:
        await agent.stop()
