"""One side of a gateway (internal): its node, the proxies it hosts there
for the other side's agents, its relay agent and, when it holds it, the
bridge that carries the other side's subscribers' broadcasts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..agent import Agent, Handoff
from ..errors import AgentExists, NodeClosed
from ..message import Message
from ..node import Node
from ..registry import AgentInfo
from ._paths import ROLE, VIA, bridge_id, path_of, proxy_meta, relay_id

__all__ = ["DEFAULT_TIMEOUT", "PROXY_CONCURRENCY", "Side"]

log = logging.getLogger("zmesh.gateway")

#: Handlers a proxy runs at once: each is a request or stream in flight through the gateway.
PROXY_CONCURRENCY = 256
#: Seconds a relayed request may take when its message has no ttl.
DEFAULT_TIMEOUT = 30.0


def _ignore(msg: Message) -> None:
    """A proxy's subscriptions put its agent's patterns in the registry; the bridge relays them once."""


class Side:
    """A gateway's node in one domain, and what it hosts there."""

    def __init__(self, node: Node, domain: str) -> None:
        self.node = node
        self.domain = domain
        self.other: Side = self
        self.proxies: dict[str, Agent] = {}
        self.relay: Agent | None = None
        self.bridge: Agent | None = None
        #: Whether this gateway is the one that stands in (see Gateway: one per pair of domains at a time).
        self.active = False
        self.counts = {"requests": 0, "sends": 0, "broadcasts": 0, "handoffs": 0, "loops_stopped": 0,
                       "takeovers": 0, "not_fitting": 0}
        self._skipped: set[str] = set()

    # -- agents in this side's registry that the other side stands in for ----------------------------

    def wanted(self) -> dict[str, tuple[AgentInfo, list[str]]]:
        """This side's agents the other side should stand in for, with their paths."""
        wanted = {}
        for agent_id, info in self.node.registry.agents().items():
            path = self._path_across(info)
            if path is not None:
                wanted[agent_id] = (info, path)
        return wanted

    def _path_across(self, info: AgentInfo) -> list[str] | None:
        """``info``'s path when the other side should stand in for it; None when not (it is ours, a
        gateway's own agent, or it came from the other side's domain)."""
        if info.node_id == self.node.id or info.meta.get(ROLE):
            return None
        path = path_of(info.meta, self.domain)
        return None if self.other.domain in path else path

    def sender_for(self, agent_id: str) -> Agent:
        """The agent on this side that sends for ``agent_id`` of the other side: its proxy (opened now if
        the registry had not shown it yet), else the relay (an agent of the other side's own domain)."""
        proxy = self.proxies.get(agent_id)
        if proxy is None and self.active:
            info = self.other.node.registry.agents().get(agent_id)
            path = self.other._path_across(info) if info is not None else None
            meta = proxy_meta(info.meta, path) if info is not None and path is not None else None
            if info is not None and meta is not None:
                proxy = self._open(agent_id, info, meta)
        if proxy is not None:
            return proxy
        assert self.relay is not None
        return self.relay

    # -- standing in -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.relay = self.node.agent(relay_id(self.node.id), meta={ROLE: "relay", VIA: self.other.domain})

    async def stand_in(self, wanted: dict[str, tuple[AgentInfo, list[str]]]) -> None:
        """Host a proxy here for each agent of the other side in ``wanted`` that nobody stands in for yet;
        keep ours up to date; close those no longer wanted."""
        await self._close_all([self.proxies.pop(a) for a in list(self.proxies)
                               if a not in wanted or self._claimed_elsewhere(a)])
        patterns: set[str] = set()
        for agent_id, (info, path) in wanted.items():
            patterns |= info.subscriptions
            meta = proxy_meta(info.meta, path)
            if meta is None:
                if agent_id not in self._skipped:
                    self._skipped.add(agent_id)
                    self.counts["not_fitting"] += 1
                    log.warning("gateway: not standing in for %r in %s: its meta and path do not fit in a "
                                "proxy's meta (16 names, 256 characters of path)", agent_id, self.domain)
                continue
            proxy = self.proxies.get(agent_id) or self._open(agent_id, info, meta)
            if proxy is None:
                continue
            proxy.capabilities = info.capabilities
            proxy.meta = meta
            await _follow(proxy, info.subscriptions, _ignore)
        await self._hold_bridge(patterns)

    def _open(self, agent_id: str, info: AgentInfo, meta: dict[str, Any]) -> Agent | None:
        if self.node.registry.node_of(agent_id) is not None:
            return None  # another gateway stands in for it here, or an agent of this side has its id
        try:
            proxy = self.node.agent(agent_id, capabilities=info.capabilities, meta=meta,
                                    concurrency=PROXY_CONCURRENCY)
        except AgentExists:
            return None
        proxy.add_handler(">", _forwarder(self.other, agent_id))
        proxy.on_handoff(_handoff_forwarder(self.other, agent_id, proxy))
        self.proxies[agent_id] = proxy
        self.counts["takeovers"] += 1
        return proxy

    def _claimed_elsewhere(self, agent_id: str) -> bool:
        """Does another node claim our proxy's id too? Ids are taken once per mesh, but two claims can
        cross before the registries tell: a real agent keeps it, and of two proxies the smaller node id's."""
        return any(record.node_id != self.node.id and agent_id in record.agents
                   and (VIA not in record.meta.get(agent_id, {}) or record.node_id < self.node.id)
                   for record in self.node.registry.nodes())

    async def _hold_bridge(self, patterns: set[str]) -> None:
        """Carry broadcasts from this side to the other side's subscribers; one gateway does (the id is one)."""
        if self.bridge is None:
            if not patterns:
                return
            agent_id = bridge_id(self.other.domain)
            if self.node.registry.node_of(agent_id) is not None:
                return
            try:
                self.bridge = self.node.agent(agent_id, meta={ROLE: "bridge", VIA: self.other.domain},
                                              concurrency=PROXY_CONCURRENCY)
            except AgentExists:
                return
            self.bridge.add_handler(">", self._relay_broadcast)
        await _follow(self.bridge, patterns, None)

    async def _relay_broadcast(self, msg: Message) -> None:
        if msg.target:
            return  # only broadcasts come here: nobody addresses the bridge
        info = self.node.registry.agents().get(msg.sender)
        path = path_of(info.meta, self.domain) if info is not None else [self.domain]
        if self.other.domain in path or (info is not None and info.node_id == self.node.id):
            self.counts["loops_stopped"] += 1
            return
        self.counts["broadcasts"] += 1
        await self.other.sender_for(msg.sender).broadcast(msg.topic, msg.payload, priority=msg.priority,
                                                          ttl=msg.ttl, trace_id=msg.trace_id or None)

    async def stand_down(self) -> None:
        """Close every proxy and the bridge: another gateway stands in now."""
        self.active = False
        agents = [*self.proxies.values(), self.bridge]
        self.proxies.clear()
        self.bridge = None
        await self._close_all(agents)

    async def close(self) -> None:
        relay, self.relay = self.relay, None
        self.active = False
        agents = [*self.proxies.values(), self.bridge, relay]
        self.proxies.clear()
        self.bridge = None
        await self._close_all(agents)

    @classmethod
    async def _close_all(cls, agents: list[Agent | None]) -> None:
        # At once: each close waits for the peers to have the record without it (a peer that does not
        # answer holds each for the node's settle_timeout), so one after another would add up.
        await asyncio.gather(*(cls._close(agent) for agent in agents if agent is not None))

    @staticmethod
    async def _close(agent: Agent) -> None:
        try:
            await agent.close()
        except NodeClosed:
            pass


