"""Which Dispatch a node gets (internal): the plain one, or, with
``Node(tracing=...)``, the one in :mod:`._otel` that makes OpenTelemetry
spans. Only the second imports opentelemetry (the ``otel`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._runtime.dispatch import Dispatch

if TYPE_CHECKING:
    from .._engine import Engine
    from .._runtime.driver import Driver
    from ..node import Node

__all__ = ["make_dispatch"]

OTEL_HINT = "pip install 'zmesh-agents[otel]'"


def make_dispatch(
    tracing: Any, node: Node, engine: Engine, driver: Driver, dead_letter_capacity: int, workers: int | None
) -> Dispatch:
    """``tracing``: False (no spans), True (spans through OpenTelemetry's global
    TracerProvider, also one set after the node was made) or a TracerProvider."""
    if tracing is False or tracing is None:
        return Dispatch(node, engine, driver, dead_letter_capacity, workers)
    if tracing is not True and not callable(getattr(tracing, "get_tracer", None)):
        raise TypeError(f"tracing must be True, False or an OpenTelemetry TracerProvider, got {tracing!r}")
    try:
        from .otel import TracedDispatch
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("opentelemetry"):
            raise
        raise ImportError(
            f"Node(tracing=...) needs OpenTelemetry, which is not installed: {OTEL_HINT}"
        ) from exc
    return TracedDispatch(tracing, node, engine, driver, dead_letter_capacity, workers)
