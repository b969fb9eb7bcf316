"""``zmesh top`` (internal): a live view of a running mesh.

Everything it shows comes from the public API, so a dashboard of your own can
show the same: ``node.registry`` (nodes, endpoints, incarnations, agents,
capabilities, subscriptions), ``node.events()`` (joins, leaves, restarts,
refusals, seen from the moment top joined), and ``await
node.peer_stats(node_id)`` for each node's ``stats()``; its round trip is
the RTT shown. Rates are the difference of two answers of the same
incarnation divided by the difference of their ``uptime`` (the answering
node's own clock), so the network's jitter does not move them.

Other ``zmesh`` commands' probe nodes (named
:data:`zmesh._tools.cli.commands.CLI_NODE_PREFIX`...) would fill the events with
four lines a command: their joins and leaves (of the node and its agent) are
folded into counts, ``cli_probes``, and their node rows carry
``cli_probe: true``. Anything else about them (a refusal, say) stays an event.

The drawing (``rich``, an optional extra) is :mod:`zmesh._tools.top.view`'s; this
module only gathers, and prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from typing import Any, AsyncIterator, Callable

from ..._runtime.services import average_ms
from ...errors import ZmeshError
from ...node import Node
from ...registry import MeshEvent, NodeRecord
from ..cli.commands import is_cli_probe, join, stdout_gone
from ..cli.json_output import dumps

__all__ = ["TopCollector", "top", "EVENTS_KEPT", "FOLDED_KINDS", "RICH_MISSING"]

#: How many of the latest mesh events a view carries.
EVENTS_KEPT = 50

#: The events of a CLI probe node that are folded into ``cli_probes``.
FOLDED_KINDS = frozenset({"peer_joined", "peer_left", "agent_joined", "agent_left", "subscribed",
                          "unsubscribed"})

RICH_MISSING = (
    "the live view draws with the 'rich' package, which is not installed: "
    "pip install 'zmesh-agents[top]' (or add --json, which needs nothing more)"
)

Stats = dict[str, Any]


def _rate(now: Stats | None, before: Stats | None, count: Callable[[Stats], int | None]) -> float | None:
    """Per second of the answering node's clock, between two answers of one incarnation."""
    if now is None or before is None or now.get("incarnation") != before.get("incarnation"):
        return None
    seconds = float(now["uptime"]) - float(before["uptime"])
    new, old = count(now), count(before)
    if seconds <= 0 or new is None or old is None:
        return None
    return round(max(0, new - old) / seconds, 3)


def _sent(stats: Stats) -> int:
    """What the node's agents sent: messages, requests and broadcasts."""
    return int(stats["messages_sent"]) + int(stats["requests_sent"]) + int(stats["broadcasts"])


def _agent_count(agent_id: str, key: str) -> Callable[[Stats], int | None]:
    def count(stats: Stats) -> int | None:
        figures = stats.get("by_agent", {}).get(agent_id)
        return None if figures is None else int(figures[key])

    return count


