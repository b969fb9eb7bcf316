"""The agent of :mod:`zmesh.sync` (see there): a blocking twin of :class:`zmesh.Agent`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from types import FunctionType
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Coroutine, Generator, Iterable, Mapping, Protocol,
                    TypeVar, cast)

from .._runtime.handlers import THREAD
from ..agent import Agent as _AsyncAgent
from ..agent import Handler, HandoffHandler, HandoffResult
from ..message import GatherReply, Message
from ..topics import check_pattern
from ._loop import LoopThread

if TYPE_CHECKING:
    from . import Node

__all__ = ["Agent", "InPool", "copy_docs"]

T = TypeVar("T")


class Wait(Protocol):
    """Runs a coroutine on the node's loop and waits for its result."""

    def __call__(self, coro: Coroutine[Any, Any, T]) -> T: ...
H = TypeVar("H", bound=Callable[..., Any])


class InPool:
    """A plain handler as the coroutine function the async node runs: it calls
    the handler in the sync node's pool, in the caller's context (the trace
    id), as the async node does in its own pool."""

    def __init__(self, handler: Callable[..., Any], pool: concurrent.futures.Executor) -> None:
        self.handler = handler
        self._pool = pool

    async def __call__(self, arg: Any) -> Any:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._pool, context.run, self.handler, arg)

    def __repr__(self) -> str:
        return f"<zmesh.sync handler {self.handler!r}>"


def copy_docs(sync_cls: type, async_cls: type) -> None:
    """Give each method and property of ``sync_cls`` without a docstring its
    async namesake's, so that help() documents it."""
    for name, member in vars(sync_cls).items():
        twin = vars(async_cls).get(name)
        if isinstance(member, (property, FunctionType)) and not member.__doc__ and twin is not None:
            member.__doc__ = twin.__doc__


def _unwrapped(handler: T) -> T:
    return cast(T, handler.handler) if isinstance(handler, InPool) else handler


