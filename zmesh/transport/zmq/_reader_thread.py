"""Wait for ZeroMQ input in a thread, for event loops that cannot (internal).

The ZeroMQ transport reads a socket when its ZMQ_FD becomes readable. On a
selector event loop that is ``loop.add_reader``; Windows' default loop
(Proactor) has no ``add_reader``. :class:`ThreadReaders` gives the transport
the same two calls: one thread polls every registered descriptor (never the
ZeroMQ sockets themselves, which belong to the loop's thread) and, when some
are readable, asks the loop to run their callbacks. It polls again only
after the loop ran them, because ZMQ_FD stays readable until the loop's
drain has read ZMQ_EVENTS: polling sooner would spin. This is how pyzmq's
asyncio support and tornado's AddThreadSelectorEventLoop handle Proactor.

A socket pair wakes the thread when the set of descriptors changes or the
readers close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from typing import Callable

import zmq

__all__ = ["ThreadReaders"]

log = logging.getLogger("zmesh")

_POLLIN = int(zmq.POLLIN)
_JOIN_TIMEOUT = 5.0


class ThreadReaders:
    """``add_reader``/``remove_reader`` for ``loop``, served by a thread.

    Callbacks run on the loop, as with ``loop.add_reader``. Call every method
    from the loop's thread; :meth:`close` stops and joins the thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._readers: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._closing = False
        # Set while the thread may poll; cleared from when it hands ready
        # descriptors to the loop until the loop has run their callbacks.
        self._may_poll = threading.Event()
        self._may_poll.set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="zmesh-zmq-reader", daemon=True)
        self._thread.start()

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        with self._lock:
            self._readers[fd] = callback
        self._wake()

    def remove_reader(self, fd: int) -> None:
        """Forget ``fd``; the thread stops polling it before it polls again."""
        with self._lock:
            self._readers.pop(fd, None)
        self._wake()

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._readers.clear()
        self._may_poll.set()
        self._wake()
        self._thread.join(_JOIN_TIMEOUT)  # quick: the thread never waits on the loop
        if self._thread.is_alive():  # pragma: no cover - a wedged zmq_poll
            log.warning("zmesh: the ZeroMQ reader thread did not stop within %.0f s", _JOIN_TIMEOUT)
            return  # leave its socket pair open: the thread still polls it
        self._wake_r.close()
        self._wake_w.close()

    # -- the thread ----------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake is pending anyway) or closed
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        wake_fd = self._wake_r.fileno()
        while True:
            self._may_poll.wait()
            with self._lock:
                if self._closing:
                    return
                fds = list(self._readers)
            poller = zmq.Poller()
            poller.register(wake_fd, _POLLIN)
            for fd in fds:
                poller.register(fd, _POLLIN)
            try:
                events = poller.poll()
            except zmq.ZMQError as exc:  # pragma: no cover - a descriptor closed under us
                log.debug("zmesh: ZeroMQ reader thread poll failed: %s", exc)
                events = [(fd, _POLLIN) for fd in fds]
            ready = [fd for fd, _ in events if fd != wake_fd]
            if len(ready) < len(events):
                self._drain_wakes()
            if not ready:
                continue
            with self._lock:  # a close() between poll and here must not be waited for
                if self._closing:
                    return
                self._may_poll.clear()
            try:
                self._loop.call_soon_threadsafe(self._dispatch, ready)
            except RuntimeError:  # the loop was closed without closing us
                return

    def _drain_wakes(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    def _dispatch(self, ready: list[int]) -> None:
        """On the loop: run the callbacks of the descriptors found readable."""
        try:
            for fd in ready:
                callback = self._readers.get(fd)
                if callback is not None:
                    callback()
        finally:
            self._may_poll.set()
