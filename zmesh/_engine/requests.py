"""Requests waiting for replies: who they went to, and their deadlines.

Deadlines sit in one heap, so the engine needs one timer for all of them,
not one per request; entries of answered requests stay in the heap until
their deadline passes or a compaction drops them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import FrameError, PeerLost, Timeout
from ..message import Message
from .effects import FAILED, REPLIED

__all__ = ["Pending", "Requests"]

Key = tuple[str, str]  # (requesting agent, correlation id)


@dataclass(slots=True, eq=False)
class Pending:
    key: Key
    node_id: str  # the node the request went to
    deadline: float
    message: Message
    timeout: float = 0.0  # how long the caller gave it (for the error text)
    done: bool = False


class Requests:
    """The pending requests of one engine."""

    __slots__ = ("pending", "_heap", "_emit", "_settle")

    def __init__(self, emit: Callable[[tuple[Any, ...]], None], settle: Callable[[str], None]) -> None:
        self.pending: dict[Key, Pending] = {}
        self._heap: list[tuple[float, int, Pending]] = []
        self._emit = emit
        self._settle = settle  # a qos >= 1 request is no longer retransmitted

    def __len__(self) -> int:
        return len(self.pending)

    def __contains__(self, key: object) -> bool:
        return key in self.pending

    def keys(self) -> list[Key]:
        return list(self.pending)

    def to_node(self, node_id: str) -> list[Key]:
        """The qos 0 requests that went to ``node_id`` (qos >= 1 ones are sent again)."""
        return [k for k, p in self.pending.items() if p.node_id == node_id and not p.message.qos]

    def moved(self, msg: Message, node_id: str) -> None:
        """A qos >= 1 request was sent again, to ``node_id``."""
        pending = self.pending.get((msg.reply_to, msg.correlation_id))
        if pending is not None:
            pending.node_id = node_id

    def add(self, msg: Message, node_id: str, deadline: float, timeout: float = 0.0) -> Key:
        key = (msg.reply_to, msg.correlation_id)
        pending = Pending(key, node_id, deadline, msg, timeout)
        self.pending[key] = pending
        heap = self._heap
        if len(heap) > 1024 and len(heap) > 4 * len(self.pending):
            heap[:] = [(p.deadline, id(p), p) for p in self.pending.values()]
            heapq.heapify(heap)
        else:
            heapq.heappush(heap, (deadline, id(pending), pending))
        return key

    def forget(self, key: Key) -> None:
        """The caller gave up (cancelled): no reply is wanted any more."""
        pending = self.pending.pop(key, None)
        if pending is not None:
            pending.done = True
            if pending.message.qos:
                self._settle(pending.message.id)

    def resolve(self, msg: Message, node_id: str) -> bool:
        """A reply arrived from node ``node_id``; False when nobody waits for it
        (late or unknown). FrameError ``spoofed_reply`` when the request went
        to another node: only the node that hosts the agent it was sent to
        (or was sent again to) answers it."""
        key = (msg.target, msg.correlation_id)
        pending = self.pending.get(key)
        if pending is None:
            return False
        if pending.node_id != node_id:
            raise FrameError("spoofed_reply", f"a reply from node {node_id!r} to a request sent to another node")
        del self.pending[key]
        pending.done = True
        if pending.message.qos:
            self._settle(pending.message.id)
        self._emit((REPLIED, pending.key, msg))
        return True

    def fail_to(self, node_id: str, why: str) -> None:
        """The node the requests went to is gone: fail them all with PeerLost."""
        for key in self.to_node(node_id):
            pending = self.pending.pop(key)
            pending.done = True
            self._emit((FAILED, key, PeerLost(f"{why} before replying")))

    def fail_all(self, error: Exception) -> None:
        for key, pending in list(self.pending.items()):
            pending.done = True
            self._emit((FAILED, key, error))
        self.pending.clear()
        self._heap.clear()

    def expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now + 1e-9:
            _, _, pending = heapq.heappop(heap)
            if pending.done:
                continue
            pending.done = True
            del self.pending[pending.key]
            msg = pending.message
            if msg.qos:
                self._settle(msg.id)
            self._emit(
                (FAILED, pending.key,
                 Timeout(f"no reply from {msg.target!r} to {msg.topic!r} within {pending.timeout:.3g} s"))
            )
        while heap and heap[0][2].done:
            heapq.heappop(heap)

    def next_deadline(self) -> float:
        heap = self._heap
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf
