"""What a Redis node sends, in the order it was asked (internal): ``send``
never blocks, so each call queues a command, and one task sends what has
queued up as one pipeline (one write, one read of the replies), so many
small messages cost one round trip. When a pipeline fails (a lost
connection), a command in it marked ``held`` (a QoS 1/2 message, not yet
in its stream) is tried again, any other is dropped and counted (it may
have reached the server: sending it again could deliver it twice); what was
queued behind it waits until the server answers a PING again. A barrier (a
coroutine) runs between two pipelines: what was queued after it waits for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, Awaitable, Callable, NamedTuple

__all__ = ["CommandPipe", "MAX_BATCH", "RETRY_DELAYS"]

#: Commands sent as one pipeline at most.
MAX_BATCH = 512
#: Seconds between tries while the server cannot be reached (the last one repeats).
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0)


class _Command(NamedTuple):
    args: tuple[Any, ...]
    done: Callable[[Any], None] | None  # gets the reply (an exception the server answered with, too)
    held: bool


class _Barrier(NamedTuple):
    wait: Callable[[], Awaitable[None]]


class CommandPipe:
    """Commands to ``client`` (a ``redis.asyncio.Redis``), in order, on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Any, drop: Callable[[str, str], None],
                 on_idle: Callable[[], None], max_queued: int, on_sent: Callable[[], None] = lambda: None) -> None:
        self._loop = loop
        self._client = client
        self._drop = drop
        self._on_idle = on_idle
        self._on_sent = on_sent
        self.max_queued = max_queued
        self._queue: deque[_Command | _Barrier] = deque()
        self._runner: asyncio.Task[None] | None = None
        self.closing = False
        self.failures = 0  # pipelines in a row that failed (the server is away)

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, *args: Any, done: Callable[[Any], None] | None = None, held: bool = False) -> bool:
        """Queue a command; False (dropped and counted) when too many wait already."""
        if not held and len(self._queue) >= self.max_queued:
            self._drop("queue_full", str(args[0]))
            return False
        self._queue.append(_Command(args, done, held))
        self._wake()
        return True

    def barrier(self, wait: Callable[[], Awaitable[None]]) -> None:
        """Send what is queued after this only once ``wait()`` returned."""
        self._queue.append(_Barrier(wait))
        self._wake()

    def _wake(self) -> None:
        if self._runner is None:
            self._runner = self._loop.create_task(self._run())

    async def stop(self) -> None:
        """Drop what is still queued (the node is closed)."""
        self.closing = True
        runner = self._runner
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
        for item in self._queue:
            if isinstance(item, _Command):
                self._drop("closed", str(item.args[0]))
        self._queue.clear()

    def is_idle(self) -> bool:
        return not self._queue and self._runner is None

    async def done(self) -> None:
        """Until everything queued so far was sent (or dropped)."""
        while self._runner is not None:
            await asyncio.shield(self._runner)

    async def _run(self) -> None:
        try:
            while self._queue:
                first = self._queue[0]
                if isinstance(first, _Barrier):
                    self._queue.popleft()
                    try:
                        await first.wait()
                    except Exception as exc:
                        self._drop("barrier_failed", type(exc).__name__)
                    continue
                if self.failures and not self.closing and not await self._server_back():
                    continue  # what is queued waits for the server (senders wait once it is full)
                batch: list[_Command] = []
                while self._queue and len(batch) < MAX_BATCH and not isinstance(self._queue[0], _Barrier):
                    batch.append(self._queue.popleft())  # type: ignore[arg-type]
                await self._send(batch)
        finally:
            self._runner = None
        if not self._queue:
            self._on_idle()

    async def _server_back(self) -> bool:
        """After a failure: is the server there again? (A PING; else a pause before the next try.)"""
        try:
            await self._client.execute_command("PING")
        except Exception:
            self.failures += 1
            await asyncio.sleep(RETRY_DELAYS[min(self.failures, len(RETRY_DELAYS)) - 1])
            return False
        return True

    async def _send(self, batch: list[_Command]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for command in batch:
            pipe.execute_command(*command.args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # the connection is gone (a reply the server gave is an item of replies)
            self.failures += 1
            kept = [c for c in batch if c.held and not self.closing]
            for command in batch:
                if not (command.held and not self.closing):
                    self._drop("send_failed", f"{command.args[0]}: {type(exc).__name__}")
            self._queue.extendleft(reversed(kept))
            if kept or self._queue:
                await asyncio.sleep(RETRY_DELAYS[min(self.failures, len(RETRY_DELAYS)) - 1])
            return
        self.failures = 0
        for command, reply in zip(batch, replies):
            if command.done is not None:
                command.done(reply)
        self._on_sent()
