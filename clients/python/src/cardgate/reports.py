"""Witness reports: what guards saw on real traffic, sent back to cardgate's reports API.

Reports never block a call and are never lost while cardgate is briefly down: they wait in a
bounded queue (the oldest goes when it is full, and is counted), are sent in batches by one
background task under a rate limit, are retried with backoff on network or server errors, and
are dropped (and counted) only when cardgate refuses them (4xx: the evidence did not show the
violation, or the key may not report). The same violation of one task is reported once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from cardgate.background import Background
from cardgate.errors import RegistryUnavailableError

BATCH_EVERY = 0.1
RETRY_FIRST = 0.25
RETRY_MAX = 5.0


@dataclass
class Report:
    card_url: str
    caller_version: str
    trigger: str
    task_id: str
    evidence: list[Any]
    callee_id: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.card_url, self.caller_version, self.task_id, self.trigger)


@dataclass
class ReportStats:
    queued: int = 0
    sent: int = 0
    refused: int = 0
    dropped: int = 0
    last_error: str | None = field(default=None, repr=False)


class RateLimit:
    """A token bucket: `rate` sends a second, bursts of `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate, self._burst = rate, float(burst)
        self._tokens, self._at = float(burst), time.monotonic()

    def wait_time(self) -> float:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate


class ReportQueue:
    def __init__(
        self,
        http: httpx.AsyncClient,
        resolve_callee: Callable[[str, str], Awaitable[str]],
        on_sent: Callable[[Report, dict[str, Any]], None],
        log: logging.Logger,
        *,
        capacity: int = 256,
        per_second: float = 10.0,
    ) -> None:
        self._http = http
        self._resolve = resolve_callee
        self._on_sent = on_sent
        self._log = log
        self._queue: deque[Report] = deque()
        self._capacity = capacity
        self._limit = RateLimit(per_second, burst=max(1, int(per_second)))
        self._seen: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task = Background("cardgate-reports")
        self.stats = ReportStats()

    def put(self, report: Report) -> None:
        """Queues `report` unless the same one was queued already. Never blocks."""
        if report.key in self._seen:
            return
        self._seen[report.key] = None
        if len(self._seen) > 10 * self._capacity:
            self._seen.popitem(last=False)
        if len(self._queue) >= self._capacity:
            self._queue.popleft()
            self.stats.dropped += 1
        self._queue.append(report)
        self.stats.queued = len(self._queue)
        self._idle.clear()
        self._wake.set()
        self._task.ensure(self._run)

    async def flush(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds for the queue to empty; says whether it did."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        retry = RETRY_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Gather what arrives together, then send it as one batch.
            await asyncio.sleep(BATCH_EVERY)
            while self._queue:
                report = self._queue[0]
                wait = self._limit.wait_time()
                if wait:
                    await asyncio.sleep(wait)
                    continue
                try:
                    await self._send(report)
                    retry = RETRY_FIRST
                except (httpx.TransportError, RegistryUnavailableError) as e:
                    self.stats.last_error = str(e) or type(e).__name__
                    self._log.debug("cardgate unreachable (%s); retrying in %.2fs", e, retry)
                    await asyncio.sleep(retry)
                    retry = min(retry * 2, RETRY_MAX)
                    continue
                if self._queue and self._queue[0] is report:
                    self._queue.popleft()
                self.stats.queued = len(self._queue)
            self._idle.set()

    async def _send(self, report: Report) -> None:
        if report.callee_id is None:
            try:
                report.callee_id = await self._resolve(report.card_url, report.caller_version)
            except (LookupError, ValueError) as e:
                self.stats.refused += 1
                self._log.warning("cannot report on %s: %s", report.card_url, e)
                return
        body = {
            "protocol_version": report.caller_version,
            "trigger": report.trigger,
            "evidence": {"observed": report.evidence},
        }
        response = await self._http.post(f"/v1/callees/{report.callee_id}/reports", json=body)
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise RegistryUnavailableError(f"cardgate answered {response.status_code}")
        if response.status_code >= 400:
            self.stats.refused += 1
            self._log.warning(
                "cardgate refused a %s report on %s: %s",
                report.trigger,
                report.card_url,
                response.text[:500],
            )
            return
        self.stats.sent += 1
        self._on_sent(report, response.json())
