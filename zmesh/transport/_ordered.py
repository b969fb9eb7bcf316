"""What a broker transport asks of its client, in the order asked (internal):
``send`` never blocks, so each call queues a step, and one task runs them one
after another (a message never overtakes the subscription queued before it).
A step that changes membership (an address, a pattern, a record) is marked
``confirm``: once the queue is empty, ``confirm()`` runs (a round trip to the
broker) before :meth:`OrderedSteps.is_flushed` says the broker has it all."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable, Coroutine

__all__ = ["OrderedSteps", "Step"]

Step = Callable[[], Coroutine[Any, Any, None]]


class OrderedSteps:
    """Steps run in order on ``loop``; a step that raises is ``drop("send_failed", ...)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, confirm: Callable[[], Awaitable[None]],
                 drop: Callable[[str, str], None], count: Callable[[str], None],
                 on_flushed: Callable[[], None]) -> None:
        self._loop = loop
        self._confirm = confirm
        self._drop, self._count = drop, count
        self._on_flushed = on_flushed
        self._steps: deque[Step] = deque()
        self._runner: asyncio.Task[None] | None = None
        self._unconfirmed = False

    def add(self, step: Step, confirm: bool = False) -> None:
        self._steps.append(step)
        self._unconfirmed = self._unconfirmed or confirm
        if self._runner is None:
            self._runner = self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._steps:
                while self._steps:
                    step = self._steps.popleft()
                    try:
                        await step()
                    except Exception as exc:  # the broker refused it, or the connection is gone
                        self._drop("send_failed", type(exc).__name__)
                if self._unconfirmed:
                    self._unconfirmed = False
                    try:
                        await self._confirm()
                    except Exception:
                        self._count("flush_failed")
        finally:
            self._runner = None
        if not self._steps:
            self._on_flushed()

    async def done(self) -> None:
        """Until every step queued so far has run."""
        while self._runner is not None:
            await asyncio.shield(self._runner)

    def is_flushed(self) -> bool:
        return not self._steps and self._runner is None and not self._unconfirmed
