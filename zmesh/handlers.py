"""Running user handlers: every ``async def`` handler is an ordinary asyncio Task.

A coroutine handler runs inside its own Task from its first line, so
``asyncio.current_task()``, ``asyncio.timeout``, ``asyncio.wait_for``,
``TaskGroup``, contextvars, anyio and httpx behave in a handler exactly as
anywhere else. On Python 3.12+ the Task starts eagerly: a handler that
returns without suspending finishes inside ``run_handler`` and is never
scheduled, which keeps it nearly as cheap as a plain call.

A plain function handler is called inline. Whatever a handler raises,
``KeyboardInterrupt``, ``SystemExit`` and a ``CancelledError`` it raises
itself included, is contained: exactly one of ``done(result, extra)`` or
``failed(exc, extra)`` is called, and nothing escapes into the event loop or
the transport. Only a cancellation the node itself asked for (on close)
ends a handler without either call.
"""

from __future__ import annotations

import asyncio
import sys
from types import CoroutineType
from typing import Any, Callable, Coroutine

__all__ = ["run_handler", "HandlerTasks", "DEFERRED", "Deferred"]

_EAGER = sys.version_info >= (3, 12)


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
Failed = Callable[[BaseException, Any], None]


class HandlerTasks:
    """The handler Tasks of one node still running; cancelled on close."""

    __slots__ = ("_tasks", "closing")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False

    def add(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        """Cancel every running handler, but the one calling this, and wait until they have ended."""
        self.closing = True
        me = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not me]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _cancelled_by_owner(tasks: HandlerTasks) -> bool:
    """Was this handler's Task cancelled from outside (not by its own raise)?"""
    if tasks.closing:
        return True
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if cancelling is not None else False


async def _guarded(
    coro: Coroutine[Any, Any, Any], done: Done, failed: Failed, extra: Any, tasks: HandlerTasks
) -> None:
    try:
        result = await coro
    except asyncio.CancelledError as exc:
        if _cancelled_by_owner(tasks):
            raise
        failed(exc, extra)  # the handler raised it itself: its caller must hear of it
        return
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included: contained
        failed(exc, extra)
        return
    done(result, extra)


def run_handler(
    handler: Callable[..., Any],
    arg: Any,
    done: Done,
    failed: Failed,
    tasks: HandlerTasks,
    extra: Any = None,
) -> None:
    """Call ``handler(arg)``; report ``done(result, extra)`` or ``failed(exc, extra)``.

    Runs in the caller's context (set the trace id around the call); the
    Task of a coroutine handler copies that context when it is created.
    """
    try:
        result = handler(arg)
    except BaseException as exc:  # a plain handler: contained like a coroutine's
        failed(exc, extra)
        return
    if result.__class__ is not CoroutineType and (result is None or not asyncio.iscoroutine(result)):
        done(result, extra)
        return
    loop = asyncio.get_running_loop()
    wrapped = _guarded(result, done, failed, extra, tasks)
    task: asyncio.Task[None]
    if _EAGER:
        task = asyncio.Task(wrapped, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
        if task.done():
            return
    else:
        task = loop.create_task(wrapped)
    tasks.add(task)
