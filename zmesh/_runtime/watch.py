"""Waiting on a node (internal): mesh-event streams and settle waiters."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from typing import Any, AsyncIterator, Callable

from ..clock import Clock
from ..registry import MeshEvent

__all__ = ["Watch"]

log = logging.getLogger("zmesh")


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Watch:
    """The ``events()`` queues and ``settled()`` waiters of one node."""

    def __init__(self, node_id: str) -> None:
        self._node_id = node_id
        self._queues: list[asyncio.Queue[MeshEvent]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self.stats: Counter[str] = Counter()
        #: When (``time.monotonic()``) a peer last joined (or rejoined, restarted).
        self.last_joined = -math.inf
        self._departures: list[Callable[[str, str], None]] = []
        self._listeners: list[Callable[[MeshEvent], None]] = []

    def events(self, maxsize: int) -> AsyncIterator[MeshEvent]:
        queue: asyncio.Queue[MeshEvent] = asyncio.Queue(maxsize)
        self._queues.append(queue)

        async def iterate() -> AsyncIterator[MeshEvent]:
            try:
                while True:
                    event = await queue.get()
                    if event.kind == "peer_left" and event.node_id == self._node_id:
                        return
                    yield event
            finally:
                if queue in self._queues:
                    self._queues.remove(queue)

        return iterate()

    def on_departure(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(node_id, detail)`` when a peer leaves or restarts (``detail``: the event's)."""
        self._departures.append(callback)

    def on_event(self, callback: Callable[[MeshEvent], None]) -> None:
        """Call ``callback(event)`` for every event, before the ``events()`` iterators get it."""
        self._listeners.append(callback)

    def emit(self, event: MeshEvent) -> None:
        log.debug("zmesh %s: %s", self._node_id, event)
        for listener in self._listeners:
            listener(event)
        if event.kind == "peer_joined" or event.kind == "peer_restarted":
            self.last_joined = time.monotonic()
        if (event.kind == "peer_left" or event.kind == "peer_restarted") and event.node_id != self._node_id:
            for callback in self._departures:
                callback(event.node_id, event.detail if event.kind == "peer_left" else "restarted")
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
                self.stats["events_overflowed"] += 1
            queue.put_nowait(event)
        if self._waiters:
            self.wake()  # what they wait for may have come with it (an agent joined)

    def end(self) -> None:
        """The node closed: end every events() iterator and wake every waiter."""
        self.wake()
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(MeshEvent("peer_left", self._node_id, detail="closed"))

    async def settled(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()``, re-checked on every wake(); False after ``timeout`` s (None: no limit)."""
        # A timer, not asyncio.wait_for: on 3.10 wait_for returns the result when
        # its future completes in the same loop turn as a cancellation of the
        # caller (bpo-42130), and a command stopped by SIGINT during subscribe()
        # then never stopped (seen 2 times in 15 runs of test_cli_signals under load).
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            await self._next_wake(() if remaining is None else ((loop, remaining),))
        return True

    async def changed(self, clock: Clock, timeout: float, real_timeout: float) -> None:
        """Wait for the next :meth:`wake` (an event, an acknowledgement), or
        ``timeout`` s on ``clock``, or ``real_timeout`` real seconds, whichever
        comes first."""
        await self._next_wake(((clock, timeout), (asyncio.get_running_loop(), real_timeout)))

    async def _next_wake(self, timeouts: tuple[tuple[Any, float], ...]) -> None:
        """Wait for the next :meth:`wake`, or until the first of ``timeouts``
        (``(clock or loop, seconds)``) runs out."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        timers = [source.call_later(seconds, _resolve, waiter) for source, seconds in timeouts]
        try:
            await waiter
        finally:
            for timer in timers:
                timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
