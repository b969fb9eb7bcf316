"""The frame mesh (internal): the protocol engine and its asyncio driver
behind :class:`~zmesh._runtime.port.MeshPort`, over a frame-level transport
(ZeroMQ, in-process).

The engine speaks the mesh protocol (handshake, registry, credit, QoS,
liveness) over the frames the transport moves; the
:class:`~zmesh._runtime.driver.Driver` feeds it and carries out its effects.
This class adds what the runtime asks for: each call goes to the engine and,
where it changes what goes out, carries that out (at once, or when the
current drain ends).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from .._engine import Engine, EngineConfig
from ..clock import Clock
from ..message import Message
from ..registry import Will
from ..transport.base import Transport
from .driver import Driver
from .port import MeshSink, RequestKey
from .watch import Watch

__all__ = ["FrameMesh", "LEARN_WINDOW", "DISCOVERY_WINDOW"]

S = TypeVar("S", bound=MeshSink)

#: A target no node hosts may be one this node is about to learn of: a send
#: or request to it waits (within its own timeout) while the node joins, and
#: for LEARN_WINDOW s after a peer joined, whose agents may be a record update
#: behind; with mDNS, for the node's first DISCOVERY_WINDOW s (announcing and
#: hearing answers takes about 1.2 s). Real seconds, whatever the node's clock:
#: it is how long the network takes, not a protocol timer.
LEARN_WINDOW = 0.5
DISCOVERY_WINDOW = 3.0


class FrameMesh(Driver, Generic[S]):
    """A :class:`~zmesh._runtime.port.MeshPort` over ``transport``.

    ``make_sink`` makes the runtime side (the dispatch) from this mesh, so
    both are whole when the constructor returns: ``mesh.sink`` is it.
    """

    def __init__(
        self,
        config: EngineConfig,
        transport: Transport,
        clock: Clock,
        watch: Watch,
        seeds: Iterable[str],
        make_sink: Callable[[FrameMesh[S]], S],
    ) -> None:
        engine = Engine(config)
        super().__init__(engine, transport, clock, watch)
        self.registry = engine.registry
        # The engine's own methods where nothing more is owed: one call, not two.
        self.admit: Callable[[str], str | None] = engine.admit
        self.route: Callable[[str], str | None] = engine.route
        self.taken: Callable[[str, str], None] = engine.flow.taken
        self.unhandled: Callable[[str, Message], None] = engine.unhandled
        self.forget_request: Callable[[RequestKey], None] = engine.forget_request
        self._seeds = [seeds] if isinstance(seeds, str) else list(seeds)
        for endpoint in self._seeds:
            transport.check_endpoint(endpoint)  # a typo fails here, not silently later
        self._seeds_pending = bool(self._seeds)  # until start() knocks on them
        self.sink: S = make_sink(self)

    # -- lifecycle -------------------------------------------------------

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the transport and start the engine; the seeds are knocked on
        one loop iteration later, so agents registered right after start()
        travel in the first HELLO (a restarted node is then seen as one change)."""
        engine = self.engine
        await self.transport.start(self, engine.key, engine.mesh, loop)
        engine.start(self.transport.router_endpoints, self.transport.pub_endpoints, self.clock.monotonic())
        self.drive(loop)
        loop.call_soon(self._connect_seeds)

    def _connect_seeds(self) -> None:
        self._seeds_pending = False
        if self.running:
            for endpoint in self._seeds:
                self.connect(endpoint)

    async def discover(self, enabled: bool | None) -> None:
        """Start mDNS where the transport can be discovered, unless ``enabled`` is False."""
        if self.transport.capabilities.discovery != "mdns" or enabled is False:
            return
        from .discovery_glue import start_mdns

        engine = self.engine
        self.discovery = await start_mdns(engine.mesh, engine.node_id, engine.incarnation, self.transport,
                                          self.on_discovered)

    async def leave(self) -> None:
        """Stop discovery and timers, say BYE to every peer, fail what is pending."""
        self.stop()
        if self.discovery is not None:
            await self.discovery.close()
        self.engine.close(self.clock.monotonic())
        self.pump()

    async def close(self, started: bool) -> None:
        """After :meth:`leave` (and the runtime's handlers): release links and sockets."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        self.watch.wake()
        self.close_links()
        if started:
            await self.transport.close()

    # -- membership ------------------------------------------------------

    @property
    def peers(self) -> list[str]:
        return self.engine.peers

    @property
    def joining(self) -> bool:
        return self.running and (self._seeds_pending or self.engine.joining)

    def learning_until(self) -> float:
        if self.joining:
            return math.inf
        until = self.watch.last_joined + LEARN_WINDOW
        if self.discovery is not None:
            until = max(until, self.started_at + DISCOVERY_WINDOW)
        return until

    def connect(self, endpoint: str) -> None:
        self.transport.check_endpoint(endpoint)
        # Peers advertise addresses; spelled that way, the seed is recognised
        # as answered when its node's HELLO lists the same endpoint.
        self.engine.connect(endpoint.replace("://localhost:", "://127.0.0.1:"), self.clock.monotonic())
        self.pump()

    def peer_endpoint(self, node_id: str) -> str | None:
        peer = self.engine.members.peers.get(node_id)
        return peer.router if peer is not None else None

    def trust_changed(self, admitted: frozenset[str], revoked: frozenset[str], started: bool) -> None:
        now = self.clock.monotonic()
        for public_key in revoked if started else ():
            self.engine.revoke(public_key, now)  # says BYE while the link is still open
        self.pump()
        self.transport.trust_changed(admitted, revoked)
        for public_key in admitted if started else ():
            self.engine.readmit(public_key, now)
        self.pump()

    def set_agent(self, agent_id: str, capabilities: tuple[str, ...], subscriptions: frozenset[str],
                  meta: Mapping[str, Any] | None = None, will: Will | None = None) -> None:
        self.engine.set_agent(agent_id, capabilities, subscriptions, meta, will)
        self.pump()

    def remove_agent(self, agent_id: str) -> None:
        self.engine.remove_agent(agent_id)
        self.pump()

    def is_settled(self) -> bool:
        return self.engine.is_settled()

    def all_acked(self) -> bool:
        return not self.engine.reliable.out

    # -- traffic ---------------------------------------------------------

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        self.engine.drop(reason, where, detail)

    def try_send(self, msg: Message, now: float) -> str | None:
        engine = self.engine
        route = engine.send_if_open(msg, now)
        if route and (engine.effects or not self.flush_scheduled):
            self.pump()
        return route

    def send(self, msg: Message, route: str, now: float) -> None:
        engine = self.engine
        engine.send(msg, route, now)
        if engine.effects or not self.flush_scheduled:
            self.pump()

    def end_batch(self) -> None:
        self.engine.flush()
        self.pump()

    def hold(self) -> None:
        self.engine.hold = True

    def request(self, msg: Message, deadline: float, now: float, route: str) -> RequestKey | None:
        """Queue request ``msg``; the caller registers its key, then :meth:`pump`s
        (a local handler may answer within that pump)."""
        return self.engine.request(msg, deadline, now, route)

    def reply(self, request: Message, status: str, payload: Any) -> None:
        self.engine.reply_status(request, status, payload)
        if not self.in_drain:  # a drain sends when it ends
            self.pump()

    def handled(self, origin: str, msg: Message) -> None:
        self.engine.handled(origin, msg)
        if not self.in_drain:  # a drain sends when it ends
            self.pump()

    def broadcast(self, msg: Message) -> int:
        reached = self.engine.broadcast(msg)
        self.pump()
        return reached

    # -- what it tells -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        engine = self.engine
        out: dict[str, Any] = dict(engine.stats)
        out["messages_sent"] = engine.messages_sent  # plain ints: counted once per message
        out["messages_received"] = engine.messages_received
        out["dropped"] = dict(engine.dropped)
        out["dropped_total"] = sum(engine.dropped.values())
        out["pending_requests"] = len(engine.requests)
        out["unacked"] = engine.reliable.unacked
        out["peers"] = len(engine.peers)
        out["transport"] = self.transport.stats()
        return out
