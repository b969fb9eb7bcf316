"""``zmesh.run``: run an application until it ends or is told to stop.

Docker, systemd and Kubernetes stop a process with SIGTERM; a terminal with
SIGINT (Ctrl-C). Without a handler, SIGTERM kills the process at once, so
its peers hear no goodbye and notice only when the connection breaks or
the liveness timeout runs out, and SIGINT ends in a KeyboardInterrupt
traceback. ``zmesh.run`` turns either signal into a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import weakref
from typing import Any, Callable, Coroutine, Protocol, TypeVar

from ..errors import ZmeshError


class Closable(Protocol):
    """A started node, as ``run`` sees it."""

    async def close(self) -> None: ...


__all__ = ["run", "open_nodes", "track", "untrack", "STOP_SIGNALS"]

log = logging.getLogger("zmesh")

T = TypeVar("T")

#: The signals ``run`` turns into a clean stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_open: weakref.WeakKeyDictionary[Closable, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


def track(node: Closable, loop: asyncio.AbstractEventLoop) -> None:
    """``node`` started on ``loop``: a signal under ``run`` closes it."""
    _open[node] = loop


def untrack(node: Closable) -> None:
    _open.pop(node, None)


def open_nodes(loop: asyncio.AbstractEventLoop) -> list[Closable]:
    """The nodes started on ``loop`` and not closed yet."""
    return [node for node, on in list(_open.items()) if on is loop]


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Run ``main`` like ``asyncio.run``, and stop cleanly on SIGTERM or SIGINT.

    On the first SIGTERM or SIGINT, every :class:`zmesh.Node` open on this
    loop is closed at once (peers get a goodbye and see it leave at once;
    pending requests fail with NodeClosed), ``main`` is cancelled, and
    ``run`` raises ``SystemExit(128 + signal number)`` (143 for SIGTERM,
    130 for SIGINT, as a shell reports them), so the process exits without
    a traceback. A second signal while stopping gets Python's default
    handling (SIGINT: KeyboardInterrupt; SIGTERM: the process ends), to
    force a stop that hangs. Nodes that ``main`` left open when it returns
    are closed too.

    Signals are caught only in the main thread; elsewhere ``run`` is
    ``asyncio.run`` plus the closing of nodes. ``main`` must be a
    coroutine object (``zmesh.run(main())``).
    """
    if not asyncio.iscoroutine(main):
        raise TypeError(f"zmesh.run needs a coroutine, as in zmesh.run(main()); got {main!r}")
    return asyncio.run(_supervise(main), debug=debug)


async def _supervise(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task: asyncio.Task[T] = loop.create_task(main)
    received: list[int] = []
    closing: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if received:
            return
        received.append(signum)
        restore()  # a second signal: Python's default, to force a stop that hangs
        # The nodes' close tasks are scheduled before main's cancellation
        # reaches it, so the goodbye leaves before main's own clean-up runs.
        closing.extend(loop.create_task(node.close()) for node in open_nodes(loop))
        task.cancel()

    restore = _catch_signals(loop, on_signal)
    try:
        try:
            result = await task
        except (asyncio.CancelledError, ZmeshError):
            if not received:
                raise
        else:
            if not received:
                return result
    finally:
        restore()
        for node in open_nodes(loop):
            closing.append(loop.create_task(node.close()))
        if closing:
            for failed in await asyncio.gather(*closing, return_exceptions=True):
                if isinstance(failed, BaseException) and not isinstance(failed, asyncio.CancelledError):
                    log.warning("zmesh.run: closing a node failed: %s: %s", type(failed).__name__, failed)
    raise SystemExit(128 + received[0])


def _catch_signals(loop: asyncio.AbstractEventLoop, callback: Callable[[int], None]) -> Callable[[], None]:
    """Call ``callback(signum)`` on the loop for each stop signal; returns the undo."""
    undo: list[Callable[[], Any]] = []

    def from_thread(signum: int, frame: Any) -> None:
        loop.call_soon_threadsafe(callback, signum)

    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, callback, int(sig))
            undo.append(functools.partial(loop.remove_signal_handler, sig))
        except NotImplementedError:  # a loop without signal support (Windows' Proactor)
            with contextlib.suppress(ValueError):  # not the main thread
                previous = signal.signal(sig, from_thread)
                undo.append(functools.partial(signal.signal, sig, previous))
        except (ValueError, RuntimeError):  # not the main thread: no signals here
            pass

    def restore() -> None:
        while undo:
            with contextlib.suppress(Exception):
                undo.pop()()

    return restore
