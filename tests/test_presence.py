"""Presence on every transport (conformance): another node's agents coming
and going, subscribing and unsubscribing, as ``node.events()``."""

from __future__ import annotations

import asyncio

import pytest

import zmesh

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh

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