async def _follow(agent: Agent, patterns: frozenset[str] | set[str], handler: Callable[[Message], Any] | None
                  ) -> None:
    """Subscribe ``agent`` to exactly ``patterns``."""
    have = agent.subscriptions
    for pattern in sorted(have - patterns):
        await agent.unsubscribe(pattern)
    for pattern in sorted(set(patterns) - have):
        await agent.subscribe(pattern, handler, inline=handler is not None)


def _remaining(side: Side, msg: Message) -> float:
    """Seconds left of ``msg``'s ttl (its requester stops waiting then); the default without one."""
    if not msg.ttl:
        return DEFAULT_TIMEOUT
    return max(0.05, msg.ttl - max(0.0, side.node.clock.time() - msg.timestamp))


def _forwarder(far: Side, target: str) -> Callable[[Message], Any]:
    """A proxy's handler: what comes to it goes on to ``target`` on the far side, from the sender's
    stand-in there; a request's reply (or stream) comes back as the handler's answer."""

    async def forward(msg: Message) -> Any:
        via = far.sender_for(msg.sender)
        if msg.correlation_id:
            far.counts["requests"] += 1
            reply = await via.delegate(target, msg, timeout=_remaining(far, msg))
            return reply.payload
        far.counts["sends"] += 1
        await via.send(target, msg.topic, msg.payload, qos=msg.qos, priority=msg.priority, ttl=msg.ttl,
                       type=msg.type, trace_id=msg.trace_id or None)
        return None

    return forward


def _handoff_forwarder(far: Side, target: str, proxy: Agent) -> Callable[[Handoff], Any]:
    """A proxy's ``on_handoff``: offer the task on to ``target``; accepted there is accepted here."""

    async def offer(handoff: Handoff) -> bool | str:
        via = far.sender_for(handoff.sender)
        far.counts["handoffs"] += 1
        ttl = _remaining(far, handoff.message) * 0.9  # decided here before the offerer stops waiting
        try:
            result = await via.handoff(target, handoff.task_id, handoff.context, artifacts=handoff.artifacts,
                                       timeout=ttl)
        finally:
            via.complete(handoff.task_id)
        # The proxy is recorded as the owner once this returns: it owns nothing, the far agent does.
        asyncio.get_running_loop().call_later(1.0, proxy.complete, handoff.task_id)
        return True if result.accepted else (result.reason or "refused")

    return offer
