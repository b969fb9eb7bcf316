"""Blocking facade for scripts and REPLs: the same surface, no async/await.

The node runs on an event loop in a background thread; every call blocks the
calling thread until it is done. Plain-function handlers run in a small
thread pool, so a handler may itself make blocking calls (request another
agent, say) without stalling the mesh::

    import zmesh.sync as zs

    with zs.Node("lab", transport="inproc") as node:
        a = node.agent("a")
        b = node.agent("b")

        @b.on("math.add")
        def add(msg):
            return msg.payload["x"] + msg.payload["y"]

        print(a.request("b", "math.add", {"x": 1, "y": 2}, timeout=5).payload)  # 3

Every method and property takes the parameters of its :class:`zmesh.Node` /
:class:`zmesh.Agent` namesake; where that one is a coroutine, this one waits
for it. See :class:`Node` for the few differences and for what may be called
from where.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from types import TracebackType
from typing import Any, Callable, Coroutine, Iterable, Mapping, Sequence, TypeVar

from .. import node as _node
from .._runtime.handlers import THREAD, handler_mode
from .._runtime.inbox import DEFAULT_CONCURRENCY, DEFAULT_INBOX, DEFAULT_INBOX_BYTES
from .._runtime.loop_watch import DEFAULT_BLOCK_WARNING
from ..agent import Agent as _AsyncAgent
from ..clock import Clock
from ..errors import NodeClosed
from ..liveness import LivenessConfig
from ..quotas import Quotas
from ..observer import Observer
from ..qos import QosLimits
from ..registry import Registry
from ..security import TrustSpec
from ..store import Store
from ..transport.base import Transport
from ..transport.message import MessageTransport
from ._agent import Agent, InPool, copy_docs
from ._deadletters import DeadLetters
from ._loop import BlockingCallWarning, LoopThread

__all__ = ["Node", "Agent", "BlockingCallWarning"]

T = TypeVar("T")


class Node:
    """Blocking twin of :class:`zmesh.Node`: the same parameters, methods and
    properties; a coroutine method of zmesh.Node is one here that waits.

    Differences, each inherent:

    * ``handler_threads``: the threads that run this node's plain ``def``
      handlers. None (the default): each agent gets a pool of its own, as
      many threads as its ``concurrency``, as ``workers=None`` does for
      zmesh.Node; an int N: one pool of N threads shared by all agents.
      (``workers`` sizes the async node's own pools, which run only plain
      handlers given to ``async_agent`` directly.)
    * ``with`` instead of ``async with``; the node starts in the constructor.
    * ``events()`` is an async iterator: there is none here (iterate
      ``node.async_node.events()`` in async code on the node's loop).
    * ``async_node`` and ``Agent.async_agent``: the asyncio objects underneath.
    * Attributes of zmesh.Node (``clock``, ``settle_timeout``...) are
      read-only properties here.

    Where things run, and what may be called from there:

    * A plain ``def`` handler runs in a worker thread: the whole sync API works.
    * An ``async def`` handler, or a plain one given ``inline=True``, runs on
      the node's event loop thread. It must not block, and a call that waits
      (one that is a coroutine on zmesh.Node/Agent: ``send``, ``request``,
      ``settled``, ``close``...) raises RuntimeError there at once instead of
      deadlocking; an ``async def`` handler awaits ``agent.async_agent``
      instead. What does not wait (``stats()``, ``agent()``, ``claim()``,
      properties) works there too. ``observe`` callbacks and ``wait_until``
      predicates run on the loop thread as well.
    * A waiting call from some other running event loop (your own asyncio
      code, a Jupyter cell) works but holds that loop up until it returns, so
      it warns with :class:`BlockingCallWarning`.
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
        handler_threads: int | None = None,
    ) -> None:
        def create() -> _node.Node:
            return _node.Node(
                mesh, name=name, transport=transport, seeds=seeds, interfaces=interfaces, discovery=discovery,
                clock=clock, max_payload=max_payload, dead_letter_capacity=dead_letter_capacity,
                liveness=liveness, settle_timeout=settle_timeout, workers=workers, store=store,
                qos_limits=qos_limits, port=port,
                pub_port=pub_port, encoder=encoder, decoder=decoder, tracing=tracing, key=key, trusted=trusted,
                insecure=insecure, policy=policy, block_warning=block_warning, quotas=quotas,
            )

        if handler_threads is not None and (handler_threads.__class__ is not int or handler_threads < 1):
            raise ValueError(f"handler_threads must be a positive int or None, got {handler_threads!r}")
        self._handler_threads = handler_threads
        self._pool_thread_ids: set[int] = set()
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}  # by agent id ("": shared)
        self._concurrency: dict[str, int] = {}
        self._pools_lock = threading.Lock()
        self._loop = LoopThread(f"zmesh-loop-{mesh}")
        self._agents: dict[str, Agent] = {}
        self._closing = threading.Lock()
        self._closed = False
        try:
            self._node = self._loop.run(create)
            self._loop.wait_for(self._node.start())
        except BaseException:
            self._loop.stop()
            self._shut_pools(wait=True)
            raise

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """The one way a call waits for the mesh: NodeClosed once closing began."""
        if self._closed:
            coro.close()
            raise NodeClosed(f"node {self.id!r} is closed")
        return self._loop.wait_for(coro)

    def _wrap_handler(self, agent_id: str, handler: Callable[..., Any], inline: bool = False) -> Callable[..., Any]:
        """What to give the async agent: a handler that runs in a thread goes to the agent's pool."""
        if not callable(handler) or handler_mode(handler, inline) != THREAD:
            return handler  # the async agent refuses it, or runs it on the loop as it would without us
        return InPool(handler, self._pool_for(agent_id))

    def _pool_for(self, agent_id: str) -> concurrent.futures.ThreadPoolExecutor:
        """The pool of ``agent_id``'s plain handlers (started empty: threads come when needed)."""
        key = "" if self._handler_threads is not None else agent_id
        with self._pools_lock:
            pool = self._pools.get(key)
            if pool is None:
                size = self._handler_threads or self._concurrency.get(agent_id, DEFAULT_CONCURRENCY)
                pool = self._pools[key] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=size, thread_name_prefix=f"zmesh-handler-{key or 'shared'}",
                    initializer=lambda: self._pool_thread_ids.add(threading.get_ident()),
                )
            return pool

    def _shut_pools(self, wait: bool) -> None:
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=wait)

    def _twin(self, agent: _AsyncAgent) -> Agent:
        """The sync Agent wrapping ``agent`` (run on the loop, so one per agent)."""
        twin = self._agents.get(agent.id)
        if twin is None or twin.async_agent is not agent:
            twin = self._agents[agent.id] = Agent(self, agent, self._loop, self._wait, self._wrap_handler)
        return twin

    # -- lifecycle -------------------------------------------------------

    def __enter__(self) -> Node:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Does nothing: the sync node starts when made (NodeClosed once closed)."""
        self._wait(self._node.start())

    def close(self) -> None:
        """Close the node, then stop its loop thread and its handler pool."""
        if self._closed:
            return
        self._loop.refuse_on_loop_thread("Node.close")  # before anything changes: the node stays usable
        with self._closing:
            if self._closed:
                return
            self._closed = True
        try:
            self._loop.wait_for(self._node.close())
        finally:
            self._loop.stop()
            # A plain handler closing its own node cannot wait for its own thread.
            self._shut_pools(wait=threading.get_ident() not in self._pool_thread_ids)

    @property
    def closed(self) -> bool:
        return self._node.closed

    # -- attributes of zmesh.Node, read-only here -------------------------

    @property
    def id(self) -> str:
        return self._node.id

    @property
    def mesh(self) -> str:
        return self._node.mesh

    @property
    def incarnation(self) -> str:
        return self._node.incarnation

    @property
    def key(self) -> str:
        return self._node.key

    @property
    def clock(self) -> Clock:
        return self._node.clock

    @property
    def max_payload(self) -> int:
        return self._node.max_payload

    @property
    def max_frame(self) -> int:
        return self._node.max_frame

    @property
    def liveness_config(self) -> LivenessConfig:
        return self._node.liveness_config

    @property
    def settle_timeout(self) -> float:
        return self._node.settle_timeout

    @property
    def block_warning(self) -> float | None:
        return self._node.block_warning

    @property
    def interfaces(self) -> str | Sequence[str] | None:
        return self._node.interfaces

    @property
    def discovery_enabled(self) -> bool | None:
        return self._node.discovery_enabled

    @property
    def store(self) -> Store | None:
        return self._node.store

    @property
    def transport(self) -> Transport | MessageTransport:
        return self._node.transport

    @property
    def registry(self) -> Registry:
        return self._node.registry

    @property
    def dead_letters(self) -> DeadLetters:
        return DeadLetters(self._node.dead_letters, self._loop, self._wait)

    # -- the same surface ------------------------------------------------

    @property
    def async_node(self) -> _node.Node:
        """The underlying asyncio node (use only from its loop)."""
        return self._node

    @property
    def endpoint(self) -> str:
        return self._node.endpoint

    @property
    def pub_endpoint(self) -> str:
        return self._node.pub_endpoint

    @property
    def peers(self) -> list[str]:
        return self._loop.run(lambda: self._node.peers)

    @property
    def joining(self) -> bool:
        return self._loop.run(lambda: self._node.joining)

    @property
    def uptime(self) -> float:
        return self._loop.run(lambda: self._node.uptime)

    @property
    def public_key(self) -> str | None:
        return self._node.public_key

    @property
    def trusted(self) -> frozenset[str]:
        return self._loop.run(lambda: self._node.trusted)

    def trust(self, *keys: str | bytes) -> None:
        self._loop.run(self._node.trust, *keys)

    def distrust(self, *keys: str | bytes) -> None:
        self._loop.run(self._node.distrust, *keys)

    def reload_trusted(self) -> tuple[frozenset[str], frozenset[str]]:
        return self._loop.run(self._node.reload_trusted)

    def peer_endpoint(self, node_id: str) -> str | None:
        return self._loop.run(self._node.peer_endpoint, node_id)

    def connect(self, endpoint: str) -> None:
        self._loop.run(self._node.connect, endpoint)

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
        """Register an agent on this node (see :meth:`zmesh.Node.agent`)."""

        def register() -> Agent:
            self._concurrency[agent_id] = concurrency  # (checked by the async node)
            return self._twin(self._node.agent(
                agent_id, capabilities=capabilities, concurrency=concurrency, inbox_size=inbox_size,
                inbox_bytes=inbox_bytes, meta=meta, will=will,
            ))

        return self._loop.run(register)

    @property
    def agents(self) -> dict[str, Agent]:
        return self._loop.run(lambda: {agent_id: self._twin(a) for agent_id, a in self._node.agents.items()})

    def observe(self, callback: Observer) -> Callable[[], None]:
        """``callback(receipt)`` for every interaction, on the loop thread; returns its stop function."""
        stop = self._loop.run(self._node.observe, callback)
        return lambda: self._loop.run(stop)

    def stats(self) -> dict[str, Any]:
        return self._loop.run(self._node.stats)

    def peer_stats(self, node_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Node ``node_id``'s ``stats()``, asked over the mesh (``Node.peer_stats``)."""
        return self._wait(self._node.peer_stats(node_id, timeout))

    def services(self, capability: str | None = None, timeout: float = 2.0) -> dict[str, dict[str, Any]]:
        return self._wait(self._node.services(capability, timeout))

    def settled(self, timeout: float | None = None) -> bool:
        return self._wait(self._node.settled(timeout))

    def wait_acked(self, timeout: float | None = None) -> bool:
        return self._wait(self._node.wait_acked(timeout))

    def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        self._wait(self._node.wait_for_agents(*agent_ids, timeout=timeout))

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Wait until ``predicate()`` (called on the loop thread) is true; Timeout after ``timeout`` s."""
        self._wait(self._node.wait_until(predicate, timeout, what))


copy_docs(Node, _node.Node)
