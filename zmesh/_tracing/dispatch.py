"""Which Dispatch a node gets (internal): the plain one, or, with
``Node(tracing=...)``, the one in :mod:`.otel` that makes OpenTelemetry
spans. Only the second imports opentelemetry (the ``otel`` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from .._runtime.config import RuntimeConfig
from .._runtime.dispatch import Dispatch
from .._runtime.port import HostedAgent, MeshPort
from .._runtime.watch import Watch

__all__ = ["make_dispatch"]

OTEL_HINT = "pip install 'zmesh-agents[otel]'"


def make_dispatch(
    tracing: Any,
    config: RuntimeConfig,
    mesh: MeshPort,
    agents: Mapping[str, HostedAgent],
    watch: Watch,
    node_stats: Callable[[], dict[str, Any]],
) -> Dispatch:
    """``tracing``: False (no spans), True (spans through OpenTelemetry's global
    TracerProvider, also one set after the node was made) or a TracerProvider."""
    if tracing is False or tracing is None:
        return Dispatch(config, mesh, agents, watch, node_stats)
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
    return TracedDispatch(tracing, config, mesh, agents, watch, node_stats)
