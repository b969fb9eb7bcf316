"""Bounds on what QoS 1 and 2 keep: ``Node(qos_limits=QosLimits(...))``.

A node keeps every one-way message it sent with ``qos >= 1`` until the
receiving node acknowledges it, in memory and, with a ``store``, on disk.
A receiver that takes messages and never acknowledges them, or that
vanishes, would have it keep them without end; these bound how many, how
many bytes, and for how long. They apply where zmesh itself carries QoS
(the ZeroMQ and in-process transports); over a broker, the broker's own
limits do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["QosLimits", "fair_level"]


@dataclass(frozen=True, slots=True)
class QosLimits:
    """``max_ttl``: the longest ttl (seconds) of a qos >= 1 one-way message.
    A send with a longer one raises InvalidMessage; one without a ttl is
    sent again for at most this long (then dead-lettered ``expired``); a
    message received with a longer one gets this one.

    ``unacked_per_target``, ``unacked_bytes_per_target``: the unacknowledged
    qos >= 1 one-way messages (and their encoded bytes) this node keeps for
    one target agent; ``unacked_per_sender``, ``unacked_bytes_per_sender``:
    the same for one sending agent of this node, whatever the targets. A send
    past either raises Backpressure at once, sending nothing
    (``stats()["unacked_refused"]``). A receiver that acknowledges as it
    handles never comes near them: flow control holds a sender at 2048
    messages (8 MiB) per target before. Requests are bounded by their
    timeout instead.
    """

    max_ttl: float = 86_400.0
    unacked_per_target: int = 8192
    unacked_bytes_per_target: int = 64 << 20
    unacked_per_sender: int = 65_536
    unacked_bytes_per_sender: int = 256 << 20

    def __post_init__(self) -> None:
        ttl = self.max_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
            raise ValueError(f"max_ttl must be a positive number of seconds, got {ttl!r}")
        for name in ("unacked_per_target", "unacked_bytes_per_target", "unacked_per_sender",
                     "unacked_bytes_per_sender"):
            value = getattr(self, name)
            if value.__class__ is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


def fair_level(sizes: list[int], excess: int) -> int:
    """Internal: how far to cut the biggest of several shares (``sizes``,
    biggest first) so that ``excess`` goes, the biggest first and all those
    cut to one level: ``sum(max(0, n - level) for n in sizes) >= excess``.
    A share at or below the level loses nothing."""
    total = 0
    for k, n in enumerate(sizes, 1):
        total += n
        below = sizes[k] if k < len(sizes) else 0
        if total - k * below >= excess:
            return max(below, (total - excess) // k)
    return 0
