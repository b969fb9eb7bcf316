"""An agent's calls by capability (internal): :class:`zmesh.Agent` has them
from :class:`CapabilityCalls`; what they do is ``zmesh._runtime.routing``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from .errors import InvalidMessage
from ._runtime.context import trace_var
from .message import GatherReply, Message, new_trace_id

if TYPE_CHECKING:
    from ._runtime.agent_port import AgentHost

__all__ = ["CapabilityCalls", "OWN_ID"]

#: Sentinel correlation id: a new request correlates by its own (unguessable) id.
OWN_ID = "\x00own-id"


class CapabilityCalls:
    """``request_any``, ``send_any``, ``gather`` and ``gather_iter``."""

    _host: AgentHost

    if TYPE_CHECKING:
        def _message(self, target: str, topic: str, payload: Any, mtype: str, priority: int, qos: int,
                     ttl: float | None, trace_id: str | None, correlation_id: str = "") -> Message: ...

    async def request_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        idempotent: bool = False,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Message:
        """Request one live agent that declares ``capability``: the one with the
        fewest of this node's ``request_any`` requests outstanding (an open
        flow-control window first).

        When it fails with PeerLost, Backpressure, AgentNotRegistered or
        NoHandler, another provider is asked within the same ``timeout``:
        always if its handler had not started (its node says when it starts),
        and also if it had when ``idempotent`` (the request may run twice);
        otherwise that PeerLost is raised and the request never runs again.
        NoProvider at once when no agent declares ``capability``.
        """
        make = self._requests_to(topic, payload, type, priority, qos, trace_id, timeout)
        return await self._host.request_any(capability, make, timeout, idempotent)

    async def send_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "notify",
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> Message:
        """Fire-and-forget to one live agent that declares ``capability`` (an
        open window first; another if it cannot take it). NoProvider at once
        when none does. Returns the message sent (``.target``: who got it)."""
        def make(target: str) -> Message:
            return self._message(target, topic, payload, type, priority, qos, ttl, trace_id)

        return await self._host.send_any(capability, make, timeout)

    async def gather(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        want: int | None = None,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> list[GatherReply]:
        """Ask every agent that declares ``capability`` at once; the answers,
        each a :class:`~zmesh.GatherReply` with its sender: replies, and the
        error of each provider that failed (Timeout for one silent at the
        deadline). With ``want``, returns as soon as that many replied (the
        others are cancelled). Errors are per provider, never raised as a
        whole; NoProvider at once when no agent declares ``capability``."""
        return [reply async for reply in self.gather_iter(
            capability, topic, payload, timeout=timeout, want=want, qos=qos, priority=priority, type=type,
            trace_id=trace_id)]

    def gather_iter(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        want: int | None = None,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> AsyncIterator[GatherReply]:
        """:meth:`gather`, yielding each answer as it comes (``async for``).

        Breaking out of the loop stops the other requests once the iterator is
        closed: ``async with contextlib.aclosing(agent.gather_iter(...)) as
        answers:`` closes it at once (else when it is garbage-collected)."""
        if want is not None and (want.__class__ is not int or want < 1):
            raise InvalidMessage(f"want must be None or an int of at least 1, got {want!r}")
        make = self._requests_to(topic, payload, type, priority, qos, trace_id, timeout)
        return self._host.gather_iter(capability, make, timeout, want)

    def _requests_to(self, topic: str, payload: Any, mtype: str, priority: int, qos: int, trace_id: str | None,
                     timeout: float) -> Callable[[str], Message]:
        """What builds one call's request to each provider: one trace id for all (the
        caller's, if it has one), a ttl of ``timeout``, as ``request`` gives."""
        trace = trace_id or trace_var.get() or new_trace_id()

        def make(target: str) -> Message:
            msg = self._message(target, topic, payload, mtype, priority, qos, None, trace, OWN_ID)
            msg.ttl = timeout
            return msg

        return make

for _name in ("request_any", "send_any", "gather", "gather_iter"):
    # What messages naming the caller's API say (zmesh.sync's "called from the loop" among them): Agent's.
    getattr(CapabilityCalls, _name).__qualname__ = f"Agent.{_name}"
