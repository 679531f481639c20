"""The two ways the kit says no: the registry could not answer, or its answer refuses."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cardgate.decision import Condition, Decision


class RegistryUnavailableError(Exception):
    """cardgate could not be reached, timed out, or answered with a server error.

    `Registry.decision` raises it; a guard in `safe` or `observe` mode never does: it treats
    the agent as advisory instead.
    """


class CardLifecycleMismatchError(Exception):
    """A `strict` guard refused to call an agent whose card is not authoritative.

    Raised before anything is sent. `conditions` are the ones that did not pass; `decision`
    is the registry's whole answer (`None` when the registry could not be reached: strict
    mode fails closed).
    """

    def __init__(
        self,
        card_url: str,
        conditions: list[Condition],
        decision: Decision | None,
        reason: str | None = None,
    ) -> None:
        self.card_url = card_url
        self.conditions = conditions
        self.decision = decision
        failing = ", ".join(f"{c.id}: {c.status}" for c in conditions)
        super().__init__(
            reason or f"the card of {card_url} is advisory for lifecycle semantics ({failing})"
        )
