"""The node as its agents see it (internal): :class:`AgentHost`, the seam
(:mod:`zmesh.agent` re-exports it), and :class:`AgentPort`, the node's
side of it, made of the dispatch's methods and the node's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Protocol

from ..clock import Clock
from ..message import GatherReply, Message
from . import retained, routing
from .stream_reader import Stream
from .streams import is_stream_id

if TYPE_CHECKING:
    from .dispatch import Dispatch

__all__ = ["AgentHost", "AgentPort", "RETAINED_WAIT"]

#: Seconds a new subscription waits at most for a node's retained values.
RETAINED_WAIT = 2.0


class AgentHost(Protocol):
    """All an agent asks of the node hosting it (the node's side of the seam).

    ``send``/``request``/``broadcast`` take a finished Message and raise
    before anything is sent when it cannot go (``send`` and ``request``
    first wait for flow-control credit); ``reply`` answers a request
    with a status; ``changed`` republishes the agent's capabilities and
    subscriptions; ``remove`` unregisters it; ``settled`` waits until every
    peer has the latest of both.
    """

    clock: Clock

    @property
    def closed(self) -> bool: ...

    def stamp(self, msg: Message, trace_id: str | None) -> None: ...

    def send_now(self, msg: Message, timeout: float | None) -> bool: ...

    async def send(self, msg: Message, timeout: float | None) -> None: ...

    async def request(self, msg: Message, timeout: float, kind: str) -> Message: ...

    async def request_any(self, capability: str, make: Callable[[str], Message], timeout: float,
                          idempotent: bool) -> Message: ...

    async def send_any(self, capability: str, make: Callable[[str], Message], timeout: float | None) -> Message: ...

    def gather_iter(self, capability: str, make: Callable[[str], Message], timeout: float,
                    want: int | None) -> AsyncIterator[GatherReply]: ...

    def reply(self, request: Message, status: str, payload: Any) -> None: ...

    def stream(self, msg: Message, timeout: float) -> Stream: ...

    def stream_any(self, requester: str, correlation_id: str, capability: str, make: Callable[[str], Message],
                   timeout: float, idempotent: bool) -> Stream: ...

    def broadcast(self, msg: Message) -> int: ...

    def retain(self, msg: Message) -> None: ...

    def cancel_request(self, agent_id: str, correlation_id: str) -> bool: ...

    def hold_broadcasts(self, agent_id: str, pattern: str, route: str) -> None: ...

    async def retained_first(self, agent_id: str, pattern: str, route: str) -> None: ...

    def changed(self, agent: Any) -> None: ...  # a zmesh.Agent (the runtime never imports it)

    def remove(self, agent_id: str) -> None: ...

    async def settled(self) -> bool: ...


class AgentPort:
    """The node as its agents see it: an :class:`AgentHost`."""

    def __init__(
        self,
        dispatch: Dispatch,
        changed: Callable[[Any], None],
        remove: Callable[[str], None],
        is_closed: Callable[[], bool],
        settled: Callable[[], Any],
    ) -> None:
        self.clock: Clock = dispatch.config.clock
        self.stamp = dispatch.stamp
        self.send_now = dispatch.send_now
        self.send = dispatch.send
        self.request = dispatch.request
        self.cancel_request = dispatch.cancel_request
        self._dispatch = dispatch
        self.broadcast = dispatch.broadcast
        self.changed = changed
        self.remove = remove
        self._is_closed = is_closed
        self._settled = settled

    async def request_any(self, capability: str, make: Callable[[str], Message], timeout: float,
                          idempotent: bool) -> Message:
        return await routing.request_any(self._dispatch, capability, make, timeout, idempotent)

    async def send_any(self, capability: str, make: Callable[[str], Message], timeout: float | None) -> Message:
        return await routing.send_any(self._dispatch, capability, make, timeout)

    def gather_iter(self, capability: str, make: Callable[[str], Message], timeout: float,
                    want: int | None) -> AsyncIterator[GatherReply]:
        return routing.gather_iter(self._dispatch, capability, make, timeout, want)

    def reply(self, request: Message, status: str, payload: Any) -> None:
        if status == "ok" and is_stream_id(request.correlation_id):
            self._dispatch.delivery.stream_reply(request, payload)  # sent as the stream it asked for
        else:
            self._dispatch.reply(request, status, payload)

    def stream(self, msg: Message, timeout: float) -> Stream:
        dispatch = self._dispatch
        return Stream(dispatch.streams, msg.sender, msg.correlation_id, msg.target, timeout, self.clock,
                      lambda _: dispatch.request(msg, timeout, "stream"))

    def stream_any(self, requester: str, correlation_id: str, capability: str, make: Callable[[str], Message],
                   timeout: float, idempotent: bool) -> Stream:
        """``make`` builds each provider's request, all with ``correlation_id``."""
        dispatch = self._dispatch
        return Stream(dispatch.streams, requester, correlation_id, f"capability:{capability}", timeout,
                      self.clock, lambda reader: routing.request_any(
                          dispatch, capability, make, timeout, idempotent, "stream", lambda: bool(reader.producer)))

    def retain(self, msg: Message) -> None:
        self._dispatch.retained.put(msg)

    def hold_broadcasts(self, agent_id: str, pattern: str, route: str) -> None:
        self._dispatch.delivery.hold(agent_id, pattern, route)

    async def retained_first(self, agent_id: str, pattern: str, route: str) -> None:
        """Give a new subscription the mesh's retained values, then what was held back meanwhile."""
        found: list[Message] = []
        try:
            found = await retained.fetch(self._dispatch, pattern, RETAINED_WAIT)
        finally:
            self._dispatch.delivery.release(agent_id, pattern, found)

    @property
    def closed(self) -> bool:
        return self._is_closed()

    async def settled(self) -> bool:
        return bool(await self._settled())
