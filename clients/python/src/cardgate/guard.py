"""`GuardedClient`: an a2a-sdk `Client` whose lifecycle events obey cardgate's verdict.

A wrapper, not a `ClientCallInterceptor`: the SDK's interceptors see each streamed event but
cannot withhold one (`BaseClient` yields whatever `after` leaves in place), and safe mode must
withhold a second terminal event. Every method other than `send_message` and `subscribe` is
the client's own.

- `safe` (default): events that break the lifecycle (a second terminal state of a task, any
  event of a task after its end) are withheld and reported; everything else passes as is.
  When the decision is authoritative that is all that ever happens to a conformant stream;
  when it is advisory, or cardgate cannot be reached, the same rule gives the application
  the caller semantics: one terminal state per task, nothing after it.
- `strict`: an advisory decision (or an unreachable registry) raises
  `CardLifecycleMismatchError` before anything is sent; otherwise as `safe`.
- `observe`: every event passes untouched; violations are only reported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from cardgate.decision import Condition, Decision, Mode, Posture
from cardgate.errors import CardLifecycleMismatchError, RegistryUnavailableError
from cardgate.lifecycle import Finding, Lifecycle, Observed
from cardgate.reports import Report

if TYPE_CHECKING:
    from a2a.client import Client, ClientCallContext
    from a2a.types import StreamResponse

    from cardgate.registry import Registry


class GuardedClient:
    """Drop-in for the wrapped client: same methods, arguments and yielded types."""

    def __init__(self, registry: Registry, client: Client, posture: Posture, mode: Mode) -> None:
        self._registry = registry
        self._client = client
        self._posture = posture
        self._mode = mode
        self._lifecycle = Lifecycle()
        self.last_decision: Decision | None = None
        """The decision the latest call went by (`None` when cardgate could not be reached)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def send_message(
        self, request: Any, *, context: ClientCallContext | None = None
    ) -> AsyncIterator[StreamResponse]:
        """As `Client.send_message`, with the lifecycle guarded."""
        await self._admit()
        async for event in self._guarded(self._client.send_message(request, context=context)):
            yield event

    async def subscribe(
        self, request: Any, *, context: ClientCallContext | None = None
    ) -> AsyncIterator[StreamResponse]:
        """As `Client.subscribe`, with the lifecycle guarded."""
        await self._admit()
        async for event in self._guarded(self._client.subscribe(request, context=context)):
            yield event

    async def _admit(self) -> None:
        """Fetches the decision; in strict mode, refuses an advisory one."""
        try:
            decision: Decision | None = await self._registry._decide(self._posture)
        except RegistryUnavailableError as e:
            decision = None
            unreachable = e
        self.last_decision = decision
        if self._mode != "strict":
            return
        if decision is None:
            condition = Condition("registry-reachable", "unknown", str(unreachable))
            raise CardLifecycleMismatchError(
                self._posture.card_url,
                [condition],
                None,
                f"strict mode: cardgate could not be asked about it: {unreachable}",
            )
        if not decision.authoritative:
            raise CardLifecycleMismatchError(self._posture.card_url, decision.failing, decision)
        if self._registry.suspected(self._posture, decision):
            condition = Condition(
                "witnessed", "fail", "this process saw the agent break the lifecycle"
            )
            raise CardLifecycleMismatchError(self._posture.card_url, [condition], decision)

    async def _guarded(
        self, stream: AsyncIterator[StreamResponse]
    ) -> AsyncIterator[StreamResponse]:
        dedup = self._posture.dedup == "timestamp"
        async for event in stream:
            finding = self._lifecycle.see(observe(event), dedup_by_timestamp=dedup)
            if finding is not None:
                self._witness(finding)
                if finding.drop and self._mode != "observe":
                    continue
            yield event

    def _witness(self, finding: Finding) -> None:
        self._registry.suspect(self._posture, self.last_decision)
        self._registry.report(
            Report(
                card_url=self._posture.card_url,
                caller_version=self._posture.caller_version,
                trigger=finding.trigger,
                task_id=finding.task_id,
                evidence=[MessageToDict(e) for e in finding.evidence],
                callee_id=self.last_decision.callee_id if self.last_decision else None,
            )
        )


def observe(event: StreamResponse) -> Observed:
    """What the lifecycle bookkeeper needs of one `StreamResponse`."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        task = event.task
        return Observed(task.id, _state(task.status), task.status.HasField("timestamp"), event)
    if kind == "status_update":
        update = event.status_update
        status = update.status
        return Observed(update.task_id, _state(status), status.HasField("timestamp"), event)
    if kind == "artifact_update":
        return Observed(event.artifact_update.task_id, None, False, event)
    return Observed(None, None, False, event)  # a message: no lifecycle


def _state(status: Any) -> str:
    return str(TaskState.Name(status.state))
