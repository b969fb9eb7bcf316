"""A node's observation and waiting (internal): :class:`zmesh.Node` has them
from :class:`WatchCalls`: receipts, events, stats (its own, a peer's, the
services'), and waits for the mesh to settle or agents to appear."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from ._runtime.services import collect
from ._runtime.stats import ask, node_stats
from .errors import InvalidMessage, Timeout
from .observer import Observer
from .registry import MeshEvent, Registry

if TYPE_CHECKING:
    from ._runtime.dispatch import Dispatch
    from ._runtime.frame_mesh import FrameMesh
    from ._runtime.message_mesh import MessageMesh
    from ._runtime.watch import Watch
    from .deadletters import DeadLetters

__all__ = ["WatchCalls"]


class WatchCalls:
    """``observe``, ``events``, ``stats``, ``peer_stats``, ``services``,
    ``settled``, ``wait_acked``, ``wait_for_agents`` and ``wait_until``."""

    id: str
    incarnation: str
    registry: Registry
    settle_timeout: float
    dead_letters: DeadLetters
    _dispatch: Dispatch
    _mesh: FrameMesh[Dispatch] | MessageMesh[Dispatch]
    _watch: Watch
    _closed: bool

    if TYPE_CHECKING:
        @property
        def uptime(self) -> float: ...

        def _check_open(self) -> None: ...

    # -- observation -----------------------------------------------------

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(receipt)`` for every interaction; returns a function that stops it."""
        return self._dispatch.observe(callback)

    def events(self, maxsize: int = 1000) -> AsyncIterator[MeshEvent]:
        """Async iterator of MeshEvents (peer/agent joined/left, evasive, restarted)."""
        return self._watch.events(maxsize)

    def stats(self) -> dict[str, Any]:
        """Counters: traffic, drops by reason, pending requests, peers, dead
        letters, and each hosted agent's in ``"by_agent"`` (see the guide)."""
        dispatch = self._dispatch
        out = node_stats(self._mesh, self._watch, dispatch.stats, dispatch.delivery.inboxes, dispatch.tasks)
        out["dead_letters"] = self.dead_letters.total
        out["node_id"] = self.id
        out["incarnation"] = self.incarnation
        out["uptime"] = self.uptime
        return out

    async def peer_stats(self, node_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Node ``node_id``'s :meth:`stats`, asked over the mesh (this node's own
        id asks itself the same way). PeerLost if it is not a peer, Timeout
        if it does not answer in ``timeout`` s; the round trip is an RTT."""
        self._check_open()
        return await ask(self._dispatch, self.id, node_id, timeout)

    async def services(self, capability: str | None = None, timeout: float = 2.0) -> dict[str, dict[str, Any]]:
        """Each capability in the registry (or only ``capability``), as the NATS
        services framework gives its endpoints: ``providers`` (agent, node,
        requests handled, errors, average_ms, running, inbox; ``error`` for a
        provider whose node did not answer within ``timeout`` s), and totals."""
        self._check_open()
        return await collect(self.registry, lambda node, wait: ask(self._dispatch, self.id, node, wait),
                             capability, timeout)

    # -- waiting ---------------------------------------------------------

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every joined peer has acknowledged this node's latest record.

        Returns False if ``timeout`` (default ``settle_timeout``) ran out first.
        """
        return await self._watch.settled(
            lambda: self._closed or self._mesh.is_settled(), self.settle_timeout if timeout is None else timeout
        ) and not self._closed

    async def wait_acked(self, timeout: float | None = None) -> bool:
        """Wait until every QoS 1/2 message this node sent is acknowledged
        (or dead-lettered); False if ``timeout`` (default: none) ran out first."""
        mesh = self._mesh
        return await self._watch.settled(lambda: self._closed or mesh.all_acked(), timeout) and mesh.all_acked()

    async def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        """Wait until every given agent id is in the registry; Timeout otherwise."""
        for agent_id in agent_ids:
            if not isinstance(agent_id, str):
                raise InvalidMessage(f"wait_for_agents takes agent ids as arguments, wait_for_agents('a', 'b'), "
                                     f"got {agent_id!r}")
        await self.wait_until(
            lambda: all(self.registry.node_of(a) for a in agent_ids), timeout, f"agents {agent_ids} did not appear"
        )

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Poll ``predicate`` until true; Timeout after ``timeout`` s (real time)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"{what} within {timeout} s")
            await asyncio.sleep(min(0.01, remaining))


for _name in ("observe", "events", "stats", "peer_stats", "services", "settled", "wait_acked", "wait_for_agents",
              "wait_until"):
    getattr(WatchCalls, _name).__qualname__ = f"Node.{_name}"  # what messages naming the caller's API say
