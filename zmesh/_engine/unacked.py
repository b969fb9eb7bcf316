"""The sending side's count of unacknowledged one-way qos >= 1 messages, by
target agent and by sending agent, against :class:`zmesh.QosLimits`
(internal): a receiver that takes messages and never acknowledges them
cannot make this node keep them without end.

While everything this node has outstanding is under the smallest of the
limits (in messages and in bytes), no target or sender can be at its own,
so nothing is counted per target or sender and a send pays two
comparisons (:class:`~.reliable.Reliable` makes them). Past that, the
tallies are built from what is outstanding and kept, exact, until it is
back under half.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..errors import Backpressure
from ..message import Message
from ..qos import QosLimits

if TYPE_CHECKING:
    from .core import Engine

__all__ = ["Unacked"]

Tally = list[int]  # [messages, bytes]


class Unacked:
    __slots__ = ("limits", "e", "count_floor", "bytes_floor", "active", "by_target", "by_sender")

    def __init__(self, limits: QosLimits, engine: Engine) -> None:
        self.limits = limits
        self.e = engine
        self.count_floor = min(limits.unacked_per_target, limits.unacked_per_sender)
        self.bytes_floor = min(limits.unacked_bytes_per_target, limits.unacked_bytes_per_sender)
        self.active = False  # the tallies below are kept
        self.by_target: dict[str, Tally] = {}
        self.by_sender: dict[str, Tally] = {}

    def start(self, outstanding: Iterable[tuple[Message, int]]) -> None:
        """Count per target and sender from now on, starting with ``outstanding`` (messages and sizes)."""
        self.active = True
        for msg, size in outstanding:
            self.add(msg, size, False)

    def stop(self) -> None:
        self.active = False
        self.by_target.clear()
        self.by_sender.clear()

    def add(self, msg: Message, size: int, check: bool) -> None:
        """Count ``msg`` (``size`` bytes encoded); with ``check``, Backpressure
        (counting nothing) if its target or its sender is at its limit."""
        target = self.by_target.get(msg.target)
        sender = self.by_sender.get(msg.sender)
        if check:
            limits = self.limits
            # A message bigger than a byte limit still goes when nothing else is outstanding.
            if target is not None and (target[0] >= limits.unacked_per_target
                                       or target[1] + size > limits.unacked_bytes_per_target):
                self._refuse(msg, "target", target)
            if sender is not None and (sender[0] >= limits.unacked_per_sender
                                       or sender[1] + size > limits.unacked_bytes_per_sender):
                self._refuse(msg, "sender", sender)
        if target is None:
            target = self.by_target[msg.target] = [0, 0]
        if sender is None:
            sender = self.by_sender[msg.sender] = [0, 0]
        target[0] += 1
        target[1] += size
        sender[0] += 1
        sender[1] += size

    def remove(self, msg: Message, size: int) -> None:
        """``msg`` (counted by :meth:`add`) is settled."""
        target = self.by_target[msg.target]
        target[0] -= 1
        target[1] -= size
        if not target[0]:
            del self.by_target[msg.target]
        sender = self.by_sender[msg.sender]
        sender[0] -= 1
        sender[1] -= size
        if not sender[0]:
            del self.by_sender[msg.sender]

    def _refuse(self, msg: Message, per: str, tally: Tally) -> None:
        self.e.stats["unacked_refused"] += 1
        count = getattr(self.limits, f"unacked_per_{per}")
        size = getattr(self.limits, f"unacked_bytes_per_{per}")
        whom = f"to agent {msg.target!r}" if per == "target" else f"from agent {msg.sender!r}"
        raise Backpressure(
            f"node {self.e.node_id!r} has {tally[0]} qos >= 1 messages ({tally[1]} bytes) {whom} not acknowledged "
            f"yet, the most its QosLimits allow (unacked_per_{per}={count}, unacked_bytes_per_{per}={size}); "
            "nothing was sent")
