"""A mesh node: the asyncio driver of the protocol engine.

The engine (:mod:`zmesh._engine`) holds the whole protocol and does no I/O.
The node feeds it what the transport received, what agents ask for, and the
time on the node's clock; then it carries out what the engine returns:
frames to send, links to open, handlers to run, requests to resolve, events
to report. Every protocol timer (heartbeats, expiry, knocks, request
deadlines) is one timer on the node's clock at ``engine.next_deadline()``,
so a :class:`~zmesh.FakeClock` drives all of them. See docs/protocol.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Sequence

from ._context import current_trace_id, trace_context
from ._dispatch import Dispatch
from ._engine import Engine, EngineConfig
from ._engine import effects as fx
from ._watch import Watch
from .agent import Agent
from .clock import Clock, SystemClock, TimerHandle
from .deadletters import DeadLetters
from .errors import AgentExists, NodeClosed, Timeout, TransportError, ZmeshError
from .liveness import LivenessConfig
from .observer import Observer
from .registry import MeshEvent, Registry
from .transport import make_transport
from .transport.base import Link, Transport

if TYPE_CHECKING:
    from .discovery import MdnsDiscovery

__all__ = ["Node", "current_trace_id", "trace_context"]

log = logging.getLogger("zmesh")

_SEND, _DELIVER, _REPLIED, _FAILED = fx.SEND, fx.DELIVER, fx.REPLIED, fx.FAILED

#: The counters of ``Node.stats()``; each is there, at 0, before it first moves.
COUNTERS = (
    "messages_sent", "messages_received", "requests_sent", "broadcasts", "late_replies",
    "handled", "handler_errors", "frames_sent", "frames_received", "bytes_sent", "bytes_received",
    "frames_published", "bytes_published", "heartbeats_published", "items_to_departed_peers",
    "events_overflowed",
)


def _check_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > 64 or "|" in value:
        raise ValueError(f"{what} name must be 1-64 characters without '|', got {value!r}")


class Node:
    """One member of a mesh. Use as ``async with zmesh.Node("lab") as node``.

    ``mesh`` names the mesh: only nodes with the same mesh name talk. ``name``
    is this node's id, unique in the mesh (default: host-pid-random); a node
    restarted with the same name replaces its old incarnation. ``transport``
    is ``"zmq"`` (default), ``"inproc"`` or a Transport. ``seeds`` are router
    endpoints of any members to join through. ``clock`` drives timeouts, TTLs,
    liveness and timestamps (see :class:`zmesh.FakeClock`). ``max_payload``
    caps the encoded payload of one message (bytes).
    """

    def __init__(
        self,
        mesh: str,
        *,
        name: str | None = None,
        transport: str | Transport = "zmq",
        seeds: Iterable[str] = (),
        interfaces: str | Sequence[str] | None = None,
        discovery: bool | None = None,
        clock: Clock | None = None,
        max_payload: int = 1 << 20,
        dead_letter_capacity: int = 1024,
        liveness: LivenessConfig | None = None,
        settle_timeout: float = 5.0,
    ) -> None:
        _check_name("mesh", mesh)
        if name is not None:
            _check_name("node", name)
        if not isinstance(max_payload, int) or max_payload < 1:
            raise ValueError("max_payload must be a positive number of bytes")
        self.mesh = mesh
        self.id = name or f"{socket.gethostname()[:24]}-{os.getpid()}-{os.urandom(6).hex()}"
        self.incarnation = "%016x%s" % (time.time_ns(), os.urandom(3).hex())
        self.key = f"{self.id}|{self.incarnation}"
        self.clock: Clock = clock or SystemClock()
        # The system clock's monotonic() is time.monotonic: call it directly on the hot path.
        self._now: Callable[[], float] = time.monotonic if type(self.clock) is SystemClock else self.clock.monotonic
        self.max_payload = max_payload
        self.liveness_config = liveness or LivenessConfig()
        self.settle_timeout = settle_timeout
        self.interfaces = interfaces
        self.discovery_enabled = discovery
        self.transport = make_transport(transport, interfaces)
        caps = self.transport.capabilities
        if caps.level != "frame":
            raise TransportError(
                f"transport {self.transport.name!r} routes whole messages (level {caps.level!r}); "
                "this version of zmesh drives frame-level transports only"
            )
        self._engine = Engine(
            EngineConfig(
                mesh=mesh,
                node_id=self.id,
                incarnation=self.incarnation,
                max_payload=max_payload,
                liveness=self.liveness_config if caps.peers_can_vanish else None,
                choose=self.transport.choose,
                wall_clock=self.clock.time,
            )
        )
        self.max_frame = self._engine.max_frame
        self.registry: Registry = self._engine.registry
        self._dispatch = Dispatch(self, self._engine, dead_letter_capacity)
        self.dead_letters: DeadLetters = self._dispatch.dead_letters
        self._seed_endpoints = [seeds] if isinstance(seeds, str) else list(seeds)
        for endpoint in self._seed_endpoints:
            self.transport.check_endpoint(endpoint)  # a typo fails here, not silently later
        self._agents: dict[str, Agent] = {}
        self._links: dict[int, Link] = {}
        self._watch = Watch(self.id)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: TimerHandle | None = None
        self._timer_at = math.inf
        self._flush_scheduled = False
        self._in_drain = False
        self._discovery: MdnsDiscovery | None = None
        self._refreshing = False
        self._started = False
        self._closed = False

    # -- lifecycle -------------------------------------------------------

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the transport, join through seeds and discovery."""
        if self._started:
            return
        if self._closed:
            raise NodeClosed("a closed node cannot be restarted; create a new Node")
        self._loop = asyncio.get_running_loop()
        self._started = True
        try:
            await self.transport.start(self, self.key, self.mesh, self._loop)
        except ZmeshError:
            self._closed = True
            raise
        self._engine.start(self.transport.router_endpoints, self.transport.pub_endpoints, self.clock.monotonic())
        # Join one iteration later: agents registered right after start() then
        # travel in the first HELLO, so a restarted node is seen as one change.
        self._loop.call_soon(self._connect_seeds)
        await self._start_discovery()
        self._pump()

    async def _start_discovery(self) -> None:
        if self.transport.capabilities.discovery != "mdns" or self.discovery_enabled is False:
            return
        from ._discovery_glue import start_mdns

        self._discovery = await start_mdns(self, self.transport)

    def _connect_seeds(self) -> None:
        if not self._closed:
            for endpoint in self._seed_endpoints:
                self.connect(endpoint)

    async def close(self) -> None:
        """Say goodbye to every peer, fail what is pending, release sockets.

        May be called from inside a handler: that handler is not cancelled.
        """
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._discovery is not None:
            await self._discovery.close()
        self._engine.close(self.clock.monotonic())
        self._pump()
        await self._dispatch.tasks.cancel_all()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._watch.wake()
        for link in self._links.values():
            link.close()
        self._links.clear()
        if self._started:
            await self.transport.close()
        self._watch.end()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def endpoint(self) -> str:
        """This node's direct (ROUTER) endpoint; give it to others as a seed."""
        return self.transport.router_endpoint

    @property
    def pub_endpoint(self) -> str:
        return self.transport.pub_endpoint

    @property
    def peers(self) -> list[str]:
        """Ids of the peers that have fully joined."""
        return self._engine.peers

    def peer_endpoint(self, node_id: str) -> str | None:
        """The router endpoint this node dials for peer ``node_id`` (None: not a peer)."""
        peer = self._engine.members.peers.get(node_id)
        return peer.router if peer is not None else None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._started else "new")
        return f"<zmesh.Node {self.id!r} mesh={self.mesh!r} {self.transport.name} {state}>"

    def connect(self, endpoint: str) -> None:
        """Join the mesh through a member's router endpoint (a seed).

        Raises TransportError at once for an endpoint that cannot be one.
        """
        self._check_open()
        self.transport.check_endpoint(endpoint)
        # Peers advertise addresses; spelled that way, the seed is recognised
        # as answered when its node's HELLO lists the same endpoint.
        self._engine.connect(endpoint.replace("://localhost:", "://127.0.0.1:"), self.clock.monotonic())
        self._pump()

    def _check_open(self) -> None:
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed")

    # -- agents ----------------------------------------------------------

    def agent(self, agent_id: str, *, capabilities: Iterable[str] = ()) -> Agent:
        """Register an agent on this node; AgentExists if the id is taken mesh-wide."""
        self._check_open()
        if not isinstance(agent_id, str) or not agent_id or len(agent_id) > 256:
            raise ValueError(f"agent id must be a non-empty string of at most 256 characters, got {agent_id!r}")
        caps = tuple(capabilities)
        if any(not isinstance(c, str) or not c for c in caps):
            raise ValueError(f"capabilities must be non-empty strings, got {caps!r}")
        if agent_id in self._agents:
            raise AgentExists(f"agent {agent_id!r} is already registered on this node")
        other = self.registry.node_of(agent_id)
        if other is not None:
            raise AgentExists(f"agent {agent_id!r} is already registered on node {other!r}")
        agent = Agent(self, self._dispatch.port, agent_id, caps)
        self._agents[agent_id] = agent
        self._agent_changed(agent)
        return agent

    @property
    def agents(self) -> dict[str, Agent]:
        """The agents hosted by this node, by id."""
        return dict(self._agents)

    def _agent_changed(self, agent: Agent) -> None:
        if self._agents.get(agent.id) is agent:
            self._engine.set_agent(agent.id, agent.capabilities, frozenset(agent.subscriptions))
            self._pump()

    def _remove_agent(self, agent_id: str) -> None:
        if self._agents.pop(agent_id, None) is not None:
            self._engine.remove_agent(agent_id)
            self._pump()

    # -- driving the engine ----------------------------------------------

    def _pump(self) -> None:
        """Carry out everything the engine asked for, then arm its timer."""
        engine = self._engine
        while engine.effects:
            effects, engine.effects = engine.effects, []
            links, dispatch = self._links, self._dispatch
            for effect in effects:
                op = effect[0]
                if op == _SEND:
                    link = links.get(effect[1])
                    if link is not None:
                        link.send(effect[2])
                elif op == _DELIVER:
                    dispatch.deliver(effect[1], effect[2], effect[3])
                elif op == _REPLIED:
                    dispatch.resolved(effect[1], effect[2], None)
                elif op == _FAILED:
                    dispatch.resolved(effect[1], None, effect[2])
                else:
                    self._rare_effect(op, effect)
        if not self._flush_scheduled and not self._in_drain and engine.has_queued and self._loop is not None:
            self._flush_scheduled = True
            engine.hold = True
            self._loop.call_soon(self._flush)
        if engine.earliest < self._timer_at and self._started and not self._closed:
            self._arm_timer(engine.earliest)

    def _arm_timer(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self.clock.call_later(max(0.0, deadline - self.clock.monotonic()), self._on_timer)

    def _rare_effect(self, op: int, effect: tuple[Any, ...]) -> None:
        if op == fx.PUBLISH:
            self.transport.publish(effect[1])
        elif op == fx.OPEN:
            self._links[effect[1]] = self.transport.open_link(effect[2])
        elif op == fx.CLOSE:
            link = self._links.pop(effect[1], None)
            if link is not None:
                link.close()
        elif op == fx.SUBSCRIBE:
            self.transport.subscribe(effect[1])
        elif op == fx.UNSUBSCRIBE:
            self.transport.unsubscribe(effect[1])
        elif op == fx.ANNOUNCE:
            self.transport.announce()
        elif op == fx.EVENT:
            self._watch.emit(effect[1])
        elif op == fx.ACKED:
            self._watch.wake()
        elif op == fx.DEAD:
            self._dispatch.dead(effect[1], effect[2], effect[3], effect[4])
        elif op == fx.REDISCOVER:
            refresh = getattr(self._discovery, "refresh", None)
            if refresh is not None and self._loop is not None and not self._closed and not self._refreshing:
                self._refreshing = True  # one at a time: K peers expiring at once ask K times
                task = self._loop.create_task(refresh())
                self._tasks.add(task)
                task.add_done_callback(self._refresh_done)
        else:  # pragma: no cover - an engine/driver mismatch
            raise AssertionError(f"unknown effect {effect!r}")

    def _refresh_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._refreshing = False
        if not task.cancelled() and task.exception() is not None:
            log.warning("zmesh %s: mDNS refresh failed: %r", self.id, task.exception())

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        if self._closed:
            return
        self._engine.tick(self.clock.monotonic())
        self._pump()

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._engine.flush()
        self._pump()

    # -- transport callbacks (TransportHost) -------------------------------

    # A drain feeds frames in a batch; what they cause (handlers to run,
    # replies to send) is carried out once, when the batch ends.

    def on_direct_frame(self, key: str, frame: bytes) -> None:
        self._in_drain = True
        self._engine.hold = True
        self._engine.receive_direct(key, frame, self._now())

    def on_pub_frame(self, frame: bytes) -> None:
        self._in_drain = True
        self._engine.hold = True
        self._engine.receive_published(frame, self._now())

    def on_drained(self) -> None:
        """After a batch of frames: run what they caused, then send, one frame per peer."""
        engine = self._engine
        if engine.effects:
            self._pump()
        self._in_drain = False
        if not self._flush_scheduled:
            engine.flush()
            if engine.effects:
                self._pump()

    def on_subscriber_ready(self, key: str) -> None:
        self._engine.subscriber_ready(key, self.clock.monotonic())
        self._pump()

    def on_transport_drop(self, reason: str, where: str) -> None:
        self._engine.drop(reason, where)

    def on_discovered(self, router_endpoint: str) -> None:
        """Transport or discovery callback: a member may live at this endpoint."""
        if self._closed or router_endpoint == self.endpoint:
            return
        self._engine.discovered(router_endpoint, self.clock.monotonic())
        self._pump()

    # -- observation -----------------------------------------------------

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(receipt)`` for every interaction; returns a function that stops it."""
        return self._dispatch.observe(callback)

    def events(self, maxsize: int = 1000) -> AsyncIterator[MeshEvent]:
        """Async iterator of MeshEvents (peer/agent joined/left, evasive, restarted)."""
        return self._watch.events(maxsize)

    def stats(self) -> dict[str, Any]:
        """Counters: traffic, drops by reason, pending requests, peers, dead letters."""
        engine = self._engine
        out: dict[str, Any] = dict.fromkeys(COUNTERS, 0)  # every counter, from the start
        out.update(engine.stats)
        out.update(self._watch.stats)
        out.update(self._dispatch.stats)
        out["dropped"] = dict(engine.dropped)
        out["dropped_total"] = sum(engine.dropped.values())
        out["pending_requests"] = len(engine.requests)
        out["peers"] = len(engine.peers)
        out["agents"] = len(self._agents)
        out["dead_letters"] = self.dead_letters.total
        out["transport"] = self.transport.stats()
        return out

    # -- waiting ---------------------------------------------------------

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every joined peer has acknowledged this node's latest record.

        Returns False if ``timeout`` (default ``settle_timeout``) ran out first.
        """
        return await self._watch.settled(
            lambda: self._closed or self._engine.is_settled(), self.settle_timeout if timeout is None else timeout
        ) and not self._closed

    async def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        """Wait until every given agent id is in the registry; Timeout otherwise."""
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
