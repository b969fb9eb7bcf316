"""``node.services()`` (internal): each capability's providers and how they
do, as the NATS services framework's ``$SRV.STATS`` gives them, gathered
from every provider's node's ``stats()["by_agent"]``."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Awaitable, Callable

from ..errors import InvalidMessage, ZmeshError
from ..registry import Registry

__all__ = ["collect", "average_ms"]


def average_ms(requests: Any, request_ms: Any) -> float | None:
    """A provider's average time per request answered (``stats()["by_agent"]``'s
    ``request_ms / requests``); None where none was, or the figures are not counts."""
    if requests.__class__ is not int or requests <= 0 or not isinstance(request_ms, (int, float)) \
            or not math.isfinite(request_ms):
        return None
    return round(request_ms / requests, 3)


async def collect(registry: Registry, ask: Callable[[str, float], Awaitable[dict[str, Any]]],
                  capability: str | None, timeout: float) -> dict[str, dict[str, Any]]:
    """By capability (only ``capability`` when given): ``providers`` (one map each:
    agent, node, requests, errors, average_ms, running, inbox; or agent, node,
    error for one whose node did not answer in ``timeout``), and the totals.
    ``average_ms`` is None where no request was answered (0 would read as a time)."""
    if capability is not None and (not isinstance(capability, str) or not capability):
        raise InvalidMessage(f"capability must be None or a non-empty string, got {capability!r}")
    wanted: dict[str, list[tuple[str, str]]] = {}
    for agent_id, info in sorted(registry.agents().items()):
        for cap in info.capabilities:
            if capability is None or cap == capability:
                wanted.setdefault(cap, []).append((agent_id, info.node_id))
    nodes = sorted({node for providers in wanted.values() for _, node in providers})
    answers = await asyncio.gather(*(ask(node, timeout) for node in nodes), return_exceptions=True)
    by_node = dict(zip(nodes, answers))
    out: dict[str, dict[str, Any]] = {}
    for cap, providers in sorted(wanted.items()):
        rows: list[dict[str, Any]] = []
        for agent_id, node in providers:
            stats = by_node[node]
            if isinstance(stats, BaseException):
                if not isinstance(stats, (ZmeshError, TimeoutError)):
                    raise stats
                rows.append({"agent": agent_id, "node": node, "error": f"{type(stats).__name__}: {stats}"})
                continue
            try:
                figures = stats.get("by_agent", {}).get(agent_id, {})
                requests = int(figures.get("requests", 0))
                rows.append({
                    "agent": agent_id, "node": node, "requests": requests, "errors": int(figures.get("errors", 0)),
                    "average_ms": average_ms(requests, float(figures.get("request_ms", 0.0))),
                    "running": int(figures.get("running", 0)), "inbox": int(figures.get("inbox", 0)),
                })
            except (AttributeError, TypeError, ValueError, OverflowError):
                rows.append({"agent": agent_id, "node": node, "error": "InvalidMessage: its node's stats are malformed"})
        answered = [row for row in rows if "error" not in row]
        requests = sum(row["requests"] for row in answered)
        out[cap] = {
            "providers": rows,
            "requests": requests,
            "errors": sum(row["errors"] for row in answered),
            "average_ms": round(sum(row["average_ms"] * row["requests"] for row in answered if row["requests"])
                                / requests, 3) if requests else None,
        }
    return out
