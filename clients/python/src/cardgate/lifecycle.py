"""The caller semantics the source document asks for, as a pure per-guard bookkeeper.

Each task's terminal state is delivered once and nothing of that task after it; nothing is
dropped because a timestamp repeats; nothing is read from history length. What breaks the
lifecycle is returned as a `Finding` with the events that show it, for a witness report.
No I/O here: the guard feeds events in and acts on what comes back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

TERMINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        # v0.3 spellings, for events that reach here already as JSON.
        "completed",
        "failed",
        "canceled",
        "rejected",
    }
)

Trigger = Literal["duplicate-terminal", "terminal-without-timestamp"]


@dataclass(frozen=True)
class Observed:
    """What the bookkeeper needs of one event; `source` is the event itself, kept for evidence."""

    task_id: str | None
    state: str | None
    has_timestamp: bool
    source: Any

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class Finding:
    """A lifecycle violation: what to report, with the events that show it, in order."""

    trigger: Trigger
    task_id: str
    evidence: tuple[Any, ...]
    drop: bool
    """Whether safe mode withholds the event (an event after the end) or must deliver it (a
    terminal state without a timestamp still ends the task)."""


class Lifecycle:
    """Remembers which tasks have ended (the newest `capacity` of them)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._ended: OrderedDict[str, Observed] = OrderedDict()
        self._capacity = capacity

    def see(self, event: Observed, *, dedup_by_timestamp: bool) -> Finding | None:
        """Records `event`; returns the violation it shows, if any."""
        task = event.task_id
        if task is None:
            return None
        ended = self._ended.get(task)
        if ended is not None:
            return Finding("duplicate-terminal", task, (ended.source, event.source), drop=True)
        if not event.terminal:
            return None
        self._ended[task] = event
        if len(self._ended) > self._capacity:
            self._ended.popitem(last=False)
        if dedup_by_timestamp and not event.has_timestamp:
            return Finding("terminal-without-timestamp", task, (event.source,), drop=False)
        return None
