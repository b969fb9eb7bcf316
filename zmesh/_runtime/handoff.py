"""What a handoff offer is and what came of one (internal; :mod:`zmesh.agent` re-exports it): the
runtime turns a request on :data:`HANDOFF_TOPIC` into a :class:`Handoff`
for the target agent's ``on_handoff`` handler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..message import Message

__all__ = ["HANDOFF_TOPIC", "Handoff", "HandoffResult"]

HANDOFF_TOPIC = "zmesh.handoff"


@dataclass(frozen=True, slots=True)
class Handoff:
    """A task offered to this agent: accept by returning True from on_handoff."""

    task_id: str
    sender: str
    context: Any
    artifacts: tuple[str, ...]
    message: Message


@dataclass(frozen=True, slots=True)
class HandoffResult:
    """What came of a handoff. ``accepted`` means the target now owns the task."""

    task_id: str
    target: str
    accepted: bool
    reason: str = ""
    latency: float = 0.0
    reply: Message | None = field(default=None, repr=False)
