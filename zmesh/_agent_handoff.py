"""An agent's task ownership and handoffs (internal): :class:`zmesh.Agent` has
them from :class:`HandoffCalls`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from ._agent_capability import OWN_ID
from ._runtime.handoff import HANDOFF_TOPIC, HandoffResult
from .errors import InvalidMessage
from .message import Message

if TYPE_CHECKING:
    from ._runtime.agent_port import AgentHost

__all__ = ["HandoffCalls", "HANDOFF_GRACE"]

#: Seconds the offerer waits for an answer beyond the offer's ttl (the target decides within the ttl).
HANDOFF_GRACE = 2.0


class HandoffCalls:
    """``tasks``, ``claim``, ``complete`` and ``handoff``."""

    _host: AgentHost
    _tasks: set[str]

    if TYPE_CHECKING:
        def _message(self, target: str, topic: str, payload: Any, mtype: str, priority: int, qos: int,
                     ttl: float | None, trace_id: str | None, correlation_id: str = "") -> Message: ...

    @property
    def tasks(self) -> frozenset[str]:
        """Ids of the tasks this agent owns."""
        return frozenset(self._tasks)

    def claim(self, task_id: str) -> None:
        """Record that this agent owns ``task_id``."""
        if not isinstance(task_id, str) or not task_id:
            raise InvalidMessage(f"task id must be a non-empty string, got {task_id!r}")
        self._tasks.add(task_id)

    def complete(self, task_id: str) -> bool:
        """This agent is done with ``task_id`` (finished or dropped it): it owns
        it no more. Returns whether it owned it."""
        if task_id in self._tasks:
            self._tasks.discard(task_id)
            return True
        return False

    async def handoff(
        self,
        target: str,
        task_id: str,
        context: Any = None,
        *,
        artifacts: Iterable[str] = (),
        timeout: float = 30.0,
    ) -> HandoffResult:
        """Offer ownership of ``task_id`` to ``target``.

        Ownership moves only if the target accepts; on refusal the task stays
        here and ``accepted`` is False. Raises Timeout (the task stays here),
        AgentNotRegistered, PeerLost or HandlerError like a request.

        The offer travels at QoS 1 (sent again if the target's node dies or
        its link breaks, to whatever node hosts ``target`` then) with a ttl
        of ``timeout``: a target that decides after that refuses, and the
        offerer waits a little longer than the ttl for the answer, so an
        accepted task is never also kept here.
        """
        if not isinstance(task_id, str) or not task_id:
            raise InvalidMessage(f"task id must be a non-empty string, got {task_id!r}")
        arts = tuple(artifacts)
        if any(not isinstance(a, str) for a in arts):
            raise InvalidMessage("artifacts must be strings (paths or URIs)")
        self._tasks.add(task_id)
        msg = self._message(
            target,
            HANDOFF_TOPIC,
            {"task_id": task_id, "context": context, "artifacts": list(arts)},
            "task",
            3,
            1,
            timeout,
            None,
            OWN_ID,
        )
        clock = self._host.clock
        started = clock.monotonic()
        reply = await self._host.request(msg, timeout + HANDOFF_GRACE, "handoff")
        result = reply.payload if isinstance(reply.payload, dict) else {}
        accepted = result.get("accepted") is True
        if accepted:
            self._tasks.discard(task_id)
        return HandoffResult(
            task_id,
            target,
            accepted,
            str(result.get("reason", "")),
            clock.monotonic() - started,
            reply,
        )



for _name in ("claim", "complete", "handoff"):
    getattr(HandoffCalls, _name).__qualname__ = f"Agent.{_name}"  # what messages naming the caller's API say
