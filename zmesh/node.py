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
import os
import socket
import time
from types import TracebackType
from typing import Any, Callable, Iterable, Mapping, Sequence

from ._engine.identity import parse_policy
from ._runtime.context import current_trace_id, trace_context
from ._runtime.agent_port import AgentPort
from ._runtime.config import RuntimeConfig, check_agent_options, check_node_options
from ._runtime.dispatch import Dispatch
from ._runtime.meshes import mesh_config, open_mesh
from ._runtime.port import MeshPort
from ._runtime.inbox import DEFAULT_CONCURRENCY, DEFAULT_INBOX, DEFAULT_INBOX_BYTES
from ._runtime.loop_watch import DEFAULT_BLOCK_WARNING, unwatch_loop, watch_loop
from ._runtime.run import track, untrack
from ._runtime.routes import Routes
from ._runtime.watch import Watch
from ._tracing.dispatch import make_dispatch
from ._node_watch import WatchCalls
from .agent import Agent
from .clock import Clock, SystemClock
from .deadletters import DeadLetters
from .errors import AgentExists, NodeClosed, ZmeshError
from .liveness import LivenessConfig
from .quotas import Quotas
from .qos import QosLimits
from .registry import Registry, check_meta, check_will
from .security import TrustSpec, resolve_security, trust_store
from .store import SqliteStore, Store
from .transport import default_transport, make_transport, transport_class
from .transport.base import Transport
from .transport.message import MessageTransport

__all__ = ["Node", "current_trace_id", "trace_context"]

log = logging.getLogger("zmesh")