class Agent:
    """Blocking twin of :class:`zmesh.Agent`; make one with ``node.agent(...)``.

    ``inline=True`` (``on``, ``add_handler``, ``subscribe``) calls a plain
    handler on the node's event loop thread, the cheapest path: for a quick
    handler that never blocks and makes no waiting sync call (see
    :class:`Node`). Without it a plain handler runs in a worker thread.
    """

    def __init__(
        self,
        node: Node,
        agent: _AsyncAgent,
        loop: LoopThread,
        wait: Wait,
        wrap: Callable[..., Callable[..., Any]],
    ) -> None:
        self.node = node
        self._agent = agent
        self.id = agent.id
        self._loop = loop  # the node's loop thread
        self._wait = wait  # runs a coroutine there and waits for it (the node's rules for timeouts)
        self._wrap = wrap  # makes a plain handler safe to run there (the node's)

    def __repr__(self) -> str:
        return f"<zmesh.sync.Agent {self.id!r} on {self.node.id!r}>"

    @property
    def async_agent(self) -> _AsyncAgent:
        """The underlying asyncio agent (use only from the node's loop)."""
        return self._agent

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self._agent.capabilities

    @capabilities.setter
    def capabilities(self, capabilities: Iterable[str]) -> None:
        self._loop.run(setattr, self._agent, "capabilities", tuple(capabilities))

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._agent.meta

    @meta.setter
    def meta(self, meta: Mapping[str, Any] | None) -> None:
        self._loop.run(setattr, self._agent, "meta", meta)

    @property
    def will(self) -> tuple[str, Any] | None:
        return self._agent.will

    @will.setter
    def will(self, will: tuple[str, Any] | None) -> None:
        self._loop.run(setattr, self._agent, "will", will)

    # -- handlers --------------------------------------------------------

    def on(self, topic: str, *, inline: bool = False) -> Callable[[H], H]:
        check_pattern(topic)

        def register(fn: H) -> H:
            self.add_handler(topic, fn, inline=inline)
            return fn

        return register

    def add_handler(self, topic: str, handler: Handler, *, inline: bool = False) -> None:
        self._loop.run(self._agent.add_handler, topic, self._wrap(self._agent.id, handler, inline), inline=inline)

    def remove_handler(self, topic: str) -> None:
        self._loop.run(self._agent.remove_handler, topic)

    def handler_for(self, topic: str) -> Handler | None:
        return _unwrapped(self._loop.run(self._agent.handler_for, topic))

    def on_handoff(self, fn: H) -> H:
        self._loop.run(self._agent.on_handoff, self._wrap(self._agent.id, fn))
        return fn

    @property
    def handoff_handler(self) -> HandoffHandler | None:
        return _unwrapped(self._agent.handoff_handler)

    @property
    def handoff_mode(self) -> str:
        return THREAD if isinstance(self._agent.handoff_handler, InPool) else self._agent.handoff_mode

    # -- messages --------------------------------------------------------

    def send(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "notify",
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> Message:
        return self._wait(self._agent.send(
            target, topic, payload, qos=qos, priority=priority, ttl=ttl, type=type, trace_id=trace_id,
            timeout=timeout,
        ))

    def send_envelope(self, envelope: dict[str, Any], *, timeout: float | None = None) -> Message:
        return self._wait(self._agent.send_envelope(envelope, timeout=timeout))

    def request(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Message:
        return self._wait(self._agent.request(
            target, topic, payload, timeout=timeout, qos=qos, priority=priority, ttl=ttl, type=type,
            trace_id=trace_id,
        ))

    def delegate(self, target: str, request: Message, *, timeout: float = 30.0, topic: str | None = None) -> Message:
        return self._wait(self._agent.delegate(target, request, timeout=timeout, topic=topic))

    def reply(self, request: Message, payload: Any = None) -> None:
        self._wait(self._agent.reply(request, payload))

    def cancel(self, request_id: str) -> bool:
        return self._wait(self._agent.cancel(request_id))

    # -- by capability -----------------------------------------------------

    def request_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        idempotent: bool = False,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Message:
        return self._wait(self._agent.request_any(
            capability, topic, payload, timeout=timeout, idempotent=idempotent, qos=qos, priority=priority,
            type=type, trace_id=trace_id,
        ))

    def send_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        qos: int = 0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "notify",
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> Message:
        return self._wait(self._agent.send_any(
            capability, topic, payload, qos=qos, priority=priority, ttl=ttl, type=type, trace_id=trace_id,
            timeout=timeout,
        ))

    def gather(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        want: int | None = None,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> list[GatherReply]:
        return self._wait(self._agent.gather(
            capability, topic, payload, timeout=timeout, want=want, qos=qos, priority=priority, type=type,
            trace_id=trace_id,
        ))

    def gather_iter(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        want: int | None = None,
        qos: int = 0,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Generator[GatherReply, None, None]:
        """:meth:`gather`, each answer as it comes (a blocking iterator; ``close()`` it
        to stop the rest early)."""
        answers = self._agent.gather_iter(
            capability, topic, payload, timeout=timeout, want=want, qos=qos, priority=priority, type=type,
            trace_id=trace_id,
        )
        return _blocking(self._wait, answers)

    def stream(
        self,
        target: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        priority: int = 3,
        ttl: float | None = None,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Generator[Any, None, None]:
        """:meth:`zmesh.Agent.stream` as a blocking iterator of the chunks (``close()``
        it, or leave a ``with contextlib.closing(...)`` block, to cancel the rest)."""
        chunks = self._loop.run(lambda: self._agent.stream(
            target, topic, payload, timeout=timeout, priority=priority, ttl=ttl, type=type, trace_id=trace_id))
        return _blocking(self._wait, chunks)

    def stream_any(
        self,
        capability: str,
        topic: str,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        idempotent: bool = False,
        priority: int = 3,
        type: str = "query",
        trace_id: str | None = None,
    ) -> Generator[Any, None, None]:
        """:meth:`zmesh.Agent.stream_any` as a blocking iterator of the chunks."""
        chunks = self._loop.run(lambda: self._agent.stream_any(
            capability, topic, payload, timeout=timeout, idempotent=idempotent, priority=priority, type=type,
            trace_id=trace_id))
        return _blocking(self._wait, chunks)

    # -- handoff ---------------------------------------------------------

    @property
    def tasks(self) -> frozenset[str]:
        return self._loop.run(lambda: self._agent.tasks)

    def claim(self, task_id: str) -> None:
        self._loop.run(self._agent.claim, task_id)

    def complete(self, task_id: str) -> bool:
        return self._loop.run(self._agent.complete, task_id)

    def handoff(
        self,
        target: str,
        task_id: str,
        context: Any = None,
        *,
        artifacts: Iterable[str] = (),
        timeout: float = 30.0,
    ) -> HandoffResult:
        return self._wait(self._agent.handoff(target, task_id, context, artifacts=artifacts, timeout=timeout))

    # -- pub/sub ---------------------------------------------------------

    def subscribe(self, pattern: str, handler: Handler | None = None, *, inline: bool = False) -> None:
        wrapped = self._wrap(self._agent.id, handler, inline) if handler is not None else None
        self._wait(self._agent.subscribe(pattern, wrapped, inline=inline))

    def unsubscribe(self, pattern: str) -> None:
        self._wait(self._agent.unsubscribe(pattern))

    @property
    def subscriptions(self) -> frozenset[str]:
        return self._loop.run(lambda: self._agent.subscriptions)

    def broadcast(
        self,
        topic: str,
        payload: Any = None,
        *,
        priority: int = 3,
        ttl: float | None = None,
        trace_id: str | None = None,
        retain: bool = False,
    ) -> int:
        return self._wait(self._agent.broadcast(topic, payload, priority=priority, ttl=ttl, trace_id=trace_id,
                                                retain=retain))

    def close(self) -> None:
        self._wait(self._agent.close())


Agent.__module__ = "zmesh.sync"  # where users import it from, and what its repr should say
copy_docs(Agent, _AsyncAgent)


def _blocking(wait: Callable[[Coroutine[Any, Any, Any]], Any], items: AsyncIterator[T]) -> Generator[T, None, None]:
    """``items`` read one by one on the node's loop, from a thread that blocks."""
    async def next_item() -> T:
        return await items.__anext__()

    async def close() -> None:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()

    try:
        while True:
            try:
                yield wait(next_item())
            except StopAsyncIteration:
                return
    finally:
        wait(close())
