"""The gateway: two nodes, one in each domain, and every agent of each side
stood in for on the other (see zmesh.gateway)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .._follow import follow as follow_nodes
from ..agent import Agent
from ..errors import AgentExists, NodeClosed, Timeout, ZmeshError
from ..node import Node
from ..transport.message import MessageTransport
from ._paths import ROLE, VIA, check_domain, lock_id
from ._side import Side

__all__ = ["JOIN_WAIT", "RESYNC_INTERVAL", "STEP_DOWN_AFTER", "Gateway"]

log = logging.getLogger("zmesh.gateway")

#: Seconds between two looks at both registries when nothing changed (a takeover retried, a race lost).
RESYNC_INTERVAL = 1.0
#: Seconds start() waits for each node to know the members it was told of (a seed that is down: no longer).
JOIN_WAIT = 5.0
#: Seconds a leading gateway keeps the lead while one side's broker is out of reach (a blip is not a
#: takeover); after that it stands down, so a standby that reaches both sides takes over.
STEP_DOWN_AFTER = 2.0


class Gateway:
    """Join the mesh of node ``a`` to the mesh of node ``b``: each agent of one
    side has a proxy on the other, with its id, capabilities, meta and
    subscriptions, that relays every message, request, stream, cancel,
    handoff and broadcast to it and the answers back.

    ``domain_a`` and ``domain_b`` name the two sides: two gateways between
    the same pair (for failover) give the same names, two LANs joined
    through one NATS mesh give their LANs different names. The nodes are
    the caller's: start them first (``async with node_a, node_b,
    Gateway(node_a, node_b, ...)``); the gateway closes only its own agents.
    """

    def __init__(self, a: Node, b: Node, *, domain_a: str, domain_b: str,
                 resync_interval: float = RESYNC_INTERVAL) -> None:
        if not isinstance(a, Node) or not isinstance(b, Node) or a is b:
            raise ValueError("a gateway joins two different nodes")
        if check_domain(domain_a) == check_domain(domain_b):
            raise ValueError(f"the two sides of a gateway need different domain names, got {domain_a!r} twice")
        if not resync_interval > 0:
            raise ValueError(f"resync_interval must be a positive number of seconds, got {resync_interval!r}")
        self.a, self.b = Side(a, domain_a), Side(b, domain_b)
        self.a.other, self.b.other = self.b, self.a
        self._resync_interval = resync_interval
        self._lock_id = lock_id(domain_a, domain_b)
        self._lock: Agent | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._unreachable_since: float | None = None

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        """Stand in for what both sides have now, then follow their registries."""
        if self._tasks:
            return
        for side in (self.a, self.b):
            if side.node.closed:
                raise NodeClosed(f"node {side.node.id!r} is closed")
        for side in (self.a, self.b):
            # Know the members first: a gateway already leading between these domains is one of them.
            with contextlib.suppress(Timeout):
                await side.node.wait_until(_joined(side.node), JOIN_WAIT, "the mesh's members")
            side.start()
        await self.sync()
        following = follow_nodes((self.a.node, self.b.node), self._resync_interval, self._step)
        self._tasks = [asyncio.get_running_loop().create_task(following)]

    @property
    def active(self) -> bool:
        """Whether this gateway stands in (False: it is a standby for another between the same domains)."""
        return self.a.active

    async def sync(self) -> None:
        """Take the lead if nobody has it, or give it up to a gateway that has it too; if leading, bring
        both sides' proxies in line with both registries."""
        if not self._lead():
            if self.a.active:
                log.info("gateway %s: standing down, %s stands in", self.a.node.id,
                         self.a.node.registry.node_of(self._lock_id))
                await self.a.stand_down()
                await self.b.stand_down()
            return
        self.a.active = self.b.active = True
        await self.b.stand_in(self.a.wanted())
        await self.a.stand_in(self.b.wanted())

    def _lead(self) -> bool:
        """Hold the pair's lock agent on side a; of two holders at once the smaller node id keeps it.
        Only a gateway that reaches both sides takes it, and one that has not for STEP_DOWN_AFTER
        seconds gives it up."""
        node, lock_id = self.a.node, self._lock_id
        if not self._reaches_both():
            if self._lock is not None and time.monotonic() - (self._unreachable_since or 0.0) > STEP_DOWN_AFTER:
                log.warning("gateway %s: standing down, a side's broker is out of reach", node.id)
                self._release()
            return self._lock is not None
        if self._lock is None:
            if node.registry.node_of(lock_id) is not None:
                return False
            try:
                self._lock = node.agent(lock_id, meta={ROLE: "lock", VIA: self.b.domain})
            except AgentExists:
                return False
        if any(r.node_id < node.id and lock_id in r.agents for r in node.registry.nodes()):
            self._release()
            return False
        return True

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            self._closing.add(asyncio.get_running_loop().create_task(lock.close()))

    def _reaches_both(self) -> bool:
        """Whether both sides' brokers are in reach (a side without one always is); notes since when not."""
        if all(side.node.transport.reachable for side in (self.a, self.b)
               if isinstance(side.node.transport, MessageTransport)):
            self._unreachable_since = None
            return True
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()
        return False

    async def close(self) -> None:
        """Close the proxies, relays and bridges (the other sides see them leave); not the nodes."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await asyncio.gather(self.a.close(), self.b.close())
        if self._lock is not None:
            with contextlib.suppress(NodeClosed):
                await self._lock.close()
            self._lock = None
        await asyncio.gather(*self._closing, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        """Per side: its domain, the agents it stands in for, whether it holds the bridge, and counts;
        ``active``: whether this gateway stands in."""
        return {"active": self.active, **{side.domain: {"node": side.node.id, "proxies": sorted(side.proxies),
                              "bridge": side.bridge is not None, **side.counts} for side in (self.a, self.b)}}

    async def _step(self) -> bool:
        try:
            await self.sync()
        except NodeClosed:
            return False
        except (ZmeshError, ValueError) as exc:  # e.g. a subscription refused: try again at the next look
            log.warning("gateway: could not bring proxies up to date: %s: %s", type(exc).__name__, exc)
        return True


def _joined(node: Node) -> Callable[[], bool]:
    return lambda: not node.joining
