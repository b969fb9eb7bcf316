"""The node as its agents see it (internal): an :class:`zmesh.agent.AgentHost`
made of the dispatch's methods and the node's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..clock import Clock

if TYPE_CHECKING:
    from .dispatch import Dispatch

__all__ = ["AgentPort"]


class AgentPort:
    """The node as its agents see it: an :class:`zmesh.agent.AgentHost`."""

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
        self.reply = dispatch.reply
        self.broadcast = dispatch.broadcast
        self.changed = changed
        self.remove = remove
        self._is_closed = is_closed
        self._settled = settled

    @property
    def closed(self) -> bool:
        return self._is_closed()

    async def settled(self) -> bool:
        return bool(await self._settled())
