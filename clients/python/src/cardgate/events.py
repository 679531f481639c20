"""Following cardgate's ledger (`GET /v1/events`) so cached decisions die when the ledger moves.

The follower starts at the ledger head (`GET /v1/status`), resumes with `Last-Event-ID` after
every disconnect, and tells the registry which callee each event is about. While it is not
connected the registry revalidates every decision instead of trusting its cache.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import httpx

from cardgate.background import Background
from cardgate.sse import SseParser

RECONNECT_FIRST = 0.25
RECONNECT_MAX = 5.0


class EventFollower:
    def __init__(
        self,
        http: httpx.AsyncClient,
        on_event: Callable[[str, int | None], None],
        on_connected: Callable[[bool], None],
        log: logging.Logger,
    ) -> None:
        self._http = http
        self._on_event = on_event
        self._on_connected = on_connected
        self._log = log
        self._last_id: str | None = None
        self._task = Background("cardgate-events")

    def start(self) -> None:
        self._task.ensure(self._run)

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        delay = RECONNECT_FIRST
        while True:
            try:
                if self._last_id is None:
                    self._last_id = await self._head()
                await self._follow()
                delay = RECONNECT_FIRST
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._log.debug("cardgate event stream: %s; reconnecting in %.2fs", e, delay)
            finally:
                self._on_connected(False)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)

    async def _head(self) -> str:
        response = await self._http.get("/v1/status")
        response.raise_for_status()
        return str(response.json()["read_model"]["ledger_seq"])

    async def _follow(self) -> None:
        headers = {"Last-Event-ID": self._last_id} if self._last_id else {}
        timeout = httpx.Timeout(5.0, read=None)
        async with self._http.stream(
            "GET", "/v1/events", headers=headers, timeout=timeout
        ) as response:
            response.raise_for_status()
            self._on_connected(True)
            parser = SseParser()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is None:
                    continue
                if event.id is not None:
                    self._last_id = event.id
                try:
                    data = json.loads(event.data)
                    callee, seq = data.get("callee_id"), data.get("seq")
                except (ValueError, AttributeError):
                    continue
                if isinstance(callee, str):
                    self._on_event(callee, seq if isinstance(seq, int) else None)
