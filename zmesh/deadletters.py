"""Dead letters: a bounded ring of messages that could not be delivered."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator

from .message import Message

__all__ = ["DeadLetter", "DeadLetters", "REASONS"]

#: Why a message became a dead letter.
REASONS = (
    "not_found",  # no node hosts the target agent
    "timeout",  # a request got no reply in time
    "no_handler",  # the target had no handler for the topic
    "handler_error",  # the handler raised
    "expired",  # the ttl ran out before delivery
    "peer_lost",  # the target's node left before replying
    "busy",  # the target's inbox was full
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


class DeadLetters:
    """The last ``capacity`` dead letters of a node, oldest first.

    Iterable and sized; ``clear()`` empties it; ``await redeliver(entry)``
    sends the entry's message again (as fire-and-forget) and removes it.
    ``evicted`` counts entries pushed out because the ring was full.
    """

    def __init__(
        self,
        capacity: int,
        resend: Callable[[Message], Awaitable[None]],
    ) -> None:
        if capacity < 1:
            raise ValueError("dead letter capacity must be at least 1")
        self._ring: deque[DeadLetter] = deque(maxlen=capacity)
        self._resend = resend
        self.capacity = capacity
        self.evicted = 0
        self.total = 0

    def add(self, entry: DeadLetter) -> None:
        if len(self._ring) == self.capacity:
            self.evicted += 1
        self._ring.append(entry)
        self.total += 1

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(list(self._ring))

    def __len__(self) -> int:
        return len(self._ring)

    def __repr__(self) -> str:
        return f"<DeadLetters {len(self)}/{self.capacity} evicted={self.evicted}>"

    def clear(self) -> None:
        self._ring.clear()

    async def redeliver(self, entry: DeadLetter) -> None:
        """Send ``entry.message`` to its target again and drop the entry.

        Raises what a send raises (e.g. AgentNotRegistered); the entry stays
        in the ring if the retry fails.
        """
        await self._resend(entry.message)
        try:
            self._ring.remove(entry)
        except ValueError:
            pass
