"""One agent's inbox (internal): bounded, ordered by priority then arrival.

A message for an agent starts its handler at once while fewer than
``concurrency`` of the agent's handlers run and nothing waits before it;
otherwise it waits here. The inbox holds at most ``max_count`` messages and
about ``max_bytes`` bytes (their share of the frames they came in); the
caller decides what to do with a message that does not fit. Priority 0 is
taken first, 5 last; equal priorities in arrival order.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any

__all__ = ["Inbox", "Entry", "DEFAULT_CONCURRENCY", "DEFAULT_INBOX", "DEFAULT_INBOX_BYTES"]

DEFAULT_CONCURRENCY = 16
DEFAULT_INBOX = 16384  # eight senders' credit windows (CREDIT_WINDOW)
DEFAULT_INBOX_BYTES = 64 << 20


@dataclass(slots=True)
class Entry:
    msg: Any  # a zmesh.Message
    broadcast: bool
    origin: str  # the sender's node (or LOCAL); "" for a broadcast
    size: int
    #: Does someone wait for an answer (a direct message with a correlation id)?
    request: bool
    #: A broadcast's subscription: its pattern, or "" for the on() handlers (see _routes.Routes).
    route: str = ""
    #: When a request's handler started (the node's monotonic clock), for its processing time.
    started: float = -1.0


class Inbox:
    __slots__ = ("concurrency", "max_count", "max_bytes", "running", "bytes", "broadcasts", "pumping", "slow",
                 "heap", "_seq", "handled", "dropped", "dead_letters", "requests", "errors", "request_time")

    def __init__(self, concurrency: int, max_count: int, max_bytes: int) -> None:
        self.concurrency = concurrency
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.running = 0
        self.bytes = 0
        self.broadcasts = 0
        self.pumping = False  # handlers are being started from it (inline ones end inside)
        self.slow = False  # dropping broadcasts right now (an event went out)
        #: What waits, as a heap of (priority, arrival, entry); others only test it for emptiness.
        self.heap: list[tuple[int, int, Entry]] = []
        self._seq = itertools.count()
        # The agent's own counters (``Node.stats()["by_agent"]``): handlers
        # started, messages dropped because the inbox was full, dead letters.
        self.handled = 0
        self.dropped = 0
        self.dead_letters = 0
        #: Requests whose handler ended, those that failed, and the seconds they took in all (services).
        self.requests = 0
        self.errors = 0
        self.request_time = 0.0

    def __len__(self) -> int:
        return len(self.heap)

    def may_start(self) -> bool:
        """Can a new message's handler start now, jumping no queue?"""
        return self.running < self.concurrency and not self.heap

    def fits(self, size: int, broadcast: bool = False) -> bool:
        """Room for one more? Broadcasts (uncredited) may take at most half
        the inbox, so they never crowd out direct messages senders wait for."""
        if len(self.heap) >= self.max_count:
            return False
        if broadcast and self.broadcasts >= self.max_count // 2:
            return False
        return self.bytes + size <= self.max_bytes or not self.heap  # one oversized message may wait alone

    def put(self, entry: Entry) -> None:
        heapq.heappush(self.heap, (entry.msg.priority, next(self._seq), entry))
        self.bytes += entry.size
        self.broadcasts += entry.broadcast

    def take(self) -> Entry | None:
        """The next message to handle, if a handler may start now."""
        if self.running >= self.concurrency or not self.heap:
            return None
        entry = heapq.heappop(self.heap)[2]
        self.bytes -= entry.size
        self.broadcasts -= entry.broadcast
        return entry

    def drain(self) -> list[Entry]:
        """Everything still waiting, emptied out (the agent left)."""
        entries = [item[2] for item in sorted(self.heap)]
        self.heap.clear()
        self.bytes = 0
        self.broadcasts = 0
        return entries
