"""Every protocol timer of a real node runs on the node's clock: liveness and
healing over real ZeroMQ sockets, driven by a FakeClock, in no real time."""

from __future__ import annotations

import asyncio

import pytest

import zmesh
from zmesh import FakeClock, Message

from .helpers import Mesh, wait_for


async def test_silence_on_the_nodes_clock_expires_a_peer_and_the_pair_heals() -> None:
    clock = FakeClock()
    # A 3 s application expiry, not the long one tests/helpers.py gives fake
    # clocks (ZMTP link heartbeats run in real time, in libzmq, and see no silence).
    fast = zmesh.LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0)
    async with Mesh("zmq", clock=clock, liveness=fast) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        seen: list[Message] = []

        async def hold(msg: Message) -> object:
            seen.append(msg)
            await asyncio.Event().wait()  # never answers; cancelled when n2 closes
            return None

        b.add_handler("hold", hold)
        b.add_handler("echo", lambda msg: "back")
        await m.converged()
        events = n1.events()
        pending = asyncio.ensure_future(a.request("b", "hold", timeout=60))
        await wait_for(lambda: seen, what="the handler to get the request")

        clock.advance(3.5)  # 3.5 s of silence on the nodes' clock; none in real time
        with pytest.raises(zmesh.PeerLost):
            await asyncio.wait_for(pending, 1)  # failed by the expiry, not at its 60 s timeout
        kinds: list[str] = []
        while "peer_left" not in kinds:
            kinds.append((await asyncio.wait_for(events.__anext__(), 1)).kind)
        assert "peer_evasive" in kinds  # pinged at 1.5 s on the fake clock first

        # Both knock again at once (on the links they had): the pair re-forms by itself.
        await wait_for(lambda: n1.peers == [n2.id] and n2.peers == [n1.id], 5, "the pair to re-form")
        assert (await a.request("b", "echo", timeout=5)).payload == "back"


async def test_every_counter_is_in_stats_from_the_start() -> None:
    from zmesh._runtime.stats import COUNTERS

    async with zmesh.Node("fresh", transport="inproc") as node:
        stats = node.stats()
        assert {key: stats[key] for key in COUNTERS} == dict.fromkeys(COUNTERS, 0)
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("x", lambda msg: 1)
        await a.request("b", "x", timeout=5)
        structural = {"dropped", "dropped_total", "pending_requests", "unacked", "peers", "agents", "dead_letters",
                      "transport", "by_agent", "node_id", "incarnation", "uptime"}
        assert set(node.stats()) - structural == set(COUNTERS)  # nothing is counted outside the list
        moved = {key for key in COUNTERS if node.stats()[key]}
        assert {"requests_sent", "handled", "messages_received"} <= moved
