"""What the runtime knows of its node (internal)."""

from __future__ import annotations

from dataclasses import dataclass

from ..clock import Clock

__all__ = ["RuntimeConfig"]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """What the runtime knows of its node."""

    node_id: str
    mesh: str
    clock: Clock
    #: How long a send without a timeout waits for a target the mesh is still learning of.
    settle_timeout: float
    dead_letter_capacity: int
    #: Threads for plain handlers: None, a pool per agent; N, one pool of N.
    workers: int | None
