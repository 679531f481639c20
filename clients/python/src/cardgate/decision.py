"""The registry's answer to "may I rely on this agent's task lifecycle?", as typed values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Dedup = Literal["timestamp", "none"]
Mode = Literal["safe", "strict", "observe"]


@dataclass(frozen=True)
class Posture:
    """What the caller implements and depends on: the question's key."""

    card_url: str
    caller_version: str = "1.0"
    dedup: Dedup = "timestamp"
    requires: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, card_url: str, caller_version: str, dedup: Dedup, requires: Iterable[str]
    ) -> Posture:
        return cls(card_url, caller_version, dedup, tuple(sorted(set(requires))))

    def query(self) -> dict[str, str]:
        query = {
            "card_url": self.card_url,
            "caller_version": self.caller_version,
            "dedup": self.dedup,
        }
        if self.requires:
            query["requires"] = ",".join(self.requires)
        return query


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
            ),
            raw=body,
        )

    @property
    def failing(self) -> list[Condition]:
        """The conditions that did not pass."""
        return [c for c in self.conditions if c.status != "pass"]
