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
from typing import Any, Callable, Coroutine, Iterable, TypeVar

from . import node as _node
from .agent import Agent as _AsyncAgent
from .agent import HandoffResult
from .deadletters import DeadLetter
from .errors import NodeClosed
from .message import Message
from .observer import Observer
from .registry import Registry

__all__ = ["Node", "Agent"]

T = TypeVar("T")
H = TypeVar("H", bound=Callable[..., Any])


class Node:
    """Blocking twin of :class:`zmesh.Node`; takes the same arguments plus
    ``handler_threads`` (size of the pool that runs plain handlers)."""

    def __init__(self, mesh: str, *, handler_threads: int = 8, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, name=f"zmesh-loop-{mesh}", daemon=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=handler_threads, thread_name_prefix="zmesh-handler"
        )
        self._thread.start()
        self._ready.wait()
        self._closed = False
        try:
            self._node: _node.Node = self._call(self._create(mesh, options))
        except BaseException:
            self._stop_loop()
            raise

    async def _create(self, mesh: str, options: dict[str, Any]) -> _node.Node:
        node = _node.Node(mesh, **options)
        await node.start()
        return node

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop.is_closed():
            coro.close()
            raise NodeClosed("the node is closed")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError("zmesh.sync calls cannot be made from the node's own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._pool.shutdown(wait=True)

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
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._node.close())
        finally:
            self._stop_loop()

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
    def dead_letters(self) -> _SyncDeadLetters:
        return _SyncDeadLetters(self)

    @property
    def peers(self) -> list[str]:
        return self._node.peers

    @property
    def async_node(self) -> _node.Node:
        """The underlying asyncio node (use only from its loop)."""
        return self._node

    def agent(self, agent_id: str, *, capabilities: Iterable[str] = ()) -> Agent:
        async def make() -> _AsyncAgent:
            return self._node.agent(agent_id, capabilities=capabilities)

        return Agent(self, self._call(make()))

    def observe(self, callback: Observer) -> Callable[[], None]:
        return self._node.observe(callback)

    def stats(self) -> dict[str, Any]:
        async def get() -> dict[str, Any]:
            return self._node.stats()

        return self._call(get())

    def peer_stats(self, node_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """Node ``node_id``'s ``stats()``, asked over the mesh (``Node.peer_stats``)."""
        return self._call(self._node.peer_stats(node_id, timeout))

    def settled(self, timeout: float | None = None) -> bool:
        return self._call(self._node.settled(timeout))

    def wait_for_agents(self, *agent_ids: str, timeout: float = 10.0) -> None:
        self._call(self._node.wait_for_agents(*agent_ids, timeout=timeout))

    def connect(self, endpoint: str) -> None:
        async def go() -> None:
            self._node.connect(endpoint)

        self._call(go())

    @property
    def public_key(self) -> str | None:
        return self._node.public_key

    @property
    def trusted(self) -> frozenset[str]:
        return self._node.trusted

    def trust(self, *keys: str | bytes) -> None:
        async def go() -> None:
            self._node.trust(*keys)

        self._call(go())

    def distrust(self, *keys: str | bytes) -> None:
        async def go() -> None:
            self._node.distrust(*keys)

        self._call(go())

    def reload_trusted(self) -> tuple[frozenset[str], frozenset[str]]:
        async def go() -> tuple[frozenset[str], frozenset[str]]:
            return self._node.reload_trusted()

        return self._call(go())

    def _wrap_handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            return fn
        loop, pool = self._loop, self._pool

        @functools.wraps(fn)
        async def in_thread(arg: Any) -> Any:
            return await loop.run_in_executor(pool, fn, arg)

        return in_thread


class _SyncDeadLetters:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._ring = node._node.dead_letters

    def __iter__(self) -> Any:
        return iter(self._ring)

    def __len__(self) -> int:
        return len(self._ring)

    def clear(self) -> None:
        self._ring.clear()

    def redeliver(self, entry: DeadLetter) -> None:
        self._node._call(self._ring.redeliver(entry))


class Agent:
    """Blocking twin of :class:`zmesh.Agent`."""

    def __init__(self, node: Node, agent: _AsyncAgent) -> None:
        self._node = node
        self._agent = agent
        self.id = agent.id
        self.capabilities = agent.capabilities

    def __repr__(self) -> str:
        return f"<zmesh.sync.Agent {self.id!r} on {self._node.id!r}>"

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._node._closed:
            coro.close()
            raise NodeClosed(f"node {self._node.id!r} is closed")
        return self._node._call(coro)

    def on(self, topic: str) -> Callable[[H], H]:
        def register(fn: H) -> H:
            self.add_handler(topic, fn)
            return fn

        return register

    def add_handler(self, topic: str, handler: Callable[[Message], Any]) -> None:
        wrapped = self._node._wrap_handler(handler)

        async def add() -> None:
            self._agent.add_handler(topic, wrapped)

        self._call(add())

    def on_handoff(self, fn: H) -> H:
        wrapped = self._node._wrap_handler(fn)

        async def add() -> None:
            self._agent.on_handoff(wrapped)

        self._call(add())
        return fn

    def send(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        return self._call(self._agent.send(target, topic, payload, **options))

    def request(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        return self._call(self._agent.request(target, topic, payload, **options))

    def delegate(self, target: str, request: Message, **options: Any) -> Message:
        return self._call(self._agent.delegate(target, request, **options))

    def reply(self, request: Message, payload: Any = None) -> None:
        self._call(self._agent.reply(request, payload))

    def handoff(self, target: str, task_id: str, context: Any = None, **options: Any) -> HandoffResult:
        return self._call(self._agent.handoff(target, task_id, context, **options))

    def subscribe(self, pattern: str, handler: Callable[[Message], Any] | None = None) -> None:
        wrapped = self._node._wrap_handler(handler) if handler is not None else None
        self._call(self._agent.subscribe(pattern, wrapped))

    def unsubscribe(self, pattern: str) -> None:
        self._call(self._agent.unsubscribe(pattern))

    def broadcast(self, topic: str, payload: Any = None, **options: Any) -> int:
        return self._call(self._agent.broadcast(topic, payload, **options))

    @property
    def tasks(self) -> frozenset[str]:
        return self._agent.tasks

    @property
    def subscriptions(self) -> frozenset[str]:
        return self._agent.subscriptions

    def claim(self, task_id: str) -> None:
        self._agent.claim(task_id)

    def close(self) -> None:
        self._call(self._agent.close())

