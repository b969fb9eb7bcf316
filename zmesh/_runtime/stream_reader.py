"""Reading a streamed reply: :class:`Stream`, what ``agent.stream()`` returns."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..errors import Timeout
from ..message import Message
from .remote import reply_error
from .streams import MISSING, Reader, Streams

if TYPE_CHECKING:
    from ..clock import Clock

__all__ = ["Stream"]


class Stream:
    """The chunks of a streamed reply, in order, as they come::

        async with agent.stream("writer", "draft", {"topic": "zmq"}, timeout=60) as chunks:
            async for token in chunks:
                print(token, end="")

    The request goes when the first chunk is asked for. The end of the
    stream ends the loop; the handler's error (HandlerError), its node's loss
    (PeerLost) or the timeout (Timeout, for the whole stream) is raised in
    its place, after the chunks sent before it. Leaving the ``async with``
    block early (or :meth:`aclose`, or cancelling the reading Task) cancels
    the request: the handler is stopped, as for a cancelled ``request``.
    A handler may return a Stream to relay it to its own requester.
    """

    def __init__(self, streams: Streams, requester: str, request_id: str, asked: str, timeout: float,
                 clock: Clock, start: Callable[[Reader], Awaitable[Message]]) -> None:
        #: The stream request's correlation id (``agent.cancel(stream.request_id)`` cancels it too).
        self.request_id = request_id
        #: Who was asked: an agent id, or ``"capability:NAME"`` for ``stream_any``.
        self.asked = asked
        self._streams = streams
        self._requester = requester
        self._timeout = timeout
        self._clock = clock
        self._start = start  # sends the request; its reply ends the stream
        self._reader: Reader | None = None
        self._task: asyncio.Future[Message] | None = None
        self._deadline = 0.0
        self._done = False

    def __repr__(self) -> str:
        return f"<zmesh.Stream {self.request_id} from {self.asked!r}>"

    @property
    def sender(self) -> str:
        """The agent sending the chunks (the target, or the one it delegated to); "" before the first."""
        return self._reader.producer if self._reader is not None else ""

    @property
    def received(self) -> int:
        """Chunks handed out so far."""
        return self._reader.consumed if self._reader is not None else 0

    def __aiter__(self) -> Stream:
        return self

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _open(self) -> Reader:
        reader = self._reader = self._streams.open_reader(self._requester, self.request_id)
        self._deadline = self._clock.monotonic() + self._timeout if isinstance(self._timeout, (int, float)) else 0.0
        task = self._task = asyncio.ensure_future(self._start(reader))
        task.add_done_callback(lambda _: reader.wake())
        return reader

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        reader = self._reader or self._open()
        task = self._task
        assert task is not None
        while True:
            chunk = reader.take()
            if chunk is not MISSING:
                self._streams.consumed(reader)
                return chunk
            if task.done():
                self._end(task, reader)
            await self._wait(reader, task)

    def _end(self, task: asyncio.Future[Message], reader: Reader) -> None:
        """The request ended: stop (or raise) once the chunks sent before its end are in."""
        if task.cancelled():
            self._finish()
            raise asyncio.CancelledError()
        error = task.exception()
        sent = reader.sent_before_error
        if error is None:
            reply = task.result()
            if reply.status == "ok":
                sent = reply.payload if reply.payload.__class__ is int else 0
                if reader.consumed >= sent:
                    self._finish()
                    raise StopAsyncIteration
            else:
                payload = reply.payload
                sent = payload.get("chunks", 0) if isinstance(payload, dict) else 0
                error = reply_error(reply)
        if error is not None and (reader.consumed >= sent or not isinstance(sent, int)):
            self._finish()
            raise error
        if self._deadline and self._clock.monotonic() >= self._deadline:
            self._finish()
            if error is not None:
                raise error
            raise Timeout(f"the stream from {self.asked!r} ended after {sent} chunks, but only "
                          f"{reader.consumed} arrived within its timeout")

    async def _wait(self, reader: Reader, task: asyncio.Future[Message]) -> None:
        if reader.waiter is not None:
            raise RuntimeError(f"{self!r} is read by another Task already: a stream has one reader")
        waiter = reader.waiter = asyncio.get_running_loop().create_future()
        timer = None
        if task.done() and self._deadline:  # the end is in, some chunks are not: wait for them until the deadline
            timer = self._clock.call_later(max(0.0, self._deadline - self._clock.monotonic()), reader.wake)
        try:
            await waiter
        except asyncio.CancelledError:
            self._cancel()
            raise
        finally:
            reader.waiter = None
            if timer is not None:
                timer.cancel()

    def _cancel(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # the request's own cancellation tells the handler's node
        self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._reader is not None:
            self._streams.close_reader(self._reader)

    async def aclose(self) -> None:
        """Stop reading: the request is cancelled if it still runs (its handler is stopped)."""
        task = self._task
        self._cancel()
        if task is not None:
            await asyncio.wait({task})  # (a cancel of the caller itself still goes through)
            if not task.cancelled():
                task.exception()  # retrieved: how the request ended is the stream's business, not aclose's

    def __del__(self) -> None:
        task, reader = self._task, self._reader
        if task is not None and reader is not None and not self._done:
            loop = task.get_loop()
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # (the garbage collector may run in any thread)
                    loop.call_soon_threadsafe(task.cancel)
                    loop.call_soon_threadsafe(self._streams.close_reader, reader)
