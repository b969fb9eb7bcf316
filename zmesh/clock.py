"""Clocks: the real one, and a fake one that makes timeout tests take no time.

A node reads time and schedules its timers (request timeouts, TTL checks,
heartbeats) only through its clock, so a test can pass ``FakeClock()`` to
``Node(..., clock=...)`` and move time forward by hand.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any, Callable, Protocol

__all__ = ["Clock", "TimerHandle", "SystemClock", "FakeClock"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What a node needs from a clock."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch (message timestamps, TTL)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (latencies, liveness)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the event loop after ``delay`` seconds."""
        ...


class SystemClock:
    """Real time; timers run on the running asyncio loop."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class _FakeTimer:
    __slots__ = ("when", "callback", "args", "cancelled")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that only moves when told to.

    >>> clock = FakeClock()
    >>> fired = []
    >>> _ = clock.call_later(10, fired.append, "ten")
    >>> clock.advance(9.5); fired
    []
    >>> clock.advance(0.5); fired
    ['ten']
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = 0.0
        self._epoch = start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._epoch + self._now

    def monotonic(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        timer = _FakeTimer(self._now + max(0.0, delay), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward, running every timer that falls due, in order."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.callback(*timer.args)
        self._now = target

    @property
    def pending_timers(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.cancelled)
