"""The library's background tasks (the ledger follower, the report sender): one way to end them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class Background:
    """A task started on first need and cancelled, and awaited, on `stop`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def ensure(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Starts `work()` unless it already runs."""
        if self._task is None:
            self._task = asyncio.create_task(work(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
