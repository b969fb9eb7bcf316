"""Running user handlers cheaply and safely.

A handler may be a plain function or a coroutine function. Coroutines are
stepped eagerly: most handlers finish without ever suspending, and those pay
no Task. Only a handler that really awaits gets a Task, which resumes it where
it stopped. Whatever happens, exactly one of ``done(result)`` or
``failed(exc)`` is called; exceptions never escape into the event loop.
"""

from __future__ import annotations

import asyncio
from types import CoroutineType
from typing import Any, Callable, Coroutine, Generator

__all__ = ["run_handler", "DEFERRED", "Deferred"]


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


class _Resume:
    """Awaitable that continues a coroutine which already yielded ``first``."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self.coro, self.first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation included: pass it in
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(
    coro: Coroutine[Any, Any, Any],
    first: Any,
    done: Callable[[Any, Any], None],
    failed: Callable[[BaseException, Any], None],
    extra: Any,
) -> None:
    try:
        result = await _Resume(coro, first)
    except asyncio.CancelledError as exc:
        failed(exc, extra)
        raise
    except Exception as exc:
        failed(exc, extra)
    else:
        done(result, extra)


def run_handler(
    handler: Callable[..., Any],
    arg: Any,
    done: Callable[[Any, Any], None],
    failed: Callable[[BaseException, Any], None],
    tasks: set[asyncio.Task[None]],
    extra: Any = None,
) -> None:
    """Call ``handler(arg)``; report ``done(result, extra)`` or ``failed(exc, extra)``.

    Runs in the caller's context (set the trace id around the call); a
    handler that suspends continues in a Task, which copies that context.
    Tasks are kept in ``tasks`` (and removed when they finish) so the node can
    cancel them on close.
    """
    try:
        result = handler(arg)
        if result.__class__ is not CoroutineType and (
            result is None or not asyncio.iscoroutine(result)
        ):
            coro = None
        else:
            coro = result
            first = coro.send(None)
    except StopIteration as stop:
        result, coro = stop.value, None
    except Exception as exc:
        failed(exc, extra)
        return
    if coro is None:
        done(result, extra)
        return
    task = asyncio.get_running_loop().create_task(_finish(coro, first, done, failed, extra))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
