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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from types import TracebackType
from typing import Any, Callable, Coroutine, Iterable, Iterator, TypeVar

from . import node as _node
from ._sync_loop import BlockingCallWarning, LoopThread
from .agent import Agent as _AsyncAgent
from .agent import HandoffResult
from .deadletters import DeadLetter
from .errors import NodeClosed
from .message import Message
from .observer import Observer
from .registry import Registry

__all__ = ["Node", "Agent", "BlockingCallWarning"]

T = TypeVar("T")
H = TypeVar("H", bound=Callable[..., Any])


class Node:
    """Blocking twin of :class:`zmesh.Node`; takes the same arguments plus
    ``handler_threads`` (size of the pool that runs plain handlers)."""

    def __init__(self, mesh: str, *, handler_threads: int = 8, **options: Any) -> None:
        self._pool_thread_ids: set[int] = set()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=handler_threads, thread_name_prefix="zmesh-handler",
            initializer=lambda: self._pool_thread_ids.add(threading.get_ident()),
        )
        self._loop = LoopThread(f"zmesh-loop-{mesh}")
        self._closing = threading.Lock()
        self._closed = False
        try:
            self._node: _node.Node = self._loop.run(_node.Node, mesh, **options)
            self._loop.wait_for(self._node.start())
        except BaseException:
            self._loop.stop()
            self._pool.shutdown(wait=True)
            raise

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """The one way a call waits for the mesh: NodeClosed once closing began."""
        if self._closed:
            coro.close()
            raise NodeClosed(f"node {self.id!r} is closed")
        return self._loop.wait_for(coro)

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
            self._pool.shutdown(wait=threading.get_ident() not in self._pool_thread_ids)

    # -- the same surface ------------------------------------------------

    @property
    def id(self) -> str:
        return self._node.id

    @property
    def mesh(self) -> str:
        return self._node.mesh

    @property
    def endpoint(self) -> str:
        return self._node.endpoint

    @property
    def registry(self) -> Registry:
        return self._node.registry

    @property
    def dead_letters(self) -> DeadLetters:
        return DeadLetters(self)

    @property
    def peers(self) -> list[str]:
        return self._loop.run(lambda: self._node.peers)

    @property
    def async_node(self) -> _node.Node:
        """The underlying asyncio node (use only from its loop)."""
        return self._node

    def agent(self, agent_id: str, *, capabilities: Iterable[str] = ()) -> Agent:
        return Agent(self, self._loop.run(self._node.agent, agent_id, capabilities=capabilities))

    def observe(self, callback: Observer) -> Callable[[], None]:
        """``callback(receipt)`` for every interaction, on the loop thread; returns its stop function."""
        stop = self._loop.run(self._node.observe, callback)
        return lambda: self._loop.run(stop)

    def stats(self) -> dict[str, Any]:
        return self._loop.run(self._node.stats)

    def peer_stats(self, node_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Node ``node_id``'s ``stats()``, asked over the mesh (``Node.peer_stats``)."""
        return self._wait(self._node.peer_stats(node_id, timeout))

    def settled(self, timeout: float | None = None) -> bool:
        return self._wait(self._node.settled(timeout))

    def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        self._wait(self._node.wait_for_agents(*agent_ids, timeout=timeout))

    def connect(self, endpoint: str) -> None:
        self._loop.run(self._node.connect, endpoint)

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

    def _wrap_handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            return fn
        pool = self._pool

        @functools.wraps(fn)
        async def in_thread(arg: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, arg)

        return in_thread


class DeadLetters:
    """The node's dead letters (:class:`zmesh.deadletters.DeadLetters`); ``redeliver`` waits."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._ring = node._node.dead_letters

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(self._node._loop.run(list, self._ring))

    def __len__(self) -> int:
        return self._node._loop.run(len, self._ring)

    def clear(self) -> None:
        self._node._loop.run(self._ring.clear)

    def redeliver(self, entry: DeadLetter) -> None:
        self._node._wait(self._ring.redeliver(entry))


class Agent:
    """Blocking twin of :class:`zmesh.Agent`."""

    def __init__(self, node: Node, agent: _AsyncAgent) -> None:
        self._node = node
        self._agent = agent
        self.id = agent.id
        self.capabilities = agent.capabilities

    def __repr__(self) -> str:
        return f"<zmesh.sync.Agent {self.id!r} on {self._node.id!r}>"

    @property
    def async_agent(self) -> _AsyncAgent:
        """The underlying asyncio agent (use only from the node's loop)."""
        return self._agent

    def on(self, topic: str) -> Callable[[H], H]:
        def register(fn: H) -> H:
            self.add_handler(topic, fn)
            return fn

        return register

    def add_handler(self, topic: str, handler: Callable[[Message], Any]) -> None:
        wrapped = self._node._wrap_handler(handler)

        self._node._loop.run(self._agent.add_handler, topic, wrapped)

    def on_handoff(self, fn: H) -> H:
        wrapped = self._node._wrap_handler(fn)

        self._node._loop.run(self._agent.on_handoff, wrapped)
        return fn

    def send(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        return self._node._wait(self._agent.send(target, topic, payload, **options))

    def request(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        return self._node._wait(self._agent.request(target, topic, payload, **options))

    def delegate(self, target: str, request: Message, **options: Any) -> Message:
        return self._node._wait(self._agent.delegate(target, request, **options))

    def reply(self, request: Message, payload: Any = None) -> None:
        self._node._wait(self._agent.reply(request, payload))

    def handoff(self, target: str, task_id: str, context: Any = None, **options: Any) -> HandoffResult:
        return self._node._wait(self._agent.handoff(target, task_id, context, **options))

    def subscribe(self, pattern: str, handler: Callable[[Message], Any] | None = None) -> None:
        wrapped = self._node._wrap_handler(handler) if handler is not None else None
        self._node._wait(self._agent.subscribe(pattern, wrapped))

    def unsubscribe(self, pattern: str) -> None:
        self._node._wait(self._agent.unsubscribe(pattern))

    def broadcast(self, topic: str, payload: Any = None, **options: Any) -> int:
        return self._node._wait(self._agent.broadcast(topic, payload, **options))

    @property
    def tasks(self) -> frozenset[str]:
        return self._node._loop.run(lambda: self._agent.tasks)

    @property
    def subscriptions(self) -> frozenset[str]:
        return self._node._loop.run(lambda: self._agent.subscriptions)

    def claim(self, task_id: str) -> None:
        self._node._loop.run(self._agent.claim, task_id)

    def close(self) -> None:
        self._node._wait(self._agent.close())

