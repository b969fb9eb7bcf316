"""Peer liveness: a small state machine per peer, driven by the clock. No I/O.

States and the events that move between them (``TRANSITIONS`` is the whole
machine; anything not in it leaves the state unchanged)::

    joining --hello--> alive --quiet--> evasive --heard--> alive
       |                 |                  |
       +-----silent------+------silent------+--> gone   (also on bye)

``quiet`` fires when nothing was heard for ``evasive_after`` seconds (the
node then pings), ``silent`` after ``expire_after`` seconds (the node removes
the peer). Heartbeats go out on links where nothing was sent for
``heartbeat`` seconds, so a quiet but healthy peer is never expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["LivenessConfig", "PeerLiveness", "TRANSITIONS", "STATES"]

STATES: Final = ("joining", "alive", "evasive", "gone")

TRANSITIONS: Final[dict[tuple[str, str], str]] = {
    ("joining", "hello"): "alive",
    ("joining", "silent"): "gone",
    ("joining", "bye"): "gone",
    ("alive", "hello"): "alive",
    ("alive", "quiet"): "evasive",
    ("alive", "silent"): "gone",
    ("alive", "bye"): "gone",
    ("evasive", "hello"): "alive",
    ("evasive", "heard"): "alive",
    ("evasive", "silent"): "gone",
    ("evasive", "bye"): "gone",
}


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


class PeerLiveness:
    """Liveness of one peer. Call ``heard``/``sent`` as traffic flows and
    ``tick(now)`` periodically; ``tick`` returns what the node should do:
    a subset of ``{"heartbeat", "ping", "expire"}``."""

    __slots__ = ("config", "state", "last_heard", "last_sent")

    def __init__(self, config: LivenessConfig, now: float) -> None:
        self.config = config
        self.state = "joining"
        self.last_heard = now
        self.last_sent = now

    def event(self, name: str) -> str:
        self.state = TRANSITIONS.get((self.state, name), self.state)
        return self.state

    def heard(self, now: float) -> None:
        self.last_heard = now
        if self.state == "evasive":
            self.event("heard")

    def sent(self, now: float) -> None:
        self.last_sent = now

    def tick(self, now: float) -> set[str]:
        actions: set[str] = set()
        if self.state == "gone":
            return actions
        silence = now - self.last_heard
        if silence >= self.config.expire_after:
            self.event("silent")
            return {"expire"}
        if silence >= self.config.evasive_after and self.state == "alive":
            self.event("quiet")
            actions.add("ping")
        if now - self.last_sent >= self.config.heartbeat:
            actions.add("heartbeat")
        return actions
