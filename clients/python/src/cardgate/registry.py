"""`Registry`: cardgate's decisions for one caller process, cached, kept current, and enforced.

A decision is cached with its ETag. While the ledger follower is connected and nothing about
the callee has happened since, the cached answer is returned without a network call (the
guard's hot path); otherwise it is revalidated with `If-None-Match`. Events about a callee
drop its entries, so a demotion reaches every running caller within a second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from cardgate.decision import Decision, Dedup, Mode, Posture, RecordAsk
from cardgate.errors import RegistryUnavailableError
from cardgate.events import EventFollower
from cardgate.reports import Report, ReportQueue, ReportStats

if TYPE_CHECKING:
    from a2a.client import Client

    from cardgate.guard import GuardedClient

LOG = logging.getLogger("cardgate")


@dataclass
class _Entry:
    decision: Decision
    etag: str | None
    followed_from: int | None
    """The event count when it was asked for, if the follower was connected then: from there on
    every event about the callee reaches `_invalidate`; `None` when it was not."""


class Registry:
    """A handle on one cardgate: decisions, the ledger follower and the report queue.

    `base_url` and `api_key` default to `CARDGATE_URL` and `CARDGATE_API_KEY`. The key needs
    the `reporter` role for witness reports (`reader` is enough for decisions; refused reports
    are counted in `stats`). Use it as an async context manager, or call `close()`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 2.0,
        follow_events: bool = True,
        report_queue: int = 256,
        reports_per_second: float = 10.0,
        logger: logging.Logger | None = None,
    ) -> None:
        base_url = base_url or os.environ.get("CARDGATE_URL")
        api_key = api_key or os.environ.get("CARDGATE_API_KEY")
        if not base_url:
            raise ValueError("give base_url, or set CARDGATE_URL")
        if not api_key:
            raise ValueError("give api_key, or set CARDGATE_API_KEY")
        self._log = logger or LOG
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
        )
        self._entries: dict[Posture, _Entry] = {}
        # Events seen, and the count at the newest one about each callee: an entry answers
        # from memory while no event about its callee came after it was asked for.
        self._events = 0
        self._last_event: dict[str, int] = {}
        # The newest ledger seq known about each callee: revalidations ask for at least it, so
        # a replica that has not applied it yet cannot answer 304 with what it replaced.
        self._seen_seq: dict[str, int] = {}
        self._connected = False
        self._follower = (
            EventFollower(self._http, self._invalidate, self._set_connected, self._log)
            if follow_events
            else None
        )
        self._reports = ReportQueue(
            self._http,
            self._callee_of,
            self._reported,
            self._log,
            capacity=report_queue,
            per_second=reports_per_second,
        )
        # Subjects a guard saw misbehave, with the ledger seq of the decision that vouched
        # for them: advisory here until the registry's answer moves past that seq.
        self._suspect: dict[tuple[str, str], int | None] = {}

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, flush_timeout: float = 5.0) -> None:
        """Stops following the ledger and sends what is queued (waiting up to `flush_timeout`)."""
        if self._follower is not None:
            await self._follower.stop()
        await self._reports.flush(flush_timeout)
        await self._reports.stop()
        await self._http.aclose()

    @property
    def stats(self) -> ReportStats:
        """Witness report counters: queued, sent, refused, dropped."""
        return self._reports.stats

    @property
    def following(self) -> bool:
        """Whether the ledger follower is connected (cached decisions are then served as is)."""
        return self._connected

    async def decision(
        self,
        card_url: str,
        caller_version: str = "1.0",
        dedup: Dedup = "timestamp",
        requires: Iterable[str] = (),
        record: RecordAsk | None = None,
    ) -> Decision:
        """cardgate's decision for this caller on `card_url`.

        `record` asks for a track record and freshness beyond the gate (`RecordAsk`).
        Raises `RegistryUnavailableError` when cardgate cannot answer, `LookupError` when it
        knows no callee with that card URL, `ValueError` on a malformed question.
        """
        return await self._decide(Posture.of(card_url, caller_version, dedup, requires, record))

    def guard(
        self,
        client: Client,
        *,
        card_url: str,
        caller_version: str = "1.0",
        dedup: Dedup = "timestamp",
        requires: Iterable[str] = (),
        mode: Mode = "safe",
        record: RecordAsk | None = None,
    ) -> GuardedClient:
        """Wraps an a2a-sdk `Client`; see `cardgate.guard.GuardedClient`."""
        from cardgate.guard import GuardedClient  # noqa: PLC0415 (guard imports this module)

        if mode not in ("safe", "strict", "observe"):
            raise ValueError(f"mode must be safe, strict or observe, not {mode!r}")
        posture = Posture.of(card_url, caller_version, dedup, requires, record)
        return GuardedClient(self, client, posture, mode)

    async def _decide(self, posture: Posture) -> Decision:
        if self._follower is not None:
            self._follower.start()
        entry = self._entries.get(posture)
        # An answer with freshness in it can change with time alone: asked again each time.
        if entry is not None and self._current(entry) and not posture.time_bound:
            return entry.decision
        followed_from = self._events if self._connected else None
        headers = {"If-None-Match": entry.etag} if entry and entry.etag else {}
        query = posture.query()
        seen = self._seen_seq.get(entry.decision.callee_id) if entry else None
        if seen is not None:
            query["min_seq"] = str(seen)
        try:
            response = await self._http.get("/v1/trust", params=query, headers=headers)
        except httpx.TransportError as e:
            raise RegistryUnavailableError(f"cardgate unreachable: {e!r}") from e
        if response.status_code == 304 and entry is not None:
            decision = entry.decision
        elif response.status_code == 200:
            decision = Decision.from_json(response.json())
        elif response.status_code == 404:
            raise LookupError(f"cardgate knows no callee with card URL {posture.card_url}")
        elif response.status_code >= 500 or response.status_code == 429:
            raise RegistryUnavailableError(f"cardgate answered {response.status_code}")
        else:
            raise ValueError(f"cardgate refused the question: {_message(response)}")
        self._entries[posture] = _Entry(decision, response.headers.get("ETag"), followed_from)
        return decision

    def _current(self, entry: _Entry) -> bool:
        """Whether `entry` still stands: followed since it was asked for, and nothing about its
        callee happened after."""
        since = entry.followed_from
        last = self._last_event.get(entry.decision.callee_id, -1)
        return self._connected and since is not None and last <= since

    def _invalidate(self, callee_id: str, seq: int | None = None) -> None:
        self._events += 1
        self._last_event[callee_id] = self._events
        if seq is not None:
            self._seen_seq[callee_id] = max(seq, self._seen_seq.get(callee_id, 0))

    def _set_connected(self, connected: bool) -> None:
        self._connected = connected

    async def _callee_of(self, card_url: str, caller_version: str) -> str:
        return (await self.decision(card_url, caller_version)).callee_id

    def _reported(self, report: Report, answer: dict[str, Any]) -> None:
        if report.callee_id is not None:
            seq = answer.get("ledger_seq")
            self._invalidate(report.callee_id, seq if isinstance(seq, int) else None)

    # What guards tell the registry.

    def report(self, report: Report) -> None:
        self._reports.put(report)

    def suspect(self, posture: Posture, decision: Decision | None) -> None:
        key = (posture.card_url, posture.caller_version)
        self._suspect[key] = decision.evidence.ledger_seq if decision else None

    def suspected(self, posture: Posture, decision: Decision) -> bool:
        """Whether a guard here saw this subject misbehave since `decision`'s evidence."""
        key = (posture.card_url, posture.caller_version)
        if key not in self._suspect:
            return False
        if decision.evidence.ledger_seq != self._suspect[key]:
            del self._suspect[key]  # the registry has judged it since
            return False
        return True


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"
