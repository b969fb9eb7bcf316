"""Running user handlers where they belong, as Python web frameworks do.

* An ``async def`` handler is an ordinary asyncio Task on the node's loop.
* A plain ``def`` handler runs in a bounded worker pool (threads), so a
  blocking call in it (a sync SDK, ``time.sleep``, CPU work) never stops
  the loop. Its context (the trace id) goes with it. By default each agent
  has a pool of its own, as many threads as its ``concurrency``, so an
  I/O-bound handler (a sync LLM call) runs that many calls at once;
  ``Node(workers=N)`` shares one pool of N threads among all agents.
* A plain handler registered with ``inline=True`` is called on the loop:
  the cheapest path, for handlers known to be quick.

A coroutine handler runs inside its own Task from its first line, so
``asyncio.current_task()``, ``asyncio.timeout``, ``asyncio.wait_for``,
``TaskGroup``, contextvars, anyio and httpx behave in a handler exactly as
anywhere else. The Task starts eagerly (asyncio's ``eager_start`` on 3.12+,
:mod:`.eager`'s backport on 3.10 and 3.11): a handler that returns without
suspending finishes inside ``run_handler`` and is never scheduled, which
keeps it nearly as cheap as a plain call. ``ZMESH_EAGER_BACKPORT=0`` turns
the backport off (a Task is then scheduled as ``loop.create_task`` does).

Whatever a handler raises,
``KeyboardInterrupt``, ``SystemExit`` and a ``CancelledError`` it raises
itself included, is contained: exactly one of ``done(result, extra)`` or
``failed(exc, extra)`` is called, and nothing escapes into the event loop or
the transport. A handler's Task cancelled by the application (a "stop"
handler calling ``task.cancel()``) counts as failed with CancelledError, so
its requester hears of it and its concurrency slot comes back. Only the
cancellation the node itself asks for on close ends a handler without
either call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import sys
from types import CoroutineType, GeneratorType
from typing import Any, Callable, Coroutine, TypeAlias

from .eager import AVAILABLE as EAGER_BACKPORT
from .eager import EagerTask

__all__ = ["run_handler", "HandlerTasks", "DEFERRED", "Deferred", "handler_mode", "ASYNC", "THREAD", "INLINE",
           "DEFAULT_WORKERS", "finish"]

log = logging.getLogger("zmesh")

_EAGER = sys.version_info >= (3, 12)
_BACKPORT = EAGER_BACKPORT and os.environ.get("ZMESH_EAGER_BACKPORT", "1") != "0"

ASYNC = "async"
THREAD = "thread"
INLINE = "inline"
#: Threads of the shared pool of plain handlers run for no agent's pool (what ThreadPoolExecutor picks).
DEFAULT_WORKERS = min(32, (os.cpu_count() or 1) + 4)
#: How long close() waits for plain handlers still running in the pool.
CLOSE_GRACE = 5.0


def handler_mode(handler: Callable[..., Any], inline: bool = False) -> str:
    """Where ``handler`` runs: ASYNC (a coroutine or async generator function), THREAD or INLINE.
    (A plain generator function is THREAD: the pool advances it, see :mod:`.stream_writer`.)"""
    target: Any = handler
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None)):
        return ASYNC
    if inspect.isasyncgenfunction(target):  # called on the loop: the call only makes the generator
        return ASYNC
    return INLINE if inline else THREAD


class Deferred:
    """Returned by a handler that will answer later with ``agent.reply``."""

    _instance: Deferred | None = None

    def __new__(cls) -> Deferred:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "zmesh.DEFERRED"


DEFERRED = Deferred()

Done = Callable[[Any, Any], None]
#: A handler still running: its Task, or the pool's Future of a plain one.
Running: TypeAlias = "asyncio.Task[None] | EagerTask | concurrent.futures.Future[Any] | None"
Failed = Callable[[BaseException, Any], None]


class HandlerTasks:
    """The handlers of one node still running (Tasks and pool threads), and its worker pools.

    ``workers`` None: a pool per agent (see :meth:`add_pool`), as many threads
    as the agent's concurrency; an int: one pool of that many, shared.
    Threads start only when a plain handler needs one.
    """

    __slots__ = ("_tasks", "_threads", "_pools", "_sizes", "workers", "closing", "node_id")

    def __init__(self, workers: int | None = None, node_id: str = "") -> None:
        #: The handler Tasks still running (and the node's stream senders): the loop
        #: itself holds Tasks weakly, so a Task that waits on a future nobody else holds would vanish.
        self._tasks: set[asyncio.Task[None] | EagerTask] = set()
        #: The pool work not finished yet, by the key of the pool it was submitted for.
        self._threads: dict[str, set[concurrent.futures.Future[Any]]] = {}
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._sizes: dict[str, int] = {}
        self.workers = workers
        self.closing = False
        self.node_id = node_id

    def add(self, task: asyncio.Task[None] | EagerTask) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def runs(self, task: asyncio.Task[Any] | None) -> bool:
        """Is ``task`` one of the node's handlers that suspended (or its stream senders)?"""
        return task in self._tasks

    def running(self) -> list[asyncio.Task[None] | EagerTask]:
        """The node's handler Tasks (and stream senders) not ended yet."""
        return list(self._tasks)

    def add_pool(self, key: str, size: int) -> None:
        """Plain handlers submitted for ``key`` (an agent id) get ``size`` threads of their own."""
        self._sizes[key] = size

    def remove_pool(self, key: str) -> None:
        """``key``'s agent left: its idle threads end, running ones once they return."""
        self._sizes.pop(key, None)
        if not self._threads.get(key):
            self._threads.pop(key, None)
        pool = self._pools.pop(key, None)
        if pool is not None:
            pool.shutdown(wait=False)

    def submit(self, key: str, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` in ``key``'s pool (the shared one with ``workers`` set, or for an unknown key)."""
        pool_key = key if self.workers is None and key in self._sizes else ""
        pool = self._pools.get(pool_key)
        if pool is None:  # a node with no plain handlers starts no thread
            size = self._sizes[pool_key] if pool_key else (self.workers or DEFAULT_WORKERS)
            name = f"zmesh-handler-{self.node_id}" + (f"-{pool_key}" if pool_key else "")
            pool = self._pools[pool_key] = concurrent.futures.ThreadPoolExecutor(size, name)
        future = pool.submit(fn, *args)
        futures = self._threads.get(key)
        if futures is None:
            futures = self._threads[key] = set()
        futures.add(future)
        future.add_done_callback(futures.discard)  # (in the worker thread: set.discard holds the GIL)
        return future

    def waiting_for_thread(self, key: str) -> int:
        """How many of ``key``'s plain handlers wait for a free thread of their pool."""
        futures = self._threads.get(key)
        if not futures:
            return 0
        return sum(1 for f in futures.copy() if not (f.running() or f.done()))

    async def cancel_all(self) -> None:
        """Cancel every running handler Task, but the one calling this, and wait
        until they have ended; wait up to CLOSE_GRACE s for pool threads (a
        thread cannot be cancelled: one still running then is left behind)."""
        self.closing = True
        me = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not me]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        pools, self._pools = list(self._pools.values()), {}
        running = [asyncio.wrap_future(f) for futures in self._threads.values() for f in futures.copy()]
        if running:
            _, late = await asyncio.wait(running, timeout=CLOSE_GRACE)
            if late:
                log.warning("zmesh %s: closing with %d plain handler(s) still running in the pool; "
                            "their results are dropped, and the process cannot exit until they return",
                            self.node_id, len(late))
                for pool in pools:
                    pool.shutdown(wait=False, cancel_futures=True)
                return
        for pool in pools:
            pool.shutdown(wait=True)  # idle workers exit at once


async def _guarded(
    coro: Coroutine[Any, Any, Any], done: Done, failed: Failed, extra: Any, tasks: HandlerTasks
) -> None:
    try:
        result = await coro
    except asyncio.CancelledError as exc:
        if tasks.closing:
            raise  # the node closes: nobody waits for the result
        # Raised by the handler, or its Task cancelled by the application:
        # either way the handler ended without a result, and its caller must hear of it.
        failed(exc, extra)
        return
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included: contained
        failed(exc, extra)
        return
    done(result, extra)


def _call_plain(handler: Callable[..., Any], arg: Any) -> tuple[bool, Any]:
    try:
        return True, handler(arg)
    except BaseException as exc:  # contained like a coroutine's
        return False, exc


def run_handler(
    handler: Callable[..., Any],
    arg: Any,
    done: Done,
    failed: Failed,
    tasks: HandlerTasks,
    extra: Any = None,
    mode: str = INLINE,
    pool: str = "",
) -> Running:
    """Run ``handler(arg)`` by ``mode``; report ``done(result, extra)`` or ``failed(exc, extra)``.

    Runs in the caller's context (set the trace id around the call): a
    coroutine handler's Task and a pool thread copy that context. A THREAD
    handler runs in ``tasks``' pool for ``pool`` (an agent id). Returns what
    still runs (the Task, the pool's Future), or None if it already ended.
    """
    if mode == THREAD:
        loop = asyncio.get_running_loop()
        future = tasks.submit(pool, contextvars.copy_context().run, _call_plain, handler, arg)

        def back(f: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_thread_finished, f, done, failed, extra, tasks)

        future.add_done_callback(back)
        return future
    try:
        result = handler(arg)
    except BaseException as exc:  # a plain handler: contained like a coroutine's
        failed(exc, extra)
        return None
    if result is None:  # finish's first case, without the call (one per message)
        done(result, extra)
        return None
    return finish(result, done, failed, extra, tasks)


def _thread_finished(
    future: concurrent.futures.Future[Any], done: Done, failed: Failed, extra: Any, tasks: HandlerTasks
) -> None:
    if tasks.closing or future.cancelled():
        return
    ok, value = future.result()
    if ok:
        finish(value, done, failed, extra, tasks)
    else:
        failed(value, extra)


def _close_if_cancelled(coro: Coroutine[Any, Any, Any], failed: Failed, extra: Any, tasks: HandlerTasks,
                        task: asyncio.Task[None]) -> None:
    if task.cancelled():
        coro.close()
        if not tasks.closing:
            # Cancelled before its first step (a cancel that came in the same batch as the
            # request): _guarded never ran, so report it as it would have.
            failed(asyncio.CancelledError(), extra)


def finish(result: Any, done: Done, failed: Failed, extra: Any, tasks: HandlerTasks) -> asyncio.Task[None] | None:
    """What :func:`run_handler` does with a handler's return value (a coroutine
    is awaited in a Task): that Task while it runs, else None."""
    if result.__class__ is not CoroutineType and (
            result is None or result.__class__ is GeneratorType or not asyncio.iscoroutine(result)):
        # (A plain generator is a stream's: Python < 3.12 counts it as a coroutine.)
        done(result, extra)
        return None
    loop = asyncio.get_running_loop()
    wrapped = _guarded(result, done, failed, extra, tasks)
    task: asyncio.Task[None] | EagerTask
    if _EAGER:  # (without loop=, 3.13 does not start it eagerly)
        task = asyncio.Task(wrapped, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    elif _BACKPORT:
        task = EagerTask(wrapped, loop)
    else:
        task = loop.create_task(wrapped)
        # Cancelled (the node closes) before its first step, the task never
        # awaits the handler's coroutine: close it, or Python warns it was never awaited.
        task.add_done_callback(functools.partial(_close_if_cancelled, result, failed, extra, tasks))
    if task.done():  # ended in its first step: nothing holds it, nothing waits for it
        return None
    tasks.add(task)  # (only a handler that suspended pays for the done callback)
    return task