class TopCollector:
    """Takes views of the mesh as one node sees it; ``snapshot()`` returns one, JSON-ready."""

    def __init__(self, node: Node, timeout: float, events_kept: int = EVENTS_KEPT) -> None:
        self.node = node
        self.timeout = timeout
        self.events: deque[dict[str, Any]] = deque(maxlen=events_kept)
        self._previous: dict[str, Stats] = {}  # node id -> its last answer
        #: CLI probe nodes that joined and left since top joined, and when the latest did.
        self.probes: dict[str, Any] = {"came": 0, "went": 0, "last": None}
        self._reader: asyncio.Future[None] | None = None

    def watch(self, events: AsyncIterator[MeshEvent]) -> None:
        """Keep the latest of these events in every view from now on."""
        self._reader = asyncio.ensure_future(self._read(events))

    async def _read(self, events: AsyncIterator[MeshEvent]) -> None:
        async for event in events:
            now = round(time.time(), 3)
            if event.kind in FOLDED_KINDS and is_cli_probe(event.node_id) and event.node_id != self.node.id:
                if event.kind in ("peer_joined", "peer_left"):
                    self.probes["came" if event.kind == "peer_joined" else "went"] += 1
                self.probes["last"] = now
                continue
            self.events.append({"time": now, "kind": event.kind, "node_id": event.node_id,
                                "agent_id": event.agent_id, "detail": event.detail})

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _ask(self, node_id: str) -> tuple[Stats | None, float | None, str]:
        """(its stats, the round trip in seconds, why not) for one node."""
        started = time.perf_counter()
        try:
            stats = await self.node.peer_stats(node_id, timeout=self.timeout)
        except ZmeshError as exc:
            return None, None, f"{type(exc).__name__}: {exc}"
        return stats, time.perf_counter() - started, ""

    async def snapshot(self) -> dict[str, Any]:
        """One view: every other node of the registry asked at once."""
        node = self.node
        records = [r for r in node.registry.nodes() if r.node_id != node.id]
        # Taken with the records, before the answers are awaited: a view of one moment.
        events = list(self.events)
        probes = {**self.probes, "here": sum(1 for r in records if is_cli_probe(r.node_id))}
        answers = await asyncio.gather(*(self._ask(r.node_id) for r in records))
        nodes: list[dict[str, Any]] = []
        agents: list[dict[str, Any]] = []
        for record, (stats, rtt, error) in zip(records, answers):
            before = self._previous.get(record.node_id)
            if stats is not None:
                self._previous[record.node_id] = stats
            nodes.append(self._node_row(record, stats, before, rtt, error))
            agents.extend(self._agent_row(record, agent_id, stats, before) for agent_id in sorted(record.agents))
        for gone in set(self._previous) - {r.node_id for r in records}:
            del self._previous[gone]
        return {
            "mesh": node.mesh, "observer": node.id, "time": round(time.time(), 3),
            "nodes": nodes, "agents": agents, "events": events, "cli_probes": probes,
        }

    def _node_row(
        self, record: NodeRecord, stats: Stats | None, before: Stats | None, rtt: float | None, error: str
    ) -> dict[str, Any]:
        row: dict[str, Any] = {
            "node_id": record.node_id,
            "cli_probe": is_cli_probe(record.node_id),
            "endpoint": self.node.peer_endpoint(record.node_id) or record.router,
            "incarnation": record.incarnation,
            "agents": len(record.agents),
            "answered": stats is not None,
            "error": error,
            "rtt_ms": None if rtt is None else round(rtt * 1000, 3),
        }
        keys = ("uptime", "peers", "handled", "pending_requests", "dropped_total", "dead_letters")
        row.update({key: None if stats is None else stats.get(key) for key in keys})
        if row["uptime"] is not None:
            row["uptime"] = round(row["uptime"], 3)
        row["sent"] = None if stats is None else _sent(stats)
        # Messages its agents handled and sent: not the stats requests themselves.
        row["handled_per_s"] = _rate(stats, before, lambda s: int(s["handled"]))
        row["sent_per_s"] = _rate(stats, before, _sent)
        return row

    @staticmethod
    def _agent_row(record: NodeRecord, agent_id: str, stats: Stats | None, before: Stats | None) -> dict[str, Any]:
        figures = None if stats is None else stats.get("by_agent", {}).get(agent_id)
        row: dict[str, Any] = {
            "agent_id": agent_id,
            "node_id": record.node_id,
            "capabilities": list(record.agents[agent_id]),
            "subscriptions": sorted(record.subs.get(agent_id, ())),
        }
        for key in ("handled", "running", "concurrency", "inbox", "inbox_size", "dropped", "dead_letters",
                    "requests", "errors"):
            row[key] = None if figures is None else figures.get(key)
        row["average_ms"] = None if figures is None else average_ms(row["requests"], figures.get("request_ms"))
        row["handled_per_s"] = _rate(stats, before, _agent_count(agent_id, "handled"))
        return row


async def _once(collector: TopCollector, interval: float) -> dict[str, Any]:
    """A view with rates: two samples ``interval`` apart."""
    await collector.snapshot()
    await asyncio.sleep(interval)
    return await collector.snapshot()


async def _json_lines(collector: TopCollector, interval: float) -> None:
    """One JSON view per line, every ``interval`` s, until stopped or stdout goes."""
    while True:
        view = await collector.snapshot()
        try:
            print(dumps(view), flush=True)
        except BrokenPipeError:
            stdout_gone()
            return
        await asyncio.sleep(interval)


async def top(args: argparse.Namespace) -> int:
    """``zmesh top``: draw (or with ``--json`` print) views of the mesh; ``--once`` one."""
    node = await join(args)
    collector = TopCollector(node, timeout=args.wait)
    collector.watch(node.events())  # from the moment the join is done
    try:
        if args.once:
            view = await _once(collector, args.interval)
            if args.json:
                print(dumps(view), flush=True)
            else:
                from .view import print_view

                print_view(view)
            return 0
        if args.json:
            await _json_lines(collector, args.interval)
            return 0
        from .view import live

        return await live(collector, args.interval)
    finally:
        await collector.close()
        await node.close()
