"""What a handoff offer is (internal; :mod:`zmesh.agent` re-exports it): the
runtime turns a request on :data:`HANDOFF_TOPIC` into a :class:`Handoff`
for the target agent's ``on_handoff`` handler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..message import Message

__all__ = ["HANDOFF_TOPIC", "Handoff"]

HANDOFF_TOPIC = "zmesh.handoff"


@dataclass(frozen=True, slots=True)
class Handoff:
    """A task offered to this agent: accept by returning True from on_handoff."""

    task_id: str
    sender: str
    context: Any
    artifacts: tuple[str, ...]
    message: Message
