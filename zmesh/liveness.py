"""Liveness settings: how a node notices that a peer is gone.

Two layers, so that a handler that blocks the event loop does not get its
node counted as dead:

* **Link heartbeats** (``link_heartbeat``, ``link_timeout``): ZeroMQ's own
  ZMTP PING/PONG on every link to a peer. libzmq's I/O thread sends and
  answers them without the GIL or the event loop, so a node whose loop is
  blocked still answers, while a frozen process (SIGSTOP) or a cut link is
  noticed after ``link_timeout`` seconds. A killed process is noticed at
  once: its kernel closes the TCP connection. Either way the peer is removed
  and knocked on again (it may come back). ``link_heartbeat=None`` turns
  this layer off.
* **Application heartbeats** (``heartbeat``, ``evasive_after``,
  ``expire_after``): a node beats on links where it sent nothing for
  ``heartbeat`` seconds; a peer not heard from for ``evasive_after`` seconds
  is pinged and reported evasive; one silent for ``expire_after`` seconds is
  removed. With link heartbeats on this is the slow fallback, so its
  default expiry (120 s) outlasts a loop blocked for a minute.

The per-peer state machine that applies them is the engine's
(:mod:`zmesh._engine.states`); docs/reliability.md has the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LivenessConfig"]


@dataclass(frozen=True, slots=True)
class LivenessConfig:
    heartbeat: float = 1.0
    evasive_after: float = 10.0
    expire_after: float = 120.0
    link_heartbeat: float | None = 0.5
    link_timeout: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat < self.evasive_after < self.expire_after:
            raise ValueError(
                "liveness needs 0 < heartbeat < evasive_after < expire_after, got "
                f"{self.heartbeat}, {self.evasive_after}, {self.expire_after}"
            )
        if self.link_heartbeat is not None and not 0 < self.link_heartbeat < self.link_timeout:
            raise ValueError(
                "liveness needs 0 < link_heartbeat < link_timeout (or link_heartbeat=None), got "
                f"{self.link_heartbeat}, {self.link_timeout}"
            )
