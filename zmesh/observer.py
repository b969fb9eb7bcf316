"""Receipts of collaboration outcomes, one per send/request/delegate/handoff/broadcast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Receipt", "Observer", "KINDS", "OUTCOMES"]

#: ``cancel`` is recorded on the node of a handler that its requester's cancel stopped.
KINDS = ("send", "request", "delegate", "handoff", "broadcast", "cancel", "stream")
#: ``cancelled``: the caller cancelled its request (its handler is told to stop).
OUTCOMES = ("success", "failure", "timeout", "not_found", "cancelled")


@dataclass(frozen=True, slots=True)
class Receipt:
    """What happened to one interaction, as seen by the agent that started it.

    ``latency`` is in seconds on the node's clock; ``error`` names the error
    type for failures ("" on success); ``reached`` is the broadcast count.
    """

    kind: str
    outcome: str
    latency: float
    sender: str
    target: str
    topic: str
    trace_id: str
    correlation_id: str = ""
    error: str = ""
    reached: int = 0


Observer = Callable[[Receipt], object]
