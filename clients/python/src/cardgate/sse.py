"""A line-fed Server-Sent Events parser: the WHATWG event-stream format, as cardgate sends it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    id: str | None
    event: str
    data: str


class SseParser:
    """Feed it lines without their line ending; it returns an event at each blank line."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SseEvent(self._id, self._event or "message", "\n".join(self._data))
        self._event, self._data = "", []
        return event
