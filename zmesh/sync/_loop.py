"""The event loop behind :mod:`zmesh.sync`: a thread running it, and the ways in.

As in python-zeroconf's ``_utils/asyncio.py``, a blocking call hands its
coroutine to the loop with ``run_coroutine_threadsafe`` and waits for the
future. Waiting is only safe off the loop: a call from the loop's own thread
(an ``async def`` or ``inline=True`` handler) would wait for the loop that is
waiting for it, so it raises at once, saying what to do instead. A call from
some other running loop (the user's own asyncio code, a Jupyter cell) works
but stops that loop meanwhile, so it warns (:class:`BlockingCallWarning`).

What is a plain call on the async side (``node.stats()``, ``agent.claim()``)
never waits for the mesh: :meth:`LoopThread.run` calls it on the loop, or
directly when already there, so it works from a handler too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
import warnings
from typing import Any, Callable, Coroutine, ParamSpec, TypeVar

from ..errors import NodeClosed

__all__ = ["BlockingCallWarning", "LoopThread"]

T = TypeVar("T")
P = ParamSpec("P")

_FACADE_MODULES = frozenset({__name__, "zmesh.sync", "zmesh.sync._agent"})
#: How an async def handler reaches the asyncio object behind each sync class.
_ASYNC_TWIN = {"Node": "node.async_node", "Agent": "agent.async_agent", "DeadLetters": "node.async_node.dead_letters"}


class BlockingCallWarning(RuntimeWarning):
    """A :mod:`zmesh.sync` call that waits for the mesh was made from a running
    event loop other than the node's: that loop stands still until it returns."""


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside zmesh.sync."""
    level, frame = 2, sys._getframe(2)  # 1: the function calling warn; 2: its caller
    while frame.f_globals.get("__name__") in _FACADE_MODULES and frame.f_back is not None:
        frame, level = frame.f_back, level + 1
    return level


class LoopThread:
    """An asyncio event loop running in a daemon thread of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._waiting: set[concurrent.futures.Future[Any]] = set()
        self._stopped = False
        started = threading.Event()
        self.thread = threading.Thread(target=self._run_forever, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    def _run_forever(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def refuse_on_loop_thread(self, api: str) -> None:
        """Raise if this is the loop's thread: waiting here for the loop would deadlock."""
        if self.on_loop_thread():
            owner, _, method = api.rpartition(".")
            instead = _ASYNC_TWIN.get(owner, "agent.async_agent")
            raise RuntimeError(
                f"zmesh.sync.{api} called from the node's own event loop thread (inside an async def "
                f"or inline=True handler?): it would wait for the loop it is holding up, a deadlock. "
                f"In an async def handler await the async API instead (`await {instead}.{method}(...)`; "
                f"the asyncio objects are `agent.async_agent` and `node.async_node`); a plain def "
                f"handler registered without inline=True runs in a worker thread, where the sync API works."
            )

    def warn_if_in_other_loop(self, api: str) -> None:
        """Warn if an event loop runs in this thread: it stands still while this call waits."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        warnings.warn(
            f"zmesh.sync.{api} called from a running event loop (not the node's): that loop stands "
            f"still until the call returns. In async code use zmesh.Node and await it, or run the "
            f"blocking call with `await asyncio.to_thread(...)`; where all code runs inside a loop "
            f"(a Jupyter cell), `warnings.simplefilter('ignore', zmesh.sync.BlockingCallWarning)`.",
            BlockingCallWarning,
            stacklevel=_caller_stacklevel(),
        )

    def wait_for(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block this thread until it is done.

        The future this thread waits on exists before the loop may start
        ``coro`` (unlike ``asyncio.run_coroutine_threadsafe``'s): a Ctrl-C that
        lands at any point after that cancels the call on the loop too."""
        try:
            api: str = getattr(coro, "__qualname__", "call")  # the async method's: the sync one has its name
            self.refuse_on_loop_thread(api)
            self.warn_if_in_other_loop(api)
        except BaseException:
            coro.close()
            raise
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        scheduled = False
        try:
            self.loop.call_soon_threadsafe(_start, self.loop, coro, future)
            scheduled = True
            return self._wait(future)
        except RuntimeError:
            if scheduled:
                raise  # the call's own error
            coro.close()  # the loop is closed: nothing runs on it any more
            raise NodeClosed("the node is closed") from None
        except BaseException:
            future.cancel()  # Ctrl-C: _start closes coro if it has not begun, else cancels its task
            raise

    def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the loop: called directly when this is the
        loop's thread or the loop is gone, else handed over and waited for."""
        if self.on_loop_thread() or self.loop.is_closed():
            return fn(*args, **kwargs)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)

        try:
            self.loop.call_soon_threadsafe(call)
        except RuntimeError:  # closed since the check: nothing runs on it any more
            return fn(*args, **kwargs)
        return self._wait(future)

    def _wait(self, future: concurrent.futures.Future[T]) -> T:
        try:
            self._waiting.add(future)
            if self._stopped:  # stop() may have looked at _waiting before this future was in it
                _fail(future)
            return future.result()
        except concurrent.futures.CancelledError:
            raise NodeClosed("the node was closed while this call waited") from None
        except BaseException:  # Ctrl-C while it waited: the call on the loop is cancelled too (a request's work)
            future.cancel()
            raise
        finally:
            self._waiting.discard(future)

    def stop(self) -> None:
        """Cancel what still runs on the loop, stop it, join its thread, close it.

        Every thread still waiting for the loop then gets NodeClosed, never
        an endless wait (its call may have been handed over too late to run).
        """
        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
        self._stopped = True
        for future in list(self._waiting):
            _fail(future)


def _start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], future: concurrent.futures.Future[T]) -> None:
    """On the loop: run ``coro`` as a task whose outcome is ``future``'s, and
    which ``future``'s cancellation cancels (``run_coroutine_threadsafe``'s
    chaining, with the future made by the waiting thread)."""
    if future.cancelled():
        coro.close()
        return
    task = loop.create_task(coro)

    def settle(done: asyncio.Task[T]) -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled by the waiter meanwhile
            if done.cancelled():
                future.cancel()
            elif done.exception() is not None:
                future.set_exception(done.exception())
            else:
                future.set_result(done.result())

    def cancel_task(waited: concurrent.futures.Future[T]) -> None:
        if waited.cancelled() and not task.done():
            with contextlib.suppress(RuntimeError):  # the loop closed: its tasks were cancelled with it
                loop.call_soon_threadsafe(task.cancel)

    task.add_done_callback(settle)
    future.add_done_callback(cancel_task)


def _fail(future: concurrent.futures.Future[Any]) -> None:
    """End a wait whose call was handed to the loop too late to run."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # it finished after all
        future.set_exception(NodeClosed("the node was closed while this call waited"))


async def _cancel_the_rest() -> None:
    me = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not me]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
