"""Streamed replies (internal): the protocol, and each node's table of the
streams it reads and writes.

A streamed request is an ordinary request whose correlation id starts with
:data:`STREAM_MARK` (plain ids are hex digits), so every transport carries it
unchanged and a delegate keeps it. Its handler's node answers with:

* chunks: one-way messages from the producing agent to the requester, topic
  :data:`CHUNK_TOPIC`, the request's correlation id, payload ``[seq, chunk]``
  (``seq`` counts from 0), qos 0;
* then the request's reply: ``ok`` with the number of chunks sent, or an error
  whose payload also carries ``"chunks"``: how many were sent before it. On a
  broker a reply may overtake the last chunks; the count says what to wait for.

Flow control is per stream, as HTTP/2's stream windows: the producer has at
most :data:`WINDOW` chunks out that the reader has not consumed, and the
reader's node tells the producer's node what it consumed (``zmesh.more``,
between node addresses, payload ``[[requester, correlation id, consumed],
...]``) each time half a window more was. A chunk's flow-control credit goes
back when it arrives: a slow reader holds its own stream back, never the
other traffic between the two nodes. Memory is bounded on both sides:
``WINDOW`` chunks a stream at the reader, none queued at the writer (the
handler's generator is advanced only while the window is open).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from types import AsyncGeneratorType, GeneratorType
from typing import Any, Callable

from .._wire.names import NODE_ADDRESS_PREFIX
from ..clock import Clock
from ..errors import Timeout
from ..message import Message, new_request_id

__all__ = ["STREAM_MARK", "CHUNK_TOPIC", "MORE_TOPIC", "WINDOW", "Reader", "Writer", "Streams", "is_stream_id",
           "new_stream_id", "is_streamable", "more_items", "MISSING", "PLAIN_RESULTS"]

STREAM_MARK = "~"
CHUNK_TOPIC = "zmesh.chunk"
MORE_TOPIC = "zmesh.more"
#: Chunks a producer may have out that its reader has not consumed.
WINDOW = 64
#: Entries one ``zmesh.more`` message carries at most.
MAX_MORE = 256

#: What :meth:`Reader.take` gives when the next chunk has not arrived.
MISSING: Any = object()


def is_stream_id(correlation_id: str) -> bool:
    return correlation_id.startswith(STREAM_MARK)


def new_stream_id() -> str:
    return STREAM_MARK + new_request_id()


def is_streamable(result: Any) -> bool:
    """Is a handler's ``result`` a stream of chunks (an async or sync generator,
    a :class:`zmesh.Stream`, any async iterator)?"""
    cls = result.__class__
    return cls is AsyncGeneratorType or cls is GeneratorType or (
        cls not in PLAIN_RESULTS and hasattr(cls, "__anext__") and hasattr(cls, "__aiter__"))


#: Results that are a request's whole answer, never a stream (a set lookup spares the hot path a call).
PLAIN_RESULTS = frozenset({type(None), dict, list, str, int, float, bool, bytes, tuple})


def more_items(msg: Message) -> list[tuple[str, str, int]] | None:
    """The ``[requester, correlation id, consumed]`` entries of a ``zmesh.more``; None when malformed."""
    items = msg.payload
    if msg.correlation_id or not isinstance(items, list) or len(items) > MAX_MORE:
        return None
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str)
                and 0 < len(item[0]) <= 256 and 0 < len(item[1]) <= 256 and item[2].__class__ is int
                and item[2] >= 0):
            return None
        out.append((item[0], item[1], item[2]))
    return out


class Reader:
    """What has arrived of one stream this node reads: chunks by their number,
    until the caller takes them."""

    __slots__ = ("agent", "correlation_id", "chunks", "consumed", "reported", "producer", "waiter", "sent_before_error")

    def __init__(self, agent: str, correlation_id: str) -> None:
        self.agent = agent
        self.correlation_id = correlation_id
        self.chunks: dict[int, Any] = {}
        #: Chunks handed to the caller (the next one's number).
        self.consumed = 0
        #: The ``consumed`` last told to the producer.
        self.reported = 0
        #: The agent sending the chunks (the target, or whoever it delegated to), from the first.
        self.producer = ""
        self.waiter: asyncio.Future[None] | None = None
        #: What an error reply said went before it (its ``"chunks"``).
        self.sent_before_error = 0

    def take(self) -> Any:
        """The next chunk in order, or :data:`MISSING` when it has not arrived."""
        chunk = self.chunks.pop(self.consumed, MISSING)
        if chunk is not MISSING:
            self.consumed += 1
        return chunk

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Writer:
    """One stream this node writes: how far it may go."""

    __slots__ = ("requester", "node", "sent", "acked", "waiter")

    def __init__(self, requester: str, node: str | None) -> None:
        self.requester = requester
        #: The requester's node (only it may open the window).
        self.node = node
        self.sent = 0
        self.acked = 0
        self.waiter: asyncio.Future[None] | None = None

    async def window(self, loop: asyncio.AbstractEventLoop, clock: Clock, request: Message) -> None:
        """Wait until one more chunk may go; Timeout once ``request``'s ttl ran out
        (its reader stopped waiting, and its cancel, if any, did not come)."""
        while self.sent - self.acked >= WINDOW:
            timer = None
            if request.ttl is not None:
                left = request.timestamp + request.ttl - clock.time()
                if left <= 0:
                    raise Timeout(f"the reader of stream {request.correlation_id} took no more chunks "
                                  "within the request's ttl")
                timer = clock.call_later(left, self._wake)
            self.waiter = loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
                if timer is not None:
                    timer.cancel()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Streams:
    """The streams of one node: those its agents read, those its handlers write."""

    def __init__(self, node_of: Callable[[str], str | None], taken: Callable[[str, str], None],
                 drop: Callable[[str, str, str], None], tell_more: Callable[[str, list[tuple[str, str, int]]], None],
                 stats: Counter[str]) -> None:
        self._node_of = node_of
        self._taken = taken
        self._drop = drop
        self._tell_more = tell_more
        self.readers: dict[tuple[str, str], Reader] = {}
        self.writers: dict[tuple[str, str], Writer] = {}
        #: The node's counters: chunks_sent, chunks_received, chunks_dropped.
        self.stats = stats

    # -- the reading side ------------------------------------------------

    def open_reader(self, agent: str, correlation_id: str) -> Reader:
        reader = self.readers[(agent, correlation_id)] = Reader(agent, correlation_id)
        return reader

    def close_reader(self, reader: Reader) -> None:
        if self.readers.get((reader.agent, reader.correlation_id)) is reader:
            del self.readers[(reader.agent, reader.correlation_id)]
        reader.chunks.clear()

    def chunk(self, agent_id: str, msg: Message, origin: str) -> None:
        """Chunk ``msg`` arrived for local agent ``agent_id`` (from node ``origin``)."""
        self._taken(origin, agent_id)  # its credit goes back now: the stream's window bounds it
        reader = self.readers.get((agent_id, msg.correlation_id))
        payload = msg.payload
        if reader is None:
            self._dropped("stream_gone", agent_id, "a chunk of a stream nobody reads (it ended, or was cancelled)")
            return
        if not (payload.__class__ is list and len(payload) == 2 and payload[0].__class__ is int):
            self._dropped("malformed", msg.sender, "a chunk that is not [seq, chunk]")
            return
        seq = payload[0]
        if not reader.producer:
            reader.producer = msg.sender
        elif msg.sender != reader.producer:
            self._dropped("spoofed_sender", msg.sender, f"a chunk of a stream {reader.producer!r} sends")
            return
        if not reader.consumed <= seq < reader.consumed + WINDOW or seq in reader.chunks:
            self._dropped("stream_out_of_window", msg.sender, f"chunk {seq} (next {reader.consumed})")
            return
        self.stats["chunks_received"] += 1
        reader.chunks[seq] = payload[1]
        reader.wake()

    def consumed(self, reader: Reader) -> None:
        """The caller took a chunk: past half a window, tell the producer to send more."""
        if reader.consumed - reader.reported >= WINDOW // 2 and reader.producer:
            node = self._node_of(reader.producer)
            if node is not None:
                reader.reported = reader.consumed
                self._tell_more(node, [(reader.agent, reader.correlation_id, reader.consumed)])

    def _dropped(self, reason: str, where: str, detail: str) -> None:
        self.stats["chunks_dropped"] += 1
        self._drop(reason, where, detail)

    # -- the writing side ------------------------------------------------

    def open_writer(self, request: Message) -> Writer:
        writer = Writer(request.sender, self._node_of(request.sender))
        self.writers[(request.sender, request.correlation_id)] = writer
        return writer

    def close_writer(self, request: Message, writer: Writer) -> None:
        key = (request.sender, request.correlation_id)
        if self.writers.get(key) is writer:
            del self.writers[key]

    def more(self, sender: str, items: list[tuple[str, str, int]]) -> None:
        """Node address ``sender`` says its agents consumed this much of these streams."""
        if not sender.startswith(NODE_ADDRESS_PREFIX):
            return
        node = sender[len(NODE_ADDRESS_PREFIX):]
        for requester, correlation_id, consumed in items:
            writer = self.writers.get((requester, correlation_id))
            if writer is None:
                continue  # ended meanwhile
            if writer.node != node:
                writer.node = self._node_of(writer.requester)  # unknown when the stream began, or moved
                if writer.node != node:
                    self._drop("spoofed_sender", node, "a window update for a stream another node reads")
                    continue
            if writer.acked < consumed <= writer.sent:
                writer.acked = consumed
                waiter = writer.waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    def error_reply(self, key: tuple[str, str], reply: Message) -> None:
        """A streamed request's error ``reply`` came for reader ``key``: note how many chunks went before it."""
        reader = self.readers.get(key)
        payload = reply.payload
        if reader is not None and isinstance(payload, dict) and payload.get("chunks").__class__ is int:
            reader.sent_before_error = max(0, min(payload["chunks"], reader.consumed + WINDOW))

    def close(self) -> None:
        for reader in list(self.readers.values()):
            reader.wake()
        self.readers.clear()
        self.writers.clear()