class Node(WatchCalls):
    """One member of a mesh. Use as ``async with zmesh.Node("lab") as node``.

    Every argument but ``mesh`` is keyword-only:

    ``mesh``
        The mesh's name: only nodes with the same mesh name talk.
    ``name``
        This node's id, unique in the mesh; a node restarted with the same
        name replaces its old incarnation. Default (None): computed, as
        ``host-pid-random``.
    ``transport``
        ``"zmq"``, ``"inproc"`` (nodes of one process), a broker's URL
        (``"nats://127.0.0.1:4222"``, ``"mqtt://127.0.0.1:1883"``, see
        docs/transports.md) or a Transport.
        Default (None): ``$ZMESH_TRANSPORT``, else ``"zmq"``.
    ``seeds``
        Router endpoints (``node.endpoint``) of any members to join through;
        each is knocked on until it answers (a warning is logged if it does not).
    ``interfaces``
        Where a ZeroMQ node listens and looks for peers: ``"local"``
        (127.0.0.1), ``"lan"``, or interface names or addresses. Default
        (None): ``$ZMESH_INTERFACES``, else local-only.
    ``discovery``
        mDNS discovery on those interfaces: True, False, or None (default:
        on where the transport can discover, i.e. for ZeroMQ).
    ``clock``
        Drives timeouts, TTLs, liveness and timestamps (see
        :class:`zmesh.FakeClock`). Default (None): the system clock.
    ``max_payload``
        The largest encoded message (bytes, all fields included) this node
        accepts; peers learn it and check what they send here against it.
    ``dead_letter_capacity``
        How many dead letters ``node.dead_letters`` keeps (oldest evicted).
    ``liveness``
        Heartbeat and expiry timing (:class:`zmesh.LivenessConfig`).
        Default (None): ``LivenessConfig()``.
    ``settle_timeout``
        Seconds ``settled()``, ``subscribe()`` and ``agent.close()`` wait for
        every peer's acknowledgement, and a ``send`` without a timeout waits
        for a target the node is still learning of.
    ``workers``
        Threads for plain ``def`` handlers. Default (None): each agent gets
        its own pool, as many threads as its ``concurrency``; an int N: one
        pool of N threads shared by all the node's agents.
    ``store``
        A file path, or a :class:`zmesh.store.Store`: keeps unacknowledged
        QoS 1/2 messages and the ids of handled QoS 2 messages across
        restarts. Default (None): in memory only. A path must be in a
        directory only its owner can write (StoreError otherwise); the file
        is created mode 0600.
    ``qos_limits``
        A :class:`zmesh.QosLimits`: the longest qos >= 1 ttl, and how many
        unacknowledged messages (and bytes) this node keeps per target agent
        and per sending agent. Default (None): ``QosLimits()``.
    ``port``, ``pub_port``
        Fix the port of the router endpoint (what others name as a seed) and
        of the publisher endpoint (peers learn it in the handshake); 0, the
        default, picks a free one. ZeroMQ only; AddressInUse if taken.
    ``encoder``, ``decoder``
        ``encoder`` converts payload objects of types zmesh does not carry (a
        dataclass, a Pydantic model) into ones it does; ``decoder`` is called
        with every dict of a received payload, like
        ``json.loads(object_hook=)`` (see "What travels as what" in the guide).
    ``tracing``
        True (or a TracerProvider): an OpenTelemetry span for every send,
        request, delegate, handoff, broadcast and handler run; needs the
        ``otel`` extra (see "Tracing" in the guide).
    ``key``, ``trusted``, ``insecure``
        ``key`` (a ``NAME.key_secret`` from ``zmesh keygen``; default
        ``$ZMESH_KEY``) turns on CurveZMQ: every connection is encrypted and
        only ``trusted`` public keys (a directory of ``.key`` files,
        comma-separated Z85 keys, or a list; default ``$ZMESH_TRUSTED``; this
        node's own key is always trusted) may connect. Without a key a node
        may only listen on loopback, unless ``insecure=True``. In keyed mode a
        node name and an agent id belong to the key that first used them (or,
        for a name, to its ``NAME.key`` in ``trusted``).
    ``policy``
        Keyed only: the agent ids and topics each key may use, by public key,
        node name or ``"*"``: ``{"worker": {"agents": ["worker-*"],
        "topics": ["jobs.>"]}}``. See docs/security.md, *Identities*.
    ``block_warning``
        A handler that blocks this node's event loop longer than this many
        seconds is named in one warning (once per handler); None: never.
    ``quotas``
        How much of this node one peer and one key may take: nodes, agents,
        record bytes and record rates (:class:`zmesh.Quotas`; a peer over one
        is cut off). Default (None): ``Quotas()``. ZeroMQ and in-process only.
    """

    def __init__(
        self,
        mesh: str,
        *,
        name: str | None = None,
        transport: str | Transport | MessageTransport | None = None,
        seeds: Iterable[str] = (),
        interfaces: str | Sequence[str] | None = None,
        discovery: bool | None = None,
        clock: Clock | None = None,
        max_payload: int = 1 << 20,
        dead_letter_capacity: int = 1024,
        liveness: LivenessConfig | None = None,
        settle_timeout: float = 5.0,
        workers: int | None = None,
        store: str | os.PathLike[str] | Store | None = None,
        qos_limits: QosLimits | None = None,
        port: int = 0,
        pub_port: int = 0,
        encoder: Callable[[Any], Any] | None = None,
        decoder: Callable[[dict[Any, Any]], Any] | None = None,
        tracing: Any = False,
        key: str | os.PathLike[str] | None = None,
        trusted: TrustSpec | None = None,
        insecure: bool = False,
        policy: Mapping[str, Mapping[str, Any]] | None = None,
        block_warning: float | None = DEFAULT_BLOCK_WARNING,
        quotas: Quotas | None = None,
    ) -> None:
        check_node_options(mesh, name, max_payload, workers, block_warning, encoder, decoder)
        self.block_warning = block_warning
        self.mesh = mesh
        self.id = name or f"{socket.gethostname()[:24]}-{os.getpid()}-{os.urandom(6).hex()}"
        self.incarnation = "%016x%s" % (time.time_ns(), os.urandom(3).hex())
        self.key = f"{self.id}|{self.incarnation}"
        self.clock: Clock = clock or SystemClock()
        self.max_payload = max_payload
        self.liveness_config = liveness or LivenessConfig()
        self.settle_timeout = settle_timeout
        self.interfaces = interfaces
        self.discovery_enabled = discovery
        if store is not None and not isinstance(store, Store):
            store = SqliteStore(store)
        self.store: Store | None = store
        if transport is None:
            transport = default_transport()
        # ZMESH_KEY/ZMESH_TRUSTED apply to a transport with keys that the node makes itself.
        env_keys = isinstance(transport, str) and transport_class(transport).capabilities.keys
        self._security = resolve_security(key, trusted, insecure, None if env_keys else {})
        rules = parse_policy(policy)
        if rules and not self._security.keyed:
            raise ValueError("policy needs keys (key=..., trusted=...): without them nobody's key is known")
        self.transport = make_transport(transport, interfaces, port, pub_port, self._security)
        config = mesh_config(mesh, self.id, self.incarnation, max_payload, self.liveness_config, self.transport,
                             self.clock, store, encoder, decoder, self._security, rules, quotas,
                             qos_limits or QosLimits())
        runtime = RuntimeConfig(self.id, mesh, self.clock, settle_timeout, dead_letter_capacity, workers)
        self._agents: dict[str, Agent] = {}
        self._watch = Watch(self.id)
        def make_sink(mesh: MeshPort) -> Dispatch:
            return make_dispatch(tracing, runtime, mesh, self._agents, self._watch, self.stats)

        self._mesh = open_mesh(config, self.transport, self.clock, self._watch, seeds, make_sink)
        self._dispatch = self._mesh.sink
        self._agent_port = AgentPort(self._dispatch, self._agent_changed, self._remove_agent,
                                     lambda: self._closed, self.settled)
        self.registry: Registry = self._mesh.registry
        self.max_frame = self._mesh.max_frame
        self.dead_letters: DeadLetters = self._dispatch.dead_letters
        self._started = False
        self._closed = False
        self._closing: asyncio.Future[None] | None = None  # done once close() has ended
        self._started_at: float | None = None

    # -- lifecycle -------------------------------------------------------

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the transport, join through seeds and discovery.

        Starting a started node does nothing; starting a closed one raises
        NodeClosed (a node is not restarted: create a new Node).
        """
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed and cannot be started again; create a new Node")
        if self._started:
            return
        loop = asyncio.get_running_loop()
        self._started = True
        self._started_at = self.clock.monotonic()
        try:
            await self._mesh.start(loop)
        except ZmeshError:
            self._closed = True
            raise
        if self.block_warning is not None:
            watch_loop(self, self.block_warning)
        track(self, loop)  # zmesh.run closes it on SIGTERM/SIGINT
        await self._mesh.discover(self.discovery_enabled)
        self._mesh.pump()

    async def close(self) -> None:
        """Say goodbye to every peer, fail what is pending, release sockets.

        May be called from inside a handler: that handler is not cancelled.
        """
        if self._closed:
            # Closing already (zmesh.run's signal handler, say): wait until it is done, so what
            # the caller tears down next (an SDK client) is not torn down under running handlers.
            # A handler of this node returns at once: the first close waits for it to end.
            if self._closing is not None and not self._dispatch.tasks.runs(asyncio.current_task()):
                await asyncio.shield(self._closing)
            return
        self._closed = True
        self._closing = asyncio.get_running_loop().create_future()
        try:
            self._dispatch.close()
            untrack(self)
            unwatch_loop(self)
            await self._mesh.leave()
            self._dispatch.wake_all()
            await self._dispatch.tasks.cancel_all()
            await self._mesh.close(self._started)
            self._watch.end()
        finally:
            self._closing.set_result(None)

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
        return self._mesh.peers

    @property
    def joining(self) -> bool:
        """Is this started node still knocking on, or shaking hands with, a
        member it was given (a seed) or heard of? The first member's HELLO
        names the others; until each has answered, the registry misses them.
        A seed that is down keeps this True while it is knocked on (and is
        logged as a warning after a few knocks); a lost peer knocked on again
        in case it comes back does not."""
        return not self._closed and self._mesh.joining

    @property
    def uptime(self) -> float:
        """Seconds since :meth:`start` on the node's clock (0.0 before)."""
        return 0.0 if self._started_at is None else self.clock.monotonic() - self._started_at

    @property
    def public_key(self) -> str | None:
        """This node's CurveZMQ public key (Z85), or None without a key."""
        return self.transport.public_key

    @property
    def trusted(self) -> frozenset[str]:
        """The public keys this node admits now (empty without a key)."""
        return self._security.trusted.keys if self._security.trusted is not None else frozenset()

    def trust(self, *keys: str | bytes) -> None:
        """Admit these public keys (Z85) from now on, without a restart."""
        self._trust_changed(trust_store(self._security).trust(*keys), frozenset())

    def distrust(self, *keys: str | bytes) -> None:
        """Stop admitting these keys: new connections are refused, frames on
        old ones dropped, and the peers that joined with them leave."""
        self._trust_changed(frozenset(), trust_store(self._security).distrust(*keys))

    def reload_trusted(self) -> tuple[frozenset[str], frozenset[str]]:
        """Read the ``trusted`` directories and files again (a ``.key`` added
        or deleted) and apply the change; returns (admitted, revoked)."""
        admitted, revoked = trust_store(self._security).reload()
        self._trust_changed(admitted, revoked)
        return admitted, revoked

    def _trust_changed(self, admitted: frozenset[str], revoked: frozenset[str]) -> None:
        if not self._closed and (admitted or revoked):
            self._mesh.trust_changed(admitted, revoked, self._started)

    def peer_endpoint(self, node_id: str) -> str | None:
        """The router endpoint this node dials for peer ``node_id`` (None: not a peer)."""
        return self._mesh.peer_endpoint(node_id)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._started else "new")
        return f"<zmesh.Node {self.id!r} mesh={self.mesh!r} {self.transport.name} {state}>"

    def connect(self, endpoint: str) -> None:
        """Join the mesh through a member's router endpoint (a seed).

        Raises TransportError at once for an endpoint that cannot be one.
        """
        self._check_open()
        self._mesh.connect(endpoint)

    def _check_open(self) -> None:
        if self._closed:
            raise NodeClosed(f"node {self.id!r} is closed")

    # -- agents ----------------------------------------------------------

    def agent(
        self,
        agent_id: str,
        *,
        capabilities: Iterable[str] = (),
        concurrency: int = DEFAULT_CONCURRENCY,
        inbox_size: int = DEFAULT_INBOX,
        inbox_bytes: int = DEFAULT_INBOX_BYTES,
        meta: Mapping[str, Any] | None = None,
        will: tuple[str, Any] | None = None,
    ) -> Agent:
        """Register an agent on this node; AgentExists if the id is taken mesh-wide.

        An id is 1-256 printable characters without spaces, ``.``, ``*`` or
        ``>`` (InvalidMessage otherwise).

        At most ``concurrency`` of its handlers run at once; other messages
        wait in its inbox (priority 0 first), which holds at most
        ``inbox_size`` messages and about ``inbox_bytes`` bytes. Senders
        wait for room (flow control), so only broadcasts to a subscriber
        that cannot keep up, or more senders than the inbox holds windows
        for, are ever dropped, and they are counted.

        ``meta``: a small map the agent shows the mesh (``registry.agents()``),
        e.g. its model or cost: at most 16 names, each value a string of at
        most 256 characters, a number, a bool or None (``agent.meta = ...``
        changes it).

        ``will``: a ``(topic, payload)`` the mesh broadcasts for the agent
        if its node goes without a goodbye (it is killed, loses the network
        or stalls past its peers' patience): one surviving node publishes
        it, from its node address. Closing the agent or the node says
        goodbye; ``agent.will = ...`` changes it, None clears it.
        """
        self._check_open()
        caps = check_agent_options(agent_id, capabilities, concurrency, inbox_size, inbox_bytes)
        own_meta = check_meta(meta)
        own_will = check_will(will)
        if agent_id in self._agents:
            raise AgentExists(f"agent {agent_id!r} is already registered on this node")
        other = self.registry.node_of(agent_id)
        if other is not None:
            raise AgentExists(f"agent {agent_id!r} is already registered on node {other!r}")
        routes = Routes()
        agent = Agent(self, self._agent_port, agent_id, caps, routes, own_meta, own_will)
        self._agents[agent_id] = agent
        self._dispatch.delivery.add_agent(agent_id, routes, concurrency, inbox_size, inbox_bytes)
        self._agent_changed(agent)
        return agent

    @property
    def agents(self) -> dict[str, Agent]:
        """The agents hosted by this node, by id."""
        return dict(self._agents)

    def _agent_changed(self, agent: Agent) -> None:
        if self._agents.get(agent.id) is agent:
            self._mesh.set_agent(agent.id, agent.capabilities, frozenset(agent.subscriptions), agent.meta,
                                 agent.will)

    def _remove_agent(self, agent_id: str) -> None:
        if self._agents.pop(agent_id, None) is not None:
            self._dispatch.delivery.remove_agent(agent_id)
            self._mesh.remove_agent(agent_id)
