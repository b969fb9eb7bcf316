"""Sending a handler's stream (internal): what an ``async def`` generator, a
plain generator (advanced in the agent's worker pool) or another stream
yields goes to the requester chunk by chunk, each only once the stream's
window is open (see :mod:`.streams`)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from types import GeneratorType
from typing import Any, Awaitable, Callable

from ..clock import Clock
from ..errors import InvalidMessage
from ..message import CANCELLED_REQUESTS, Message
from .cancel import RequestId, linger
from .handlers import HandlerTasks
from .streams import CHUNK_TOPIC, Streams, Writer, is_stream_id, is_streamable

__all__ = ["write", "collect", "MAX_COLLECTED", "StreamSender"]

#: Seconds a stopped plain generator's step still running in the pool is waited for, to close it then.
CLOSE_WAIT = 5.0
#: Chunks a plain ``request`` to a streaming handler gets at most, as one list.
MAX_COLLECTED = 10_000

log = logging.getLogger("zmesh")

_END: Any = object()
#: Closes of plain generators that wait for a step still running (kept referenced until done).
_CLOSING: set[asyncio.Future[None]] = set()

#: Runs a call in the agent's worker pool: (fn, *args) -> its result.
Submit = Callable[..., Awaitable[Any]]


def _next_plain(gen: Any) -> Any:
    return next(gen, _END)


class _Source:
    """One stream's items, whatever yields them."""

    def __init__(self, source: Any, submit: Submit, key: RequestId | None = None) -> None:
        self._source = source
        self._submit = submit
        self._key = key  # the request it answers, if any
        self._plain = source.__class__ is GeneratorType
        self._running: asyncio.Future[Any] | None = None  # a plain generator's next() in the pool

    async def next(self) -> Any:
        if not self._plain:
            try:
                return await self._source.__anext__()
            except StopAsyncIteration:
                return _END
        self._running = running = asyncio.ensure_future(
            self._submit(contextvars.copy_context().run, _next_plain, self._source))
        try:
            return await asyncio.shield(running)
        finally:
            if running.done():
                self._running = None

    async def close(self) -> None:
        source = self._source
        if not self._plain:
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()
            return
        running = self._running
        if running is not None:  # a next() still runs in its thread (a thread cannot be stopped)
            await asyncio.wait({running}, timeout=CLOSE_WAIT)  # (msg.cancelled is True meanwhile)
            if not running.done():  # close it once it returns, whenever that is
                closing = asyncio.ensure_future(self._close_after(running))
                _CLOSING.add(closing)
                closing.add_done_callback(_CLOSING.discard)
                if self._key is not None and self._key in CANCELLED_REQUESTS:
                    linger(self._key, closing)  # its step and its close go on seeing msg.cancelled
                return
        await self._submit(source.close)

    async def _close_after(self, running: asyncio.Future[Any]) -> None:
        await asyncio.wait({running})
        await self._submit(self._source.close)


async def write(source: Any, request: Message, agent_id: str, writer: Writer, submit: Submit,
                send: Callable[[Message], Awaitable[None]], stamp: Callable[[Message, str | None], None],
                clock: Clock) -> int:
    """Send each item of ``source`` as a chunk of ``request``'s stream, from
    ``agent_id``; the number sent. Raises what the source raises (its
    writer counts what was sent); the source is closed in any case."""
    items = _Source(source, submit, (request.target, request.correlation_id))
    loop = asyncio.get_running_loop()
    try:
        while True:
            await writer.window(loop, clock, request)
            item = await items.next()
            if item is _END:
                return writer.sent
            chunk = Message("notify", agent_id, request.sender, CHUNK_TOPIC, [writer.sent, item],
                            request.correlation_id, "", request.priority)
            stamp(chunk, request.trace_id or None)
            await send(chunk)
            writer.sent += 1
    finally:
        await _closed(items)


async def collect(source: Any, submit: Submit) -> list[Any]:
    """All ``source`` yields, as one list: a plain ``request`` to a streaming handler."""
    items = _Source(source, submit)
    out: list[Any] = []
    try:
        while True:
            item = await items.next()
            if item is _END:
                return out
            if len(out) >= MAX_COLLECTED:
                raise InvalidMessage(
                    f"the handler streams more than {MAX_COLLECTED} chunks: read them with agent.stream(), "
                    "not agent.request()")
            out.append(item)
    finally:
        await _closed(items)


async def _closed(items: _Source) -> None:
    try:
        await items.close()
    except Exception:  # the user's generator raised in its cleanup: its stream has ended anyway
        log.exception("zmesh: a streaming handler's generator raised as it was closed")


async def _one(item: Any) -> Any:
    yield item


#: (status, result or the exception, chunks sent): how a stream's sending ended.
Ended = Callable[[str, Any, int], None]


class StreamSender:
    """Runs the Tasks that send this node's streams (each as its handler's Task:
    cancelled by its requester's cancel, or when the node closes)."""

    def __init__(self, streams: Streams, tasks: HandlerTasks, send: Callable[[Message], Awaitable[None]],
                 stamp: Callable[[Message, str | None], None], clock: Clock) -> None:
        self._clock = clock
        self._streams = streams
        self._tasks = tasks
        self._send = send
        self._stamp = stamp

    def start(self, agent_id: str, request: Message, source: Any, ended: Ended) -> asyncio.Task[None]:
        """Send ``source`` (a stream, or one reply's payload) as the answer to
        ``request``; then ``ended`` says how it went (not when the node closes)."""
        began: list[bool] = []
        task = asyncio.get_running_loop().create_task(self._run(agent_id, request, source, ended, began))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._cancelled_early(t, began, source, ended))
        return task

    def _cancelled_early(self, task: asyncio.Task[None], began: list[bool], source: Any, ended: Ended) -> None:
        """Cancelled before its first step (a cancel in the same batch as the request):
        ``_run`` never ran, so say it ended as it would have."""
        if began or not task.cancelled() or self._tasks.closing:
            return
        if source.__class__ is GeneratorType:
            source.close()  # never started: nothing of it runs
        elif hasattr(source, "aclose"):
            asyncio.ensure_future(source.aclose())
        ended("error", asyncio.CancelledError(), 0)

    async def _run(self, agent_id: str, request: Message, source: Any, ended: Ended, began: list[bool]) -> None:
        began.append(True)
        tasks = self._tasks

        async def submit(fn: Callable[..., Any], *args: Any) -> Any:
            return await asyncio.wrap_future(tasks.submit(agent_id, fn, *args))

        writer: Writer | None = None
        try:
            if is_stream_id(request.correlation_id):
                writer = self._streams.open_writer(request)
                if not is_streamable(source):
                    source = _one(source)  # a plain answer to a streamed request: one chunk
                try:
                    count = await write(source, request, agent_id, writer, submit, self._send, self._stamp,
                                        self._clock)
                finally:
                    self._streams.close_writer(request, writer)
                ended("ok", count, count)
            else:
                ended("ok", await collect(source, submit), 0)
        except asyncio.CancelledError as exc:
            if tasks.closing:
                raise
            ended("error", exc, writer.sent if writer is not None else 0)
        except BaseException as exc:  # the handler's generator raised: contained, as a handler's error
            ended("error", exc, writer.sent if writer is not None else 0)
