"""Dead letters: a ring of messages that could not be delivered, bounded in
entries and in bytes."""

from __future__ import annotations

import sys
from collections import deque
from itertools import islice
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator

from .message import Message

__all__ = ["DeadLetter", "DeadLetters", "REASONS", "DEFAULT_MAX_BYTES", "approx_size"]

#: What the dead letters of one node may hold, payloads included (about).
DEFAULT_MAX_BYTES = 64 << 20
_SAMPLE = 64  # children of a container looked at (the rest are assumed alike)
_DEPTH = 8

#: Why a message became a dead letter.
REASONS = (
    "not_found",  # no node hosts the target agent
    "timeout",  # a request got no reply in time
    "no_handler",  # the target had no handler for the topic
    "handler_error",  # the handler raised
    "expired",  # the ttl ran out before delivery
    "peer_lost",  # the target's node left before replying
    "busy",  # the target's inbox was full
    "policy",  # keyed mode: Node(policy=...) does not let the sender's key use its topic
    "unacked",  # a QoS 1/2 message was not acknowledged when its node closed (no store)
)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str
    message: Message
    target: str
    trace_id: str
    time: float
    detail: str = ""


def approx_size(value: Any, depth: int = _DEPTH) -> int:
    """About how many bytes ``value`` holds: exact for text and bytes, a
    sample of the first children for a large container (cheap for any size)."""
    cls = value.__class__
    if cls is str or cls is bytes or cls is bytearray:
        return 49 + len(value)
    if cls is int or cls is float or cls is bool or value is None:
        return 28
    if cls is dict:
        n = len(value)
        if not n or depth <= 0:
            return 64 + 100 * n
        sample = [approx_size(k, depth - 1) + approx_size(v, depth - 1)
                  for k, v in islice(value.items(), _SAMPLE)]
        return 64 + 16 * n + sum(sample) * n // len(sample)
    if cls is list or cls is tuple or cls is set or cls is frozenset:
        n = len(value)
        if not n or depth <= 0:
            return 56 + 8 * n
        sample = [approx_size(v, depth - 1) for v in islice(value, _SAMPLE)]
        return 56 + 8 * n + sum(sample) * n // len(sample)
    return sys.getsizeof(value, 64)


def _letter_size(entry: DeadLetter) -> int:
    msg = entry.message
    text = (len(msg.id) + len(msg.sender) + len(msg.target) + len(msg.topic) + len(msg.correlation_id)
            + len(msg.reply_to) + len(msg.trace_id) + len(entry.detail) + len(entry.target))
    return 400 + text + approx_size(msg.payload)


class DeadLetters:
    """The last ``capacity`` dead letters of a node, oldest first, holding
    at most about ``max_bytes`` (payloads included; one larger letter is
    still kept, alone).

    Iterable and sized; ``clear()`` empties it; ``await redeliver(entry)``
    sends the entry's message again (as fire-and-forget) and removes it.
    ``evicted`` counts entries pushed out because the ring was full (in
    entries or in bytes); ``bytes`` is about what it holds now.
    """

    def __init__(
        self,
        capacity: int,
        resend: Callable[[Message], Awaitable[None]],
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if capacity < 1:
            raise ValueError("dead letter capacity must be at least 1")
        if max_bytes < 1:
            raise ValueError("dead letter max_bytes must be at least 1")
        self._ring: deque[tuple[DeadLetter, int]] = deque()
        self._resend = resend
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evicted = 0
        self.total = 0

    def add(self, entry: DeadLetter) -> None:
        size = _letter_size(entry)
        ring = self._ring
        while ring and (len(ring) >= self.capacity or self.bytes + size > self.max_bytes):
            self.bytes -= ring.popleft()[1]
            self.evicted += 1
        ring.append((entry, size))
        self.bytes += size
        self.total += 1

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter([entry for entry, _ in self._ring])

    def __len__(self) -> int:
        return len(self._ring)

    def __repr__(self) -> str:
        return f"<DeadLetters {len(self)}/{self.capacity} ({self.bytes} bytes) evicted={self.evicted}>"

    def clear(self) -> None:
        self._ring.clear()
        self.bytes = 0

    async def redeliver(self, entry: DeadLetter) -> None:
        """Send ``entry.message`` to its target again and drop the entry.

        Raises what a send raises (e.g. AgentNotRegistered); the entry stays
        in the ring if the retry fails.
        """
        await self._resend(entry.message)
        for i, (kept, size) in enumerate(self._ring):
            if kept is entry:
                del self._ring[i]
                self.bytes -= size
                break
