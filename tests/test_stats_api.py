"""What ``zmesh top`` shows comes from a public API: ``node.stats()`` with
each agent's figures in ``"by_agent"``, and ``await node.peer_stats(id)``,
which asks another node over the mesh for its ``stats()``. Same on both
transports."""

from __future__ import annotations

import asyncio
import time

import pytest

import zmesh
from zmesh import Message

from .helpers import Mesh, wait_for

AGENT_KEYS = {"handled", "inbox", "inbox_bytes", "running", "waiting_for_thread", "dropped", "dead_letters",
              "concurrency", "inbox_size", "requests", "errors", "request_ms"}


async def poll_stats(asker: zmesh.Node, node_id: str, agent_id: str, want: dict[str, int]) -> dict[str, int]:
    """Ask ``node_id`` for its stats until ``agent_id``'s figures include ``want``."""
    deadline = time.monotonic() + 5
    while True:
        figures = (await asker.peer_stats(node_id, timeout=5))["by_agent"][agent_id]
        if all(figures[k] == v for k, v in want.items()):
            return figures
        assert time.monotonic() < deadline, f"{agent_id} on {node_id}: {figures}, wanted {want}"
        await asyncio.sleep(0.01)


async def test_peer_stats_shows_another_nodes_agents(transport: str) -> None:
    async with Mesh(transport) as m:
        watcher, host = await m.node(name="watcher"), await m.node(name="host")
        a = watcher.agent("a")
        b = host.agent("b", capabilities=("work",), concurrency=1, inbox_size=4)
        release = asyncio.Event()

        async def slow(msg: Message) -> None:
            await release.wait()

        @b.on("fail")
        def fail(msg: Message) -> None:
            raise RuntimeError("no")

        await b.subscribe("ev.*", slow)
        await m.converged()

        with pytest.raises(zmesh.HandlerError):
            await a.request("b", "fail", timeout=5)
        # One broadcast runs (concurrency 1), two wait (broadcasts may fill
        # half the inbox), seven are dropped.
        for i in range(10):
            await a.broadcast("ev.x", i)
        busy = await poll_stats(watcher, "host", "b", {"running": 1, "inbox": 2, "dropped": 7})
        assert set(busy) == AGENT_KEYS
        assert busy["handled"] == 2 and busy["dead_letters"] == 1
        assert busy["concurrency"] == 1 and busy["inbox_size"] == 4 and busy["inbox_bytes"] > 0

        release.set()
        done = await poll_stats(watcher, "host", "b", {"running": 0, "inbox": 0, "handled": 4})
        assert done["dropped"] == 7 and done["inbox_bytes"] == 0

        remote = await watcher.peer_stats("host")
        local = host.stats()
        assert remote["node_id"] == "host" and remote["incarnation"] == host.incarnation
        assert 0 < remote["uptime"] <= local["uptime"]
        assert remote["by_agent"] == local["by_agent"]
        assert remote["handled"] == local["handled"] == 4
        assert remote["dropped"]["slow_subscriber"] == 7
        # The watcher's own stats, asked the same way (and locally).
        mine = await watcher.peer_stats("watcher")
        assert mine["node_id"] == "watcher" and set(mine["by_agent"]) == {"a"}
        assert watcher.stats()["by_agent"]["a"]["handled"] == 0


async def test_a_node_without_agents_can_ask(transport: str) -> None:
    """An observer (``zmesh top``) hosts no agent: it asks as the node itself."""
    async with Mesh(transport) as m:
        host = await m.node()
        host.agent("b")
        observer = await m.node()
        await m.converged()
        assert observer.agents == {}
        stats = await observer.peer_stats(host.id)
        assert stats["node_id"] == host.id and set(stats["by_agent"]) == {"b"}
        assert observer.stats()["dropped_total"] == host.stats()["dropped_total"] == 0  # nothing spoofed


async def test_node_handled_total_keeps_what_departed_agents_handled() -> None:
    async with zmesh.Node("handled", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("x", lambda msg: 1)
        for _ in range(3):
            await a.request("b", "x", timeout=5)
        assert node.stats()["by_agent"]["b"]["handled"] == 3
        await b.close()
        stats = node.stats()
        assert "b" not in stats["by_agent"] and stats["handled"] == 3 and stats["agents"] == 1


async def test_peer_stats_errors(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        await m.converged()
        with pytest.raises(zmesh.PeerLost, match="not a peer"):
            await n1.peer_stats("nobody")
        for bad in (0, -1, "1", True):
            with pytest.raises(zmesh.InvalidMessage):
                await n1.peer_stats(n2.id, timeout=bad)  # type: ignore[arg-type]
        # A node's address takes zmesh.stats requests only.
        with pytest.raises(zmesh.NoHandler, match="zmesh.stats"):
            await a.request(f"zmesh.node.{n2.id}", "other.topic", timeout=5)
        assert [d.reason for d in n2.dead_letters] == ["no_handler"]
        # An agent may ask too: the reply comes back to it.
        reply = await a.request(f"zmesh.node.{n2.id}", "zmesh.stats", timeout=5)
        assert reply.payload["node_id"] == n2.id
        await n1.close()
        with pytest.raises(zmesh.NodeClosed):
            await n1.peer_stats(n2.id)


async def test_peer_stats_of_a_silent_node_times_out() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        await wait_for(lambda: n1.peers == [n2.id])
        n2._dispatch.node_message = lambda msg, origin: None  # type: ignore[method-assign]  # answers nothing
        started = time.monotonic()
        with pytest.raises(zmesh.Timeout):
            await n1.peer_stats(n2.id, timeout=0.2)
        assert time.monotonic() - started < 2
        assert n1.stats()["pending_requests"] == 0 and len(n1.dead_letters) == 0
