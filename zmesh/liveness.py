"""Liveness settings: how often a node beats, and how long a silent peer lasts.

A node sends a heartbeat on links where it sent nothing for ``heartbeat``
seconds; a peer not heard from for ``evasive_after`` seconds is pinged and
reported evasive; one silent for ``expire_after`` seconds is removed. The
per-peer state machine that applies them is the engine's
(:mod:`zmesh._engine.states`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LivenessConfig"]


@dataclass(frozen=True, slots=True)
class LivenessConfig:
    heartbeat: float = 0.5
    evasive_after: float = 1.5
    expire_after: float = 3.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat < self.evasive_after < self.expire_after:
            raise ValueError(
                "liveness needs 0 < heartbeat < evasive_after < expire_after, got "
                f"{self.heartbeat}, {self.evasive_after}, {self.expire_after}"
            )
