"""The option checks the broker transports' constructors share (internal)."""

from __future__ import annotations

__all__ = ["check_counts", "check_liveness", "check_seconds"]


def check_seconds(**values: float) -> None:
    """Each a number of seconds above 0 (and below an hour); ValueError naming it otherwise."""
    for what, value in values.items():
        if value.__class__ not in (int, float) or not 0 < value < 3600:
            raise ValueError(f"{what} must be a number of seconds above 0, got {value!r}")


def check_counts(**values: int) -> None:
    """Each an int of at least 1; ValueError naming it otherwise."""
    for what, count in values.items():
        if count.__class__ is not int or count < 1:
            raise ValueError(f"{what} must be an int of at least 1, got {count!r}")


def check_liveness(heartbeat: float, expiry: float, max_age: float | None = None) -> None:
    """A record renewed every ``heartbeat`` must outlive it; ``max_age``: at least a second."""
    if max_age is not None and (max_age.__class__ not in (int, float) or not 1 <= max_age):
        raise ValueError(f"max_age must be a number of seconds of at least 1, got {max_age!r}")
    if expiry <= heartbeat:
        raise ValueError(f"expiry ({expiry} s) must be longer than heartbeat ({heartbeat} s)")


def blind_time(last: float, now: float, heartbeat: float, expiry: float) -> float:
    """Seconds this node's own loop could not watch its peers' renewals: a
    beat (due every ``heartbeat`` after ``last``) that comes late by more
    than half the margin ``expiry`` leaves means the loop was stalled, and
    what the peers sent meanwhile is still unread. That time is not their
    silence. 0.0 for a beat on time."""
    late = now - last - heartbeat
    return late if late > (expiry - heartbeat) / 2 else 0.0
