"""The registry's answer to "may I rely on this agent's task lifecycle?", as typed values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Dedup = Literal["timestamp", "none"]
Mode = Literal["safe", "strict", "observe"]


@dataclass(frozen=True)
class Posture:
    """What the caller implements and depends on: the question's key.

    `min_trials` and `min_clean_rate` ask for a track record (the `track-record` condition),
    `max_age` (seconds) for a recent passing probe run (the `fresh` condition).
    """

    card_url: str
    caller_version: str = "1.0"
    dedup: Dedup = "timestamp"
    requires: tuple[str, ...] = ()
    min_trials: int | None = None
    min_clean_rate: float | None = None
    max_age: int | None = None

    @classmethod
    def of(
        cls,
        card_url: str,
        caller_version: str,
        dedup: Dedup,
        requires: Iterable[str],
        record: RecordAsk | None = None,
    ) -> Posture:
        record = record or RecordAsk()
        return cls(
            card_url,
            caller_version,
            dedup,
            tuple(sorted(set(requires))),
            record.min_trials,
            record.min_clean_rate,
            record.max_age,
        )

    @property
    def time_bound(self) -> bool:
        """Whether the answer can change with time alone (freshness is asked for)."""
        return self.max_age is not None

    def query(self) -> dict[str, str]:
        query = {
            "card_url": self.card_url,
            "caller_version": self.caller_version,
            "dedup": self.dedup,
        }
        if self.requires:
            query["requires"] = ",".join(self.requires)
        if self.min_trials is not None:
            query["min_trials"] = str(self.min_trials)
        if self.min_clean_rate is not None:
            query["min_clean_rate"] = repr(float(self.min_clean_rate))
        if self.max_age is not None:
            query["max_age"] = str(int(self.max_age))
        return query


@dataclass(frozen=True)
class RecordAsk:
    """What a caller asks of a subject's record beyond its gate (all optional)."""

    #: The `track-record` condition is `unknown` until this many trials exist.
    min_trials: int | None = None
    #: Then it passes when the 95 % lower bound of the clean rate is at least this.
    min_clean_rate: float | None = None
    #: Seconds: the `fresh` condition fails when the newest passing run is older.
    max_age: int | None = None


@dataclass(frozen=True)
class Percentiles:
    """Median and 95th percentile, in milliseconds."""

    p50_ms: int
    p95_ms: int


@dataclass(frozen=True)
class TrackRecord:
    """A subject's record over the registry's window: trials, clean rate, class, latency."""

    runs: int
    trials: int
    clean: int
    #: The Wilson 95 % lower bound of the clean rate (None without trials).
    clean_rate_lower_bound: float | None
    #: `new`, `stable`, `flaky` or `failing`.
    class_: str
    newest_run_at: str | None
    newest_pass_at: str | None
    #: Per operation (`send`, `first_event`, `terminal`, `push`); None where not measured.
    latency: dict[str, Percentiles | None]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TrackRecord:
        latency = {
            op: Percentiles(int(p["p50_ms"]), int(p["p95_ms"])) if p else None
            for op, p in (body.get("latency") or {}).items()
        }
        return cls(
            runs=int(body["runs"]),
            trials=int(body["trials"]),
            clean=int(body["clean"]),
            clean_rate_lower_bound=body.get("clean_rate_lower_bound"),
            class_=str(body["class"]),
            newest_run_at=body.get("newest_run_at"),
            newest_pass_at=body.get("newest_pass_at"),
            latency=latency,
        )


@dataclass(frozen=True)
class Condition:
    """One condition of a decision: `pass`, `fail` or `unknown` (never counted as a pass)."""

    id: str
    status: str
    reason: str


@dataclass(frozen=True)
class Evidence:
    """What the decision was computed from."""

    card_snapshot_id: str | None = None
    probe_run_id: str | None = None
    ledger_seq: int | None = None
    ledger_hash: str | None = None
    #: The rulebook version the evidence is judged under (`GET /v1/rulebook`).
    rulebook: str | None = None
    #: The subject's track record (None when the callee has no subject for the version).
    track_record: TrackRecord | None = None


@dataclass(frozen=True)
class Decision:
    """`GET /v1/trust`'s answer. `authoritative` is true only when every condition passes."""

    callee_id: str
    authoritative: bool
    gate_state: str | None
    conditions: list[Condition] = field(default_factory=list)
    evidence: Evidence = field(default_factory=Evidence)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Decision:
        evidence = body.get("evidence") or {}
        return cls(
            callee_id=str(body["callee_id"]),
            authoritative=bool(body["authoritative"]),
            gate_state=body.get("gate_state"),
            conditions=[
                Condition(str(c["id"]), str(c["status"]), str(c.get("reason", "")))
                for c in body.get("conditions", [])
            ],
            evidence=Evidence(
                card_snapshot_id=evidence.get("card_snapshot_id"),
                probe_run_id=evidence.get("probe_run_id"),
                ledger_seq=evidence.get("ledger_seq"),
                ledger_hash=evidence.get("ledger_hash"),
                rulebook=evidence.get("rulebook"),
                track_record=(
                    TrackRecord.from_json(evidence["track_record"])
                    if evidence.get("track_record")
                    else None
                ),
            ),
            raw=body,
        )

    @property
    def failing(self) -> list[Condition]:
        """The conditions that did not pass."""
        return [c for c in self.conditions if c.status != "pass"]
