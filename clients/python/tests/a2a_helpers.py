"""Small helpers over the a2a-sdk client, as an application would write them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from a2a.client import Client, create_client
from a2a.client.interceptors import AfterArgs, BeforeArgs, ClientCallInterceptor
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse, TaskState

TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}


class CountingInterceptor(ClientCallInterceptor):
    """Counts the calls the client actually makes."""

    def __init__(self) -> None:
        self.calls = 0

    async def before(self, args: BeforeArgs) -> None:
        self.calls += 1

    async def after(self, args: AfterArgs) -> None:
        pass


async def client_for(
    origin: str, interceptors: list[ClientCallInterceptor] | None = None
) -> Client:
    return await create_client(origin, interceptors=interceptors)


def request(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    )


def describe(event: StreamResponse) -> tuple[str, str | None]:
    """(kind, state) of an event, for comparing streams."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return kind, TaskState.Name(event.task.status.state)
    if kind == "status_update":
        return kind, TaskState.Name(event.status_update.status.state)
    return str(kind), None


async def collect(stream: AsyncIterator[StreamResponse]) -> list[tuple[str, str | None]]:
    return [describe(e) async for e in stream]


def terminals(seen: list[tuple[str, str | None]]) -> int:
    return sum(1 for _, state in seen if state in TERMINAL)


def after_end(seen: list[tuple[str, str | None]]) -> int:
    """How many events follow the first terminal one."""
    for i, (_, state) in enumerate(seen):
        if state in TERMINAL:
            return len(seen) - i - 1
    return 0
