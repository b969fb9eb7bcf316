"""An agent's streamed requests (internal): :class:`zmesh.Agent` has them from
:class:`StreamCalls`; the protocol is ``zmesh._runtime.streams``'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._runtime.stream_reader import Stream
from ._runtime.streams import new_stream_id
from .message import Message

if TYPE_CHECKING:
    from ._runtime.agent_port import AgentHost

__all__ = ["StreamCalls"]


class StreamCalls:
    """``stream`` and ``stream_any``."""

    _host: AgentHost
    id: str

    if TYPE_CHECKING:
        def _message(self, target: str, topic: str, payload: Any, mtype: str, priority: int, qos: int,
                     ttl: float | None, trace_id: str | None, correlation_id: str = "") -> Message: ...

    def stream(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Stream:
        """Request a streamed reply: ``async for chunk in agent.stream(...)``
        yields what the handler yields, in order, as it comes (see :class:`zmesh.Stream`).

        The handler is an ``async def`` generator, a plain generator (run in
        the worker pool), or returns a stream (an async iterator, another
        agent's Stream to relay); one that returns a plain value streams it as
        one chunk. ``timeout`` is for the whole stream. A slow reader slows the
        producer: at most a window of chunks waits on either side. Without a
        ``ttl`` the request's ttl is ``timeout``, as for :meth:`request`.
        """
        msg = self._message(target, topic, payload, type, priority, 0, ttl, trace_id, new_stream_id())
        if ttl is None and (timeout.__class__ is float or timeout.__class__ is int) and timeout > 0:
            msg.ttl = timeout
        return self._host.stream(msg, timeout)

    def stream_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        idempotent: bool = False,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Stream:
        """:meth:`stream` from one live agent that declares ``capability``, picked
        and failed over as :meth:`request_any` does, but only until its first
        chunk: from then on an error is the stream's (raised in band)."""
        correlation_id = new_stream_id()
        first = self._message("", topic, payload, type, priority, 0, None, trace_id, correlation_id)

        def make(provider: str) -> Message:
            msg = self._message(provider, topic, payload, type, priority, 0, None, first.trace_id, correlation_id)
            msg.ttl = timeout
            return msg

        return self._host.stream_any(self.id, correlation_id, capability, make, timeout, idempotent)


for _name in ("stream", "stream_any"):
    getattr(StreamCalls, _name).__qualname__ = f"Agent.{_name}"
