"""Presence on every transport (conformance): another node's agents coming
and going, subscribing and unsubscribing, as ``node.events()``."""

from __future__ import annotations

import asyncio

import pytest

import zmesh
from zmesh.errors import FrameError
from zmesh.registry import parse_record

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


async def next_of(events: "asyncio.Queue[zmesh.MeshEvent]", kinds: set[str], agent: str) -> zmesh.MeshEvent:
    while True:
        event = await asyncio.wait_for(events.get(), 10)
        if event.kind in kinds and event.agent_id == agent:
            return event


async def test_agents_and_subscriptions_coming_and_going_are_events(transport: str) -> None:
    async with Mesh(transport) as m:
        watcher, other = await m.node(), await m.node()
        await m.converged()
        queue: asyncio.Queue[zmesh.MeshEvent] = asyncio.Queue()

        async def pump() -> None:
            async for event in watcher.events():
                queue.put_nowait(event)

        pumping = asyncio.ensure_future(pump())
        try:
            await asyncio.sleep(0)
            worker = other.agent("worker")
            joined = await next_of(queue, {"agent_joined"}, "worker")
            assert joined.node_id == other.id
            await worker.subscribe("jobs.>")
            said = await next_of(queue, {"subscribed", "unsubscribed"}, "worker")
            assert (said.kind, said.node_id, said.detail) == ("subscribed", other.id, "jobs.>")
            await worker.unsubscribe("jobs.>")
            said = await next_of(queue, {"subscribed", "unsubscribed"}, "worker")
            assert (said.kind, said.detail) == ("unsubscribed", "jobs.>")
            await worker.close()
            assert (await next_of(queue, {"agent_left"}, "worker")).node_id == other.id
        finally:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)


async def test_an_agents_meta_is_in_every_nodes_registry_and_follows_changes(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        writer = n1.agent("writer", capabilities=("write",), meta={"model": "gpt-4o-mini", "usd_per_mtok": 0.6})
        await m.converged()
        await n2.wait_for_agents("writer", timeout=10)
        assert dict(n2.registry.agents()["writer"].meta) == {"model": "gpt-4o-mini", "usd_per_mtok": 0.6}
        writer.meta = {"model": "local-llama", "gpu": True}
        await n1.settled()
        await wait_for(lambda: n2.registry.agents()["writer"].meta == {"model": "local-llama", "gpu": True}, 10,
                       "the new meta")
        assert dict(writer.meta) == {"model": "local-llama", "gpu": True}
        assert n2.registry.agents()["writer"].capabilities == ("write",)
        assert n1.agent("plain").meta == {}


def test_bad_meta_is_refused_and_a_record_with_bad_meta_is_malformed() -> None:
    node = zmesh.Node("meta-rules", transport="inproc")
    for bad in ({"list": [1]}, {"": 1}, {"k" * 65: 1}, {f"k{i}": i for i in range(17)}, "text", {"s": "x" * 257}):
        with pytest.raises(ValueError, match="meta"):
            node.agent("a", meta=bad)  # type: ignore[arg-type]
    record = {"node": "n", "inc": "1", "mesh": "m", "v": 1, "router": "r", "pub": "p", "seq": 1,
              "agents": {"a": []}, "subs": {}}
    assert parse_record({**record, "meta": {"a": {"model": "x"}}}).meta == {"a": {"model": "x"}}
    for bad_meta in ({"ghost": {}}, {"a": {"k": [1]}}, ["a"]):
        with pytest.raises(FrameError):
            parse_record({**record, "meta": bad_meta})
