"""Credit-based flow control per (sender node, receiving agent) (internal).

The model is AMQP link credit / HTTP/2 windows. A sender may have at most
``window`` messages (and about ``window_bytes`` bytes) to one agent that the
agent's node has not yet taken out of the agent's inbox. The receiver
counts what it took (handled, expired or dropped) and reports the
cumulative total in a CREDIT item whenever half a window has been taken
since its last report, so a steady stream costs one small item per
``window / 2`` messages. A sender whose window closes says so once (a
BLOCKED item with its cumulative sent count); the receiver then reports
what it took at once, and until it has reported up to that count, again
whenever half of what is still unreported of it has been taken. The steps
halve down to a single message, so a blocked sender never waits on a
threshold it cannot reach (its byte window may close long before half a
window of messages), yet a sender that is simply faster than its
receiver, blocked again and again, costs a few reports per window rather
than one per message.

Totals are cumulative, so a lost or repeated report heals with the next
one; they are kept per incarnation and forgotten when the peer leaves.
The sender's byte count is kept from the sizes it sent, released in send
order as the reported count grows (handling order may differ: priority).
Only messages over ``window_bytes / window`` (4 KiB) are counted in bytes:
the message window already bounds the smaller ones to as many bytes again,
and a send loop of small messages skips the bookkeeping.

Messages to the node's own agents use the same windows (node key
:data:`LOCAL`), settled at once without items.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from .._wire.codec import Blocked, Credit, encode_control
from .config import LOCAL
from .effects import CREDIT

if TYPE_CHECKING:
    from .core import Engine

__all__ = ["Flow"]

Key = tuple[str, str]  # (node id or LOCAL, agent id)

#: Receiving windows kept at most for agents not hosted here (made-up names).
MAX_WINDOWS = 65536


class _Out:
    """What we sent to one agent and what its node reported taken."""

    __slots__ = ("sent", "taken", "sizes", "bytes", "blocked")

    def __init__(self) -> None:
        self.sent = 0
        self.taken = 0
        self.sizes: deque[tuple[int, int]] = deque()  # (its number in ``sent``, size) of each big one
        self.bytes = 0
        self.blocked = False


class _In:
    """What one sender's node sent to one of our agents, and what we took."""

    __slots__ = ("taken", "reported", "wanted")

    def __init__(self) -> None:
        self.taken = 0
        self.reported = 0
        self.wanted = 0  # the sender is blocked until we report this total


class Flow:
    def __init__(self, engine: Engine, window: int, window_bytes: int) -> None:
        self.e = engine
        self.window = window
        self.window_bytes = window_bytes
        self.half = max(1, window // 2)
        #: Messages bigger than this count in ``window_bytes`` (see the module's doc).
        self.big = max(1, window_bytes // window)
        self.out: dict[Key, _Out] = {}
        self.inn: dict[Key, _In] = {}

    # -- sending -----------------------------------------------------------

    def is_open(self, node: str, agent: str) -> bool:
        """May one more message go to ``agent`` on ``node``? When not, the
        receiver is told once that we wait (a CREDIT effect wakes us)."""
        out = self.out.get((node, agent))
        if out is None:
            return True
        outstanding = out.sent - out.taken
        if outstanding < self.window and (out.bytes < self.window_bytes or outstanding == 0):
            return True
        if not out.blocked:
            out.blocked = True
            self.e.stats["credit_waits"] += 1
            if node != LOCAL:
                self.e.enqueue(node, encode_control(Blocked(agent, out.sent)))
        return False

    def sent(self, node: str, agent: str, size: int) -> None:
        key = (node, agent)
        out = self.out.get(key)
        if out is None:
            out = self.out[key] = _Out()
        out.sent += 1
        if size > self.big:
            out.sizes.append((out.sent, size))
            out.bytes += size

    def granted(self, node: str, agent: str, total: int) -> None:
        """The node reports ``total`` of our messages to ``agent`` taken."""
        out = self.out.get((node, agent))
        if out is None or total <= out.taken:
            return
        total = min(total, out.sent)
        sizes = out.sizes
        while sizes and sizes[0][0] <= total:
            out.bytes -= sizes.popleft()[1]
        out.taken = total
        if out.blocked:
            out.blocked = False
            self.e.out((CREDIT, node, agent))
        if out.taken == out.sent and node == LOCAL:
            del self.out[(node, agent)]  # totals to a peer are cumulative: kept until it leaves

    # -- receiving ---------------------------------------------------------

    def taken(self, origin: str, agent: str) -> None:
        """A message from ``origin``'s node left ``agent``'s inbox (handled,
        expired or dropped): its credit goes back (nothing once the engine
        is closed)."""
        if self.e.closed:
            return
        if origin == LOCAL:
            out = self.out.get((LOCAL, agent))
            if out is not None:
                self.granted(LOCAL, agent, out.taken + 1)
            return
        key = (origin, agent)
        inn = self.inn.get(key)
        if inn is None:
            inn = self._new_in(key)
            if inn is None:
                return
        inn.taken += 1
        unreported = inn.taken - inn.reported
        if unreported >= self.half or (inn.wanted > inn.reported and 2 * unreported >= inn.wanted - inn.reported):
            self._report(origin, agent, inn)

    def on_blocked(self, origin: str, agent: str, sent: int) -> None:
        key = (origin, agent)
        inn = self.inn.get(key)
        if inn is None:
            inn = self._new_in(key)
            if inn is None:
                return
        inn.wanted = max(inn.wanted, sent)
        if inn.taken > inn.reported:
            self._report(origin, agent, inn)

    def _new_in(self, key: Key) -> _In | None:
        """A new receiving window; None (not kept, counted) when the peer names
        an agent not hosted here and windows are already at their bound: a
        peer naming made-up agents must not grow them for as long as it stays."""
        if len(self.inn) >= MAX_WINDOWS and key[1] not in self.e.agents:
            self.e.drop("too_many_windows", key[0], "flow control for an agent not hosted here")
            return None
        inn = self.inn[key] = _In()
        return inn

    def _report(self, origin: str, agent: str, inn: _In) -> None:
        inn.reported = inn.taken
        e = self.e
        e.enqueue(origin, encode_control(Credit(agent, inn.taken)))
        # It leaves now (with what was queued for that node before it), not
        # when the batch of frames it was taken in ends: the sender refills
        # its window while the rest of the batch is handled, and never idles
        # waiting for a report that sits in a queue.
        e.flush_to(origin)
        e.stats["credit_reports"] += 1

    # -- departures --------------------------------------------------------

    def forget(self, node: str) -> None:
        """The node left (or restarted): its windows start over; waiters wake."""
        for key in [k for k in self.out if k[0] == node]:
            if self.out.pop(key).blocked:
                self.e.out((CREDIT, node, key[1]))
        for key in [k for k in self.inn if k[0] == node]:
            del self.inn[key]
